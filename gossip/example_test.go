package gossip_test

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/raftps/raftps/gossip"
)

// Two members on loopback: n2 joins n1, both see each other with their
// metadata, then n2 leaves gracefully and n1 reports it as left.
func Example() {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	start := func(id string, roles []string, join ...string) *gossip.Gossip {
		cfg := gossip.DefaultConfig()
		cfg.Meta = gossip.Meta{ID: id, Roles: roles, GRPCAddr: "127.0.0.1:7000"}
		cfg.BindAddr = "127.0.0.1:0" // any free port; LocalAddr tells which
		cfg.Join = join
		cfg.Logger = slog.New(slog.DiscardHandler)
		g, err := gossip.New(cfg)
		if err != nil {
			panic(err)
		}
		if err := g.Open(ctx); err != nil {
			panic(err)
		}
		return g
	}

	n1 := start("n1", []string{"server"})
	defer n1.Close()
	events, unsubscribe := n1.Subscribe()
	defer unsubscribe()

	n2 := start("n2", []string{"trainer"}, n1.LocalAddr())
	defer n2.Close()
	if err := n2.Joined(ctx); err != nil {
		panic(err)
	}
	waitFor(events, gossip.EventJoin, "n2")
	for _, m := range n1.Members() {
		fmt.Println(m.Meta.ID, m.Status, m.Meta.Roles)
	}

	if err := n2.Leave(time.Second); err != nil {
		panic(err)
	}
	ev := waitFor(events, gossip.EventLeave, "n2")
	fmt.Println(ev.Type, ev.Member.Meta.ID, ev.Member.Status)

	// Output:
	// n1 alive [server]
	// n2 alive [trainer]
	// leave n2 left
}

func waitFor(events <-chan gossip.Event, typ gossip.EventType, id string) gossip.Event {
	for ev := range events {
		if ev.Type == typ && ev.Member.Meta.ID == id {
			return ev
		}
	}
	panic("events closed")
}
