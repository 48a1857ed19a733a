package raftstore

import (
	"testing"
	"time"

	pb "github.com/raftps/raftps/api/raftpspb"
)

// TestLeaseLastKeepAlive: the leader records when each keepalive of a
// lease arrives (before it looks the lease up), keeps it after the lease's
// revoke, so that read after the revoke it bounds every keepalive that
// succeeded, and forgets it when it steps down (a new leader does not know
// it). Package master builds slot handover records on it.
func TestLeaseLastKeepAlive(t *testing.T) {
	c := mustCluster(t, 3)
	ctx := ctxT(t, 30*time.Second)
	l := c.leader(ctx)
	id, _ := mustGrant(ctx, t, l, 5)
	before := time.Now()
	if _, err := c.follower(ctx).LeaseKeepAlive(ctx, id); err != nil { // forwarded to the leader
		t.Fatal(err)
	}
	at, ok := l.LeaseLastKeepAlive(id)
	if !ok || at.Before(before) || at.After(time.Now()) {
		t.Fatalf("last keepalive %v (known %v), sent at %v", at, ok, before)
	}
	if _, err := l.LeaseRevoke(ctx, &pb.LeaseRevokeRequest{Id: id}); err != nil {
		t.Fatal(err)
	}
	if _, err := l.LeaseKeepAlive(ctx, id); err == nil {
		t.Fatal("keepalive of a revoked lease succeeded")
	}
	// The failed keepalive arrived too: a later bound, never an earlier one.
	if at2, ok := l.LeaseLastKeepAlive(id); !ok || at2.Before(at) {
		t.Fatalf("after the revoke: last keepalive %v (known %v), want at or after %v", at2, ok, at)
	}
	for _, s := range c.live() {
		if s != l {
			if _, ok := s.LeaseLastKeepAlive(id); ok {
				t.Fatalf("%s (a follower) reports a last keepalive", s.cfg.ID)
			}
		}
	}
	l.leases.stepDown()
	if _, ok := l.LeaseLastKeepAlive(id); ok {
		t.Fatal("last keepalive still known after stepping down")
	}
}

// TestLeaseGrantCountsAsArrival: a lease granted in the leader's term has
// its grant recorded as its last arrival, from the moment the grant
// applies, before any keepalive: the holder counts the grant as a renewal
// (pserver/agent's watchdog fences 2/3 TTL after the grant's send), so a
// handover record for a holder that was revoked before its first keepalive
// must count from the grant, not from the earlier start of the leadership.
func TestLeaseGrantCountsAsArrival(t *testing.T) {
	c := mustCluster(t, 1)
	ctx := ctxT(t, 30*time.Second)
	l := c.leader(ctx)
	start, ok := l.LeaderSince()
	if !ok {
		t.Fatal("the leader reports no leadership start")
	}
	sent := time.Now()
	id, _ := mustGrant(ctx, t, l, 5)
	at, ok := l.LeaseLastKeepAlive(id)
	if !ok {
		t.Fatalf("a lease granted in this leader's term (which started %v before the grant) has no recorded arrival", sent.Sub(start))
	}
	if at.Before(sent) || at.After(time.Now()) {
		t.Fatalf("the grant's arrival is recorded at %v, want between the send %v and now", at, sent)
	}
	if _, err := l.LeaseRevoke(ctx, &pb.LeaseRevokeRequest{Id: id}); err != nil {
		t.Fatal(err)
	}
	if at2, ok := l.LeaseLastKeepAlive(id); !ok || !at2.Equal(at) {
		t.Fatalf("after the revoke: last arrival %v (known %v), want the grant's %v", at2, ok, at)
	}
}
