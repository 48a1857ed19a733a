package node

import (
	"context"
	"testing"
	"time"

	etcdpb "go.etcd.io/etcd/api/v3/etcdserverpb"

	"github.com/raftps/raftps/gossip"
	"github.com/raftps/raftps/master"
)

// TestPServerLeaseTTL: --pserver-lease-ttl reaches the pserver agent's
// session: the node's pserver lease is granted with that TTL.
func TestPServerLeaseTTL(t *testing.T) {
	cfg := testConfig(t, "n1")
	cfg.Roles = []string{gossip.RoleServer, gossip.RolePServer}
	cfg.PServerLeaseTTL = 3 * time.Second
	n := mustOpen(t, cfg)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cl := etcdpb.NewLeaseClient(dial(t, n.GRPCAddr()))
	var granted []int64
	for ctx.Err() == nil {
		granted = granted[:0]
		resp, err := cl.LeaseLeases(ctx, &etcdpb.LeaseLeasesRequest{})
		if err == nil {
			for _, l := range resp.Leases {
				if ttl, err := cl.LeaseTimeToLive(ctx, &etcdpb.LeaseTimeToLiveRequest{ID: l.ID}); err == nil {
					granted = append(granted, ttl.GrantedTTL)
					if ttl.GrantedTTL == 3 {
						return
					}
				}
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("no lease granted with TTL 3 s within 30 s; granted TTLs: %v", granted)
}

// TestPServerFailoverTimeout: --pserver-failover-timeout reaches the
// node's master.Suspects (the probe deadline of a reported primary), and
// the default is master.DefaultFailoverTimeout.
func TestPServerFailoverTimeout(t *testing.T) {
	if d := DefaultConfig().PServerFailoverTimeout; d != master.DefaultFailoverTimeout {
		t.Fatalf("default --pserver-failover-timeout %v, want %v", d, master.DefaultFailoverTimeout)
	}
	cfg := testConfig(t, "n1")
	cfg.PServerFailoverTimeout = 700 * time.Millisecond
	n := mustOpen(t, cfg)
	if n.suspects == nil {
		t.Fatal("the node takes no suspect reports")
	}
	if got := n.suspects.Timeout(); got != 700*time.Millisecond {
		t.Fatalf("the node's suspect reports use timeout %v, want 700ms", got)
	}
}
