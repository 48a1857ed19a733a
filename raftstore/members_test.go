package raftstore

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"github.com/raftps/raftps/fsm"
)

// TestAddAndPromoteMember: AddMember adds a non-voter that replicates;
// an id or address already present is fsm.ErrExists, a follower answers
// ErrNotLeader; PromoteMember makes it a voter, refuses a voter with
// fsm.ErrFailedPrecondition and an unknown id with fsm.ErrNotFound.
func TestAddAndPromoteMember(t *testing.T) {
	c := mustCluster(t, 1)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	l := c.leader(ctx)
	cfg := testConfig(t, "n2", t.TempDir())
	s2, err := New(cfg, fsm.New(nil), directForwarder{c})
	if err != nil {
		t.Fatal(err)
	}
	if err := s2.Open(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s2.Close() })
	c.mu.Lock()
	c.stores = append(c.stores, s2)
	c.mu.Unlock()

	if err := l.AddMember(ctx, "n2", s2.Addr(), false); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ id, addr string }{{"n2", "127.0.0.1:1"}, {"n9", s2.Addr()}, {"n9", l.Addr()}} {
		if err := l.AddMember(ctx, tc.id, tc.addr, true); !errors.Is(err, fsm.ErrExists) {
			t.Fatalf("AddMember(%s, %s): %v, want fsm.ErrExists", tc.id, tc.addr, err)
		}
	}
	mustPut(ctx, t, l, "/m/a", "1")
	for {
		if v, ok, err := get(ctx, s2, "/m/a", true); err == nil && ok && v == "1" {
			break
		}
		select {
		case <-ctx.Done():
			t.Fatal("non-voter n2 never applied the put")
		case <-time.After(10 * time.Millisecond):
		}
	}
	if err := s2.AddMember(ctx, "n3", "127.0.0.1:2", false); !errors.Is(err, ErrNotLeader) {
		t.Fatalf("AddMember on a non-voter: %v, want ErrNotLeader", err)
	}
	if err := l.PromoteMember(ctx, "n9"); !errors.Is(err, fsm.ErrNotFound) {
		t.Fatalf("PromoteMember(n9): %v, want fsm.ErrNotFound", err)
	}
	if err := l.PromoteMember(ctx, "n1"); !errors.Is(err, fsm.ErrFailedPrecondition) {
		t.Fatalf("PromoteMember(n1): %v, want fsm.ErrFailedPrecondition", err)
	}
	if err := l.PromoteMember(ctx, "n2"); err != nil {
		t.Fatal(err)
	}
	servers, err := l.Configuration()
	if err != nil {
		t.Fatal(err)
	}
	for _, srv := range servers {
		if srv.Suffrage != raft.Voter {
			t.Fatalf("after promote: %+v", servers)
		}
	}
	if len(servers) != 2 {
		t.Fatalf("after promote: %+v", servers)
	}
}
