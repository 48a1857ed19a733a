package raftstore

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/raft"
)

// stallLogs is a raft.LogStore whose StoreLogs blocks, once stall is
// called, until release: the Raft leader loop writes its log through it,
// so a write then stalls the whole loop (a hung fsync).
type stallLogs struct {
	raft.LogStore
	mu      sync.Mutex
	gate    chan struct{} // nil: pass through
	blocked chan struct{} // closed when a StoreLogs call first blocks on gate
	once    sync.Once
}

func newStallLogs(l raft.LogStore) *stallLogs {
	return &stallLogs{LogStore: l, blocked: make(chan struct{})}
}

func (l *stallLogs) stall() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.gate == nil {
		l.gate = make(chan struct{})
	}
}

func (l *stallLogs) release() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.gate != nil {
		close(l.gate)
		l.gate = nil
	}
}

func (l *stallLogs) StoreLog(log *raft.Log) error { return l.StoreLogs([]*raft.Log{log}) }

func (l *stallLogs) StoreLogs(logs []*raft.Log) error {
	l.mu.Lock()
	g := l.gate
	l.mu.Unlock()
	if g != nil {
		l.once.Do(func() { close(l.blocked) })
		<-g
	}
	return l.LogStore.StoreLogs(logs)
}

// mustStallNetCluster is mustNetCluster with every store's log store
// wrapped in a stallLogs (passing through until stalled).
func mustStallNetCluster(t *testing.T, n int) (*netCluster, map[*Store]*stallLogs) {
	t.Helper()
	var mu sync.Mutex
	logs := map[*Store]*stallLogs{}
	nc := mustNetCluster(t, n, func(s *Store) {
		s.wrapLogs = func(l raft.LogStore) raft.LogStore {
			sl := newStallLogs(l)
			mu.Lock()
			logs[s] = sl
			mu.Unlock()
			return sl
		}
	})
	return nc, logs
}

// TestStalledLeaderRefusesKeepAlive (etcd-io/etcd#15247): a leader whose
// Raft loop is stalled in its log store (a write blocks in StoreLogs) and
// which is cut off, so that the others elect a new leader, still believes
// it leads (its step-down check runs in the stalled loop). Keepalives do
// not go through the loop: without a leadership check it renews leases
// indefinitely while the new leader expires them. With the check, each
// keepalive on it is refused with ErrNotLeader within the confirmation
// bound (Config.ElectionTimeout), and the client fences or retries
// elsewhere. LeaseTimeToLive, which reads the same timers, is refused
// the same way.
func TestStalledLeaderRefusesKeepAlive(t *testing.T) {
	nc, logs := mustStallNetCluster(t, 3)
	ctx := ctxT(t, 60*time.Second)
	old := nc.leader(ctx)
	id, _ := mustGrant(ctx, t, old, 30)
	if _, err := old.LeaseKeepAliveLocal(ctx, id); err != nil {
		t.Fatalf("keepalive on the healthy leader: %v", err)
	}

	sl := logs[old]
	sl.stall()
	t.Cleanup(sl.release) // runs before the stores close
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go put(wctx, t, old, "/stall", "v") //nolint:errcheck // blocks until released
	select {
	case <-sl.blocked:
	case <-ctx.Done():
		t.Fatal("the leader's log write never reached the log store")
	}
	nc.isolate(old)
	nl := leaderOf(ctx, t, others(nc.live(), old)...)
	t.Logf("stalled %s; %s elected", old.cfg.ID, nl.cfg.ID)
	if !old.IsLeader() {
		t.Fatal("the stalled leader stepped down: the test does not stall its Raft loop")
	}

	// Keepalives on the stalled leader, over a few election timeouts after
	// the new leader's election: every one is refused, each within the bound.
	bound := old.cfg.ElectionTimeout + 2*time.Second // the confirmation timeout plus scheduling slack under load
	deadline := time.Now().Add(3 * old.cfg.ElectionTimeout)
	n := 0
	for n < 3 || time.Now().Before(deadline) {
		start := time.Now()
		kctx, kcancel := context.WithTimeout(ctx, 10*time.Second)
		_, err := old.LeaseKeepAliveLocal(kctx, id)
		kcancel()
		took := time.Since(start)
		if err == nil {
			t.Fatalf("keepalive %d accepted by the stalled, replaced leader (%s leads now)", n, nl.cfg.ID)
		}
		if !errors.Is(err, ErrNotLeader) {
			t.Fatalf("keepalive %d refused with %v, want ErrNotLeader", n, err)
		}
		if took > bound {
			t.Fatalf("keepalive %d refused after %v, want within %v", n, took, bound)
		}
		// Its lease timers are as stale: a TimeToLive there is refused too.
		kctx, kcancel = context.WithTimeout(ctx, 10*time.Second)
		ttl, err := old.LeaseTimeToLiveLocal(kctx, id)
		kcancel()
		if !errors.Is(err, ErrNotLeader) {
			t.Fatalf("time-to-live %d on the stalled, replaced leader: ttl %d, err %v, want ErrNotLeader", n, ttl, err)
		}
		n++
	}
	if !old.IsLeader() {
		t.Fatal("the stalled leader stepped down during the test")
	}
	// The new leader serves the lease.
	if _, err := nl.LeaseKeepAliveLocal(ctx, id); err != nil {
		t.Fatalf("keepalive on the new leader: %v", err)
	}
}

