package raftstore

import (
	"errors"
	"math"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	pb "github.com/raftps/raftps/api/raftpspb"
	"github.com/raftps/raftps/fsm"
)

// TestLeaseCallsWaitForOwnTerm (issue 12, item 4): a new leader whose FSM
// has not applied the entries committed before its term (here: a follower
// whose FSM is held back when leadership moves to it) must not answer
// NotFound for a live lease: LeaseKeepAliveLocal and LeaseTimeToLiveLocal
// wait for the own-term barrier, as reads do, and then see the lease.
func TestLeaseCallsWaitForOwnTerm(t *testing.T) {
	c := mustCluster(t, 3)
	ctx := ctxT(t, 30*time.Second)
	old := c.leader(ctx)
	next := c.follower(ctx)

	// Hold next's FSM: the first entry it applies from now on blocks it.
	var hold atomic.Bool
	release := make(chan struct{})
	held := make(chan struct{}, 1)
	next.Observe(observerFunc(func(fsm.Notification) {
		if hold.Load() {
			select {
			case held <- struct{}{}:
			default:
			}
			<-release
		}
	}))
	hold.Store(true)
	mustPut(ctx, t, old, "/k", "v") // next's FSM blocks on this entry
	select {
	case <-held:
	case <-ctx.Done():
		t.Fatal("follower's FSM never applied the put")
	}
	id, _ := mustGrant(ctx, t, old, 30) // committed by old and the third node; not in next's FSM
	if _, ok := next.FSM().Lease(id); ok {
		t.Fatal("setup: the held FSM has the lease already")
	}

	if err := old.Raft().LeadershipTransferToServer(raft.ServerID(next.cfg.ID), raft.ServerAddress(next.Addr())).Error(); err != nil {
		close(release)
		t.Fatalf("leadership transfer: %v", err)
	}
	for !next.IsLeader() {
		select {
		case <-ctx.Done():
			close(release)
			t.Fatal("next never led")
		case <-time.After(5 * time.Millisecond):
		}
	}
	// Let the FSM go after a while; the lease calls must wait for it.
	go func() {
		time.Sleep(300 * time.Millisecond)
		hold.Store(false)
		close(release)
	}()
	if ttl, err := next.LeaseKeepAliveLocal(ctx, id); err != nil || ttl != 30 {
		t.Fatalf("keepalive on a leader before its own term applied: ttl %d, %v", ttl, err)
	}
	if left, err := next.LeaseTimeToLiveLocal(ctx, id); err != nil || left < 29 || left > 30 {
		t.Fatalf("time to live on the new leader: %d, %v", left, err)
	}
	// A lease that does not exist is still NotFound.
	if _, err := next.LeaseKeepAliveLocal(ctx, id+1000); !errors.Is(err, fsm.ErrLeaseNotFound) {
		t.Fatalf("keepalive of an unknown lease: %v", err)
	}
}

// TestLeaseTTLBound (issue 12, item 12): a TTL above fsm.MaxLeaseTTL (9e9 s,
// etcd's bound) is refused with ErrLeaseTTLTooLarge before anything is
// proposed (no log entry), on the typed method and on a raw command
// forwarded from a follower, instead of a grant whose deadline overflows
// and that is revoked at once; MaxLeaseTTL itself is granted and stays alive.
func TestLeaseTTLBound(t *testing.T) {
	c := mustCluster(t, 3)
	ctx := ctxT(t, 30*time.Second)
	f := c.follower(ctx)
	l := c.leader(ctx)
	last := l.Raft().LastIndex()
	for _, ttl := range []int64{fsm.MaxLeaseTTL + 1, 9_300_000_000, math.MaxInt64} {
		if _, err := f.LeaseGrant(ctx, &pb.LeaseGrantRequest{Ttl: ttl}); !errors.Is(err, fsm.ErrLeaseTTLTooLarge) {
			t.Fatalf("typed grant of ttl %d: %v, want ErrLeaseTTLTooLarge", ttl, err)
		}
		cmd, err := fsm.NewCommand(pb.CommandType_COMMAND_LEASE_GRANT, &pb.LeaseGrantRequest{Ttl: ttl})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := f.Apply(ctx, cmd); !errors.Is(err, fsm.ErrLeaseTTLTooLarge) {
			t.Fatalf("forwarded grant of ttl %d: %v, want ErrLeaseTTLTooLarge", ttl, err)
		}
	}
	if got := l.Raft().LastIndex(); got != last {
		t.Fatalf("refused grants were proposed: last index %d -> %d", last, got)
	}
	if len(f.FSM().Leases()) != 0 {
		t.Fatalf("a refused grant left a lease: %v", f.FSM().Leases())
	}
	resp, err := f.LeaseGrant(ctx, &pb.LeaseGrantRequest{Ttl: fsm.MaxLeaseTTL})
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(300 * time.Millisecond) // several expiry ticks
	left, err := f.LeaseTimeToLive(ctx, resp.Id)
	if err != nil || left < fsm.MaxLeaseTTL-1 {
		t.Fatalf("lease of the maximum TTL: %d s left, %v", left, err)
	}
}

// TestTTLDurationDoesNotOverflow: a TTL the FSM may hold from before the
// bound (or a snapshot) still gives a positive deadline.
func TestTTLDurationDoesNotOverflow(t *testing.T) {
	for _, ttl := range []int64{1, fsm.MaxLeaseTTL, fsm.MaxLeaseTTL + 1, math.MaxInt64} {
		if d := ttlDuration(ttl); d <= 0 || d > time.Duration(fsm.MaxLeaseTTL)*time.Second {
			t.Fatalf("ttlDuration(%d) = %v", ttl, d)
		}
	}
}
