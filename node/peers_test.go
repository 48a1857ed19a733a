package node

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/raftps/raftps/gossip"
	"github.com/raftps/raftps/pserver/checkpoint"
	"github.com/raftps/raftps/schema"
)

var _ checkpoint.Membership = gossipPeers{}

// TestGossipPeersIsMember: a node gossip lists is a member for the
// checkpoint restore (its replicas are waited for); once it left, or if
// gossip never knew it, it is not (its replicas count as missing). An
// alive pserver node is a backup candidate with its data path address and
// its zone (--zone), which backup placement spreads over.
func TestGossipPeersIsMember(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	start := func(id string, join ...string) *gossip.Gossip {
		cfg := gossip.DefaultConfig()
		cfg.Meta = gossip.Meta{ID: id, GRPCAddr: "127.0.0.1:7000", Roles: []string{gossip.RolePServer},
			PServerAddr: "127.0.0.1:7" + id[1:] + "02", Zone: "zone-" + id}
		cfg.BindAddr = "127.0.0.1:0"
		cfg.Join = join
		cfg.Logger = slog.New(slog.DiscardHandler)
		g, err := gossip.New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		if err := g.Open(ctx); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { g.Close() })
		return g
	}
	n1 := start("n1")
	events, unsubscribe := n1.Subscribe()
	defer unsubscribe()
	n2 := start("n2", n1.LocalAddr())
	if err := n2.Joined(ctx); err != nil {
		t.Fatal(err)
	}
	waitEvent := func(typ gossip.EventType) {
		t.Helper()
		for {
			select {
			case ev := <-events:
				if ev.Type == typ && ev.Member.Meta.ID == "n2" {
					return
				}
			case <-ctx.Done():
				t.Fatalf("no %v event of n2", typ)
			}
		}
	}
	waitEvent(gossip.EventJoin)
	p := gossipPeers{g: n1, self: "n1"}
	if !p.IsMember("n2") || p.IsMember("n9") {
		t.Fatalf("alive n2 member %v, unknown n9 member %v", p.IsMember("n2"), p.IsMember("n9"))
	}
	var n2peer schema.ReplicaMember
	for _, m := range p.PServerPeers() {
		if m.Node == "n2" {
			n2peer = m
		}
	}
	if n2peer != (schema.ReplicaMember{Node: "n2", Addr: "127.0.0.1:7202", Zone: "zone-n2"}) {
		t.Fatalf("n2 as a backup candidate: %+v, want its pserver address and zone", n2peer)
	}
	if err := n2.Leave(time.Second); err != nil {
		t.Fatal(err)
	}
	waitEvent(gossip.EventLeave)
	if p.IsMember("n2") {
		t.Fatal("n2 left but is still a member")
	}
}