// TestKeepAliveLeaderCheckCoalesced: concurrent keepalives share
// leadership confirmations (far fewer VerifyLeader rounds than
// keepalives), and every round that acknowledges a keepalive started after
// it arrived (each keepalive waits for a round it saw start or queued).
func TestKeepAliveLeaderCheckCoalesced(t *testing.T) {
	c := mustCluster(t, 3)
	ctx := ctxT(t, 30*time.Second)
	l := c.leader(ctx)
	id, _ := mustGrant(ctx, t, l, 30)
	r0 := l.leases.check.rounds.Load()
	const n = 200
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			before := l.leases.check.rounds.Load()
			if _, err := l.LeaseKeepAliveLocal(ctx, id); err != nil {
				errs <- err
				return
			}
			// A round that started after this keepalive arrived ended.
			if l.leases.check.rounds.Load() <= before {
				errs <- errors.New("keepalive acknowledged without a round started after it")
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	rounds := l.leases.check.rounds.Load() - r0
	t.Logf("%d keepalives, %d VerifyLeader rounds", n, rounds)
	if rounds == 0 || rounds >= n/2 {
		t.Fatalf("%d VerifyLeader rounds for %d concurrent keepalives, want between 1 and %d", rounds, n, n/2)
	}
}

// TestLeaderSince: the leader reports when it established leadership
// (after the election), followers report nothing; after a leadership
// transfer the new leader's start is after the transfer began.
func TestLeaderSince(t *testing.T) {
	c := mustCluster(t, 3)
	ctx := ctxT(t, 30*time.Second)
	l := c.leader(ctx)
	at, ok := l.LeaderSince()
	if !ok || at.After(time.Now()) {
		t.Fatalf("leader: since %v, ok %v", at, ok)
	}
	for _, s := range others(c.live(), l) {
		if _, ok := s.LeaderSince(); ok {
			t.Fatalf("follower %s reports a leadership start", s.cfg.ID)
		}
	}
	before := time.Now()
	if err := l.raft.LeadershipTransfer().Error(); err != nil {
		t.Fatal(err)
	}
	nl := c.leader(ctx)
	for nl == l {
		time.Sleep(10 * time.Millisecond)
		nl = c.leader(ctx)
	}
	var at2 time.Time
	for {
		if at2, ok = nl.LeaderSince(); ok {
			break
		}
		select {
		case <-ctx.Done():
			t.Fatal("new leader never established leadership")
		case <-time.After(10 * time.Millisecond):
		}
	}
	if at2.Before(before) {
		t.Fatalf("new leader's start %v is before the transfer began (%v)", at2, before)
	}
	if _, ok := l.LeaderSince(); ok {
		t.Fatal("the old leader still reports a leadership start")
	}
}

// BenchmarkLeaseKeepAlive3Node measures LeaseKeepAlive on the leader of a
// 3-node cluster (loopback TCP), 1 and 64 concurrent clients: each is
// confirmed by a coalesced VerifyLeader round.
//
//	go test -run '^$' -bench LeaseKeepAlive3Node -benchtime 2000x ./raftstore/
func BenchmarkLeaseKeepAlive3Node(b *testing.B) {
	c := mustCluster(b, 3)
	ctx := context.Background()
	l := c.leader(ctx)
	id, _ := mustGrant(ctx, b, l, 60)
	runClients(b, c, func(int64) error {
		_, err := l.LeaseKeepAlive(ctx, id)
		return err
	})
}
