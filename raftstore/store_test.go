package raftstore

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/raft"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	pb "github.com/raftps/raftps/api/raftpspb"
	"github.com/raftps/raftps/fsm"
)

func TestConfigValidate(t *testing.T) {
	ok := DefaultConfig()
	ok.ID, ok.DataDir, ok.RaftAddr = "n1", "/tmp/x", ":0"
	for _, tc := range []struct {
		name string
		edit func(*Config)
		ok   bool
	}{
		{"defaults", func(*Config) {}, true},
		{"no id", func(c *Config) { c.ID = "" }, false},
		{"no data dir", func(c *Config) { c.DataDir = "" }, false},
		{"wal", func(c *Config) { c.LogStore = LogStoreWAL }, true},
		{"unknown log store", func(c *Config) { c.LogStore = "rocksdb" }, false},
		{"lease > heartbeat", func(c *Config) { c.LeaderLeaseTimeout = time.Second }, false},
		{"bootstrap servers without self", func(c *Config) {
			c.Bootstrap = true
			c.BootstrapServers = []raft.Server{{ID: "n2", Address: "x:1"}}
		}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := ok
			tc.edit(&c)
			if err := c.Validate(); (err == nil) != tc.ok {
				t.Fatalf("Validate() = %v, want ok=%v", err, tc.ok)
			}
		})
	}
	if got := ok.MinLeaseTTL(); got != 1 {
		t.Fatalf("MinLeaseTTL = %d, want 1 (1.5 x 500ms rounded up)", got)
	}
}

func TestLifecycle(t *testing.T) { forEachLogStore(t, testLifecycle) }

func testLifecycle(t *testing.T) {
	dir := t.TempDir()
	cfg := testConfig(t, "n1", dir)
	cfg.Bootstrap = true
	s, err := New(cfg, fsm.New(nil), nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Apply(context.Background(), putCmd(t, "k", "v", 0)); !errors.Is(err, ErrNotOpen) {
		t.Fatalf("Apply before Open: %v", err)
	}
	if err := s.Open(); err != nil {
		t.Fatal(err)
	}
	if err := s.Open(); !errors.Is(err, ErrOpen) {
		t.Fatalf("second Open = %v, want ErrOpen", err)
	}
	ctx := ctxT(t, 10*time.Second)
	var notes atomic.Int64
	s.Observe(observerFunc(func(fsm.Notification) { notes.Add(1) }))
	rev := mustPut(ctx, t, s, "k", "v1")
	if notes.Load() == 0 {
		t.Fatal("Observe: no notification after a put")
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatalf("second Close = %v", err)
	}

	// Restart on the same data dir with Bootstrap still set: state is kept.
	s2, err := New(cfg, fsm.New(nil), nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := s2.Open(); err != nil {
		t.Fatal(err)
	}
	defer s2.Close()
	if v, _, err := get(ctx, s2, "k", false); err != nil || v != "v1" {
		t.Fatalf("after restart: %q, %v", v, err)
	}
	if got := s2.FSM().Revision(); got != rev {
		t.Fatalf("revision after restart = %d, want %d", got, rev)
	}
}

func TestDataDirMismatch(t *testing.T) {
	dir := t.TempDir()
	cfg := testConfig(t, "n1", dir)
	cfg.Bootstrap = true
	s, err := New(cfg, fsm.New(nil), nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Open(); err != nil {
		t.Fatal(err)
	}
	s.Close()

	cfg.ID = "n2"
	s2, err := New(cfg, fsm.New(nil), nil)
	if err != nil {
		t.Fatal(err)
	}
	err = s2.Open()
	if !errors.Is(err, ErrDataDirMismatch) {
		t.Fatalf("Open with another id = %v, want ErrDataDirMismatch", err)
	}
	t.Log(err)
	if err := s2.Close(); !errors.Is(err, ErrNotOpen) {
		t.Fatalf("Close of unopened store = %v", err)
	}
}

func TestFollowerWriteAndMembership(t *testing.T) {
	c := mustCluster(t, 3)
	ctx := ctxT(t, 20*time.Second)
	f := c.follower(ctx)
	rev := mustPut(ctx, t, f, "/a", "1")
	for _, s := range c.live() {
		v, ok, err := get(ctx, s, "/a", false)
		if err != nil || !ok || v != "1" {
			t.Fatalf("%s: get = %q %v %v", s.cfg.ID, v, ok, err)
		}
	}
	// A rejected command surfaces the FSM's sentinel through forwarding.
	if _, err := applyRetry(ctx, f, putCmd(t, "", "x", 0)); !errors.Is(err, fsm.ErrInvalid) {
		t.Fatalf("empty key via follower = %v, want fsm.ErrInvalid", err)
	}
	if st := f.Stats(); st.Revision < rev || st.LeaderID == "" || st.State != "Follower" {
		t.Fatalf("follower stats %+v", st)
	}
	// Leader-only calls.
	if err := f.Join(ctx, "x", "127.0.0.1:1", true); !errors.Is(err, ErrNotLeader) {
		t.Fatalf("Join on follower = %v", err)
	}
	if _, err := f.ApplyLocal(ctx, putCmd(t, "/b", "1", 0)); !errors.Is(err, ErrNotLeader) {
		t.Fatalf("ApplyLocal on follower = %v", err)
	}
	// Join and Remove are idempotent.
	l := c.leader(ctx)
	if err := l.Join(ctx, f.cfg.ID, f.Addr(), true); err != nil {
		t.Fatalf("re-join: %v", err)
	}
	if err := l.Join(ctx, f.cfg.ID, f.Addr(), false); err != nil {
		t.Fatalf("demote: %v", err)
	}
	if err := l.Join(ctx, f.cfg.ID, f.Addr(), true); err != nil {
		t.Fatalf("promote: %v", err)
	}
	if err := l.Remove(ctx, "nope"); err != nil {
		t.Fatalf("remove absent: %v", err)
	}
	servers, err := l.Configuration()
	if err != nil || len(servers) != 3 {
		t.Fatalf("configuration %v %v", servers, err)
	}
	for _, srv := range servers {
		if srv.Suffrage != raft.Voter {
			t.Fatalf("%s is %v after promote", srv.ID, srv.Suffrage)
		}
	}
	// Every server learns the same cluster ID.
	for deadline := time.Now().Add(5 * time.Second); ; {
		ids := map[string]bool{}
		for _, s := range c.live() {
			ids[s.ClusterID()] = true
		}
		if len(ids) == 1 && !ids[""] {
			t.Logf("cluster id %v", ids)
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("cluster ids %v", ids)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func TestClusterIDMismatch(t *testing.T) {
	dir := t.TempDir()
	logs := raft.NewInmemStore()
	if id, err := checkClusterID(dir, logs); err != nil || id != "" {
		t.Fatalf("empty log: %q %v", id, err)
	}
	logs.StoreLog(&raft.Log{Index: 1, Term: 1, Type: raft.LogConfiguration, Data: []byte("cfg-a")})
	id, err := checkClusterID(dir, logs)
	if err != nil || id == "" {
		t.Fatalf("first: %q %v", id, err)
	}
	if again, err := checkClusterID(dir, logs); err != nil || again != id {
		t.Fatalf("again: %q %v", again, err)
	}
	other := raft.NewInmemStore()
	other.StoreLog(&raft.Log{Index: 1, Term: 1, Type: raft.LogConfiguration, Data: []byte("cfg-b")})
	if _, err := checkClusterID(dir, other); !errors.Is(err, ErrDataDirMismatch) {
		t.Fatalf("other cluster's log = %v, want ErrDataDirMismatch", err)
	} else {
		t.Log(err)
	}
}

// TestLeaderFailover: clients write through every node while the leader
// crashes; a new leader must be elected within 3 s, no acknowledged write
// may be lost, and a linearizable read never returns a value older than
// the last acknowledged write of its key.
func TestLeaderFailover(t *testing.T) { forEachLogStore(t, testLeaderFailover) }

func testLeaderFailover(t *testing.T) {
	c := mustCluster(t, 3)
	ctx := ctxT(t, 60*time.Second)
	old := c.leader(ctx)

	const writers = 4
	var (
		mu    sync.Mutex
		acked = map[string]int{} // key → highest acknowledged value
		stale atomic.Int64
		stop  = make(chan struct{})
		wg    sync.WaitGroup
	)
	for w := 0; w < writers; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			key := fmt.Sprintf("/w/%d", w)
			for i := 1; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				live := c.live()
				s := live[rand.IntN(len(live))]
				wctx, cancel := context.WithTimeout(ctx, 5*time.Second)
				_, err := put(wctx, t, s, key, fmt.Sprint(i))
				cancel()
				if err != nil {
					continue // not acknowledged: may or may not be applied
				}
				mu.Lock()
				acked[key] = i
				mu.Unlock()
				// Read back through a random live node: never older than i.
				live = c.live()
				r := live[rand.IntN(len(live))]
				rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
				v, _, err := get(rctx, r, key, false)
				cancel()
				var got int
				fmt.Sscan(v, &got)
				if err == nil && got < i {
					stale.Add(1)
					t.Errorf("stale read on %s: %s = %d after ack of %d", r.cfg.ID, key, got, i)
				}
			}
		}(w)
	}
	time.Sleep(500 * time.Millisecond)
	start := time.Now()
	c.crash(old)
	var elected time.Duration
	for {
		var l *Store
		for _, s := range c.live() {
			if s.IsLeader() {
				l = s
			}
		}
		if l != nil {
			elected = time.Since(start)
			break
		}
		if time.Since(start) > 3*time.Second {
			t.Fatalf("no new leader within 3 s")
		}
		time.Sleep(time.Millisecond)
	}
	// Time to the first write committed by the new leader.
	var firstWrite time.Duration
	for {
		wctx, cancel := context.WithTimeout(ctx, time.Second)
		_, err := put(wctx, t, c.leader(ctx), "/probe", "x")
		cancel()
		if err == nil {
			firstWrite = time.Since(start)
			break
		}
	}
	t.Logf("leader crash → new leader elected in %v, first committed write after %v", elected, firstWrite)
	time.Sleep(time.Second)
	close(stop)
	wg.Wait()

	mu.Lock()
	defer mu.Unlock()
	for _, s := range c.live() {
		for k, want := range acked {
			v, _, err := get(ctx, s, k, false)
			var got int
			fmt.Sscan(v, &got)
			if err != nil || got < want {
				t.Errorf("%s: %s = %q (%v), acknowledged %d: acknowledged write lost", s.cfg.ID, k, v, err, want)
			}
		}
	}
	t.Logf("acknowledged writes per key: %v; stale reads: %d", acked, stale.Load())
	if len(acked) < writers {
		t.Fatalf("only %d of %d writers got an acknowledgement", len(acked), writers)
	}
}

func TestLinearizableReadAfterLeaderChange(t *testing.T) {
	c := mustCluster(t, 3)
	ctx := ctxT(t, 30*time.Second)
	old := c.leader(ctx)
	mustPut(ctx, t, old, "k", "old")
	c.crash(old)
	// Before any new write the logs end in the new leader's no-op and
	// barrier, which never reach the FSM: reads must not wait for them.
	for _, s := range c.live() {
		t0 := time.Now()
		v, _, err := get(ctx, s, "k", false)
		if err != nil || v != "old" {
			t.Fatalf("%s: linearizable get = %q, %v; want old", s.cfg.ID, v, err)
		}
		t.Logf("%s: first linearizable read after the crash took %v", s.cfg.ID, time.Since(t0))
	}
	// Through a follower: forwarded to the leader.
	s := c.follower(ctx)
	mustPut(ctx, t, s, "k", "new")
	for _, s := range c.live() {
		for i := 0; i < 20; i++ {
			v, _, err := get(ctx, s, "k", false)
			if err != nil || v != "new" {
				t.Fatalf("%s: linearizable get = %q, %v; want new", s.cfg.ID, v, err)
			}
		}
	}
}

// TestWatchResume: a watcher that disconnects and resumes from its last
// revision + 1 sees every event once, in order.
func TestWatchResume(t *testing.T) {
	c := mustCluster(t, 3)
	ctx := ctxT(t, 30*time.Second)
	l := c.leader(ctx)
	f := c.follower(ctx)
	start := mustPut(ctx, t, l, "/other", "x") + 1

	const total = 120
	writes := make(chan struct{})
	go func() {
		defer close(writes)
		for i := 0; i < total; i++ {
			s := l
			if i%2 == 1 {
				s = f
			}
			if _, err := put(ctx, t, s, fmt.Sprintf("/w/%03d", i), "v"); err != nil {
				t.Errorf("put: %v", err)
			}
			if i%10 == 0 {
				if _, err := put(ctx, t, l, "/other", "y"); err != nil { // not matching the watch
					t.Errorf("put: %v", err)
				}
			}
		}
	}()

	var got []*pb.Event
	next := start
	for round := 0; len(got) < total; round++ {
		wctx, cancel := context.WithCancel(ctx)
		ch, err := f.Watch(wctx, &pb.WatchRequest{Key: []byte("/w/"), RangeEnd: []byte("/w0"), StartRevision: next})
		if err != nil {
			t.Fatal(err)
		}
		// Take a few responses, then "disconnect".
		for n := 0; n < 3 && len(got) < total; n++ {
			resp, ok := <-ch
			if !ok {
				t.Fatal("watch closed early")
			}
			if resp.Canceled {
				t.Fatalf("canceled: %s", resp.CancelReason)
			}
			got = append(got, resp.Events...)
			next = resp.Events[len(resp.Events)-1].Kv.ModRevision + 1
		}
		cancel()
		for range ch { // drain until closed
		}
	}
	<-writes
	if err := l.LinearizableRead(ctx); err != nil {
		t.Fatal(err)
	}
	// The watcher saw exactly the FSM's history of the range: same events,
	// same order, nothing missing, nothing twice.
	want, err := l.FSM().Events([]byte("/w/"), []byte("/w0"), start, 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) < len(want) {
		t.Fatalf("watch got %d events, history has %d", len(got), len(want))
	}
	got = got[:len(want)] // writes after the last one we waited for
	var prev int64
	for i, e := range got {
		w := want[i]
		if e.Kv.ModRevision != w.Kv.ModRevision || string(e.Kv.Key) != string(w.Kv.Key) || e.Type != w.Type {
			t.Fatalf("event %d: got %s@%d, history has %s@%d (gap, duplicate or reorder)",
				i, e.Kv.Key, e.Kv.ModRevision, w.Kv.Key, w.Kv.ModRevision)
		}
		if e.Kv.ModRevision <= prev {
			t.Fatalf("revision %d after %d", e.Kv.ModRevision, prev)
		}
		prev = e.Kv.ModRevision
	}
	keys := map[string]bool{}
	for _, e := range got {
		keys[string(e.Kv.Key)] = true
	}
	if len(keys) != total {
		t.Fatalf("watch saw %d distinct keys, wrote %d", len(keys), total)
	}

	// Start below the compaction revision: a clear error.
	cmd, _ := fsm.NewCommand(pb.CommandType_COMMAND_COMPACT, &pb.CompactRequest{Revision: prev})
	if _, err := applyRetry(ctx, l, cmd); err != nil && !errors.Is(err, fsm.ErrCompacted) {
		t.Fatal(err)
	}
	if err := f.LinearizableRead(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := f.Watch(ctx, &pb.WatchRequest{Key: []byte("/w/"), StartRevision: start}); !errors.Is(err, fsm.ErrCompacted) {
		t.Fatalf("watch below compaction = %v, want fsm.ErrCompacted", err)
	} else {
		t.Log(err)
	}
}

// TestLeaseExpiry: a lease's keys vanish after its TTL and not before.
func TestLeaseExpiry(t *testing.T) {
	c := mustCluster(t, 3)
	ctx := ctxT(t, 30*time.Second)
	f := c.follower(ctx)

	// Grants below the minimum are raised.
	if _, ttl := mustGrant(ctx, t, f, 0); ttl != 1 {
		t.Fatalf("grant ttl 0 → %d, want min 1", ttl)
	}

	const ttl = 2
	t0 := time.Now()
	id, granted := mustGrant(ctx, t, f, ttl)
	if granted != ttl {
		t.Fatalf("granted ttl %d", granted)
	}
	if _, err := applyRetry(ctx, f, putCmd(t, "/lease/k", "v", id)); err != nil {
		t.Fatal(err)
	}
	left, err := f.LeaseTimeToLive(ctx, id)
	if err != nil || left < 1 || left > ttl {
		t.Fatalf("time to live = %d, %v", left, err)
	}
	gone := waitGone(ctx, t, f, "/lease/k", t0)
	if gone < ttl*time.Second {
		t.Fatalf("key vanished after %v, before its TTL %ds", gone, ttl)
	}
	if gone > ttl*time.Second+time.Second {
		t.Fatalf("key vanished only after %v (TTL %ds)", gone, ttl)
	}
	t.Logf("lease ttl %ds: key gone after %v", ttl, gone)
	if _, err := f.LeaseKeepAlive(ctx, id); !errors.Is(err, fsm.ErrLeaseNotFound) {
		t.Fatalf("keepalive after expiry = %v", err)
	}

	// Keepalives through a follower keep it alive past its TTL.
	id, _ = mustGrant(ctx, t, f, ttl)
	if _, err := applyRetry(ctx, f, putCmd(t, "/lease/k2", "v", id)); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 6; i++ {
		time.Sleep(500 * time.Millisecond)
		if _, err := f.LeaseKeepAlive(ctx, id); err != nil {
			t.Fatalf("keepalive: %v", err)
		}
	}
	if _, ok, _ := get(ctx, f, "/lease/k2", false); !ok {
		t.Fatal("kept-alive lease lost its key")
	}
}

// waitGone polls (linearizable reads) until key is gone; returns the time since t0.
func waitGone(ctx context.Context, t *testing.T, s *Store, key string, t0 time.Time) time.Duration {
	t.Helper()
	for {
		_, ok, err := get(ctx, s, key, false)
		if err != nil {
			t.Fatal(err)
		}
		if !ok {
			return time.Since(t0)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestNewLeaderExtendsLeases: the leader dies before a lease's TTL ends;
// the new leader gives the lease a full TTL from its election, so the key
// outlives the old deadline and then vanishes without keepalives.
func TestNewLeaderExtendsLeases(t *testing.T) {
	c := mustCluster(t, 3)
	ctx := ctxT(t, 30*time.Second)
	old := c.leader(ctx)
	const ttl = 3
	t0 := time.Now()
	id, _ := mustGrant(ctx, t, old, ttl)
	if _, err := applyRetry(ctx, old, putCmd(t, "/lease/k", "v", id)); err != nil {
		t.Fatal(err)
	}
	time.Sleep(time.Second)
	tc := time.Now()
	c.crash(old)
	nl := c.leader(ctx)
	tl := time.Now()
	t.Logf("new leader %s after %v", nl.cfg.ID, tl.Sub(tc))

	time.Sleep(time.Until(t0.Add(ttl*time.Second + 300*time.Millisecond)))
	if _, ok, err := get(ctx, nl, "/lease/k", false); err != nil || !ok {
		t.Fatalf("key gone at old deadline + 300ms (%v): new leader did not extend the lease", err)
	}
	left, err := nl.LeaseTimeToLive(ctx, id)
	t.Logf("at old deadline + 300ms: time to live %ds (%v)", left, err)
	// Measured from the crash, which is before the new leader's election
	// (tl, when the test saw the leader, may be seconds after it under
	// load): a lease kept only to its old deadline goes 2 s after the
	// crash, an extended one no sooner than a full TTL after it.
	gone := waitGone(ctx, t, nl, "/lease/k", tc)
	if gone < ttl*time.Second-100*time.Millisecond {
		t.Fatalf("key vanished %v after the old leader's crash, before a full TTL", gone)
	}
	// Liveness only: expiry is the leader's ticker plus a revoke through
	// the log, which a loaded machine delays by seconds (5.8 s was seen
	// beside stress-ng with a 1.5 s bound); safety is the bound above.
	if gone > ttl*time.Second+10*time.Second {
		t.Fatalf("key vanished only %v after the old leader's crash", gone)
	}
	t.Logf("key gone %v after the old leader's crash (new leader seen after %v, ttl %ds), %v after grant", gone, tl.Sub(tc), ttl, time.Since(t0))
}

// TestBatching: concurrent writes are coalesced into fewer log entries.
func TestBatching(t *testing.T) {
	c := mustCluster(t, 3)
	ctx := ctxT(t, 60*time.Second)
	l := c.leader(ctx)
	e0, c0 := c.batchStats()
	const clients, each = 128, 10
	var wg sync.WaitGroup
	for i := 0; i < clients; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			for j := 0; j < each; j++ {
				if _, err := put(ctx, t, l, fmt.Sprintf("/b/%d/%d", i, j), "v"); err != nil {
					t.Error(err)
					return
				}
			}
		}(i)
	}
	wg.Wait()
	e1, c1 := c.batchStats()
	entries, cmds := e1-e0, c1-c0
	t.Logf("%d commands in %d log entries (%.1f per entry)", cmds, entries, float64(cmds)/float64(entries))
	if cmds < clients*each { // more if a leader change made put retry
		t.Fatalf("commands = %d, want >= %d", cmds, clients*each)
	}
	if entries*4 > cmds {
		t.Fatalf("%d entries for %d commands: writes were not coalesced", entries, cmds)
	}
}

func TestLeaderChFanOut(t *testing.T) {
	c := mustCluster(t, 3)
	ctx := ctxT(t, 30*time.Second)
	old := c.leader(ctx)
	var chs []<-chan bool
	for _, s := range c.live() {
		if s != old {
			chs = append(chs, s.LeaderCh())
		}
	}
	c.crash(old)
	nl := c.leader(ctx)
	got := false
	for i, ch := range chs {
		select {
		case v := <-ch:
			if v {
				got = true
				if c.live()[i] != nl && !nl.IsLeader() {
					t.Fatal("true on a non-leader")
				}
			}
		case <-time.After(100 * time.Millisecond):
		}
	}
	if !got {
		t.Fatal("no LeaderCh reported the new leadership")
	}
	// A late subscriber gets the current state at once.
	select {
	case v := <-nl.LeaderCh():
		if !v {
			t.Fatal("late subscriber got false on the leader")
		}
	case <-time.After(time.Second):
		t.Fatal("late subscriber got nothing")
	}
}

func TestCollector(t *testing.T) {
	c := mustCluster(t, 3)
	ctx := ctxT(t, 10*time.Second)
	l := c.leader(ctx)
	mustPut(ctx, t, l, "/m", "1")
	reg := prometheus.NewPedanticRegistry()
	for _, s := range c.live() {
		if err := reg.Register(s.Collector()); err != nil {
			t.Fatal(err)
		}
	}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	names := map[string]bool{}
	for _, mf := range mfs {
		names[mf.GetName()] = true
	}
	for _, want := range []string{"raftps_raft_state", "raftps_raft_term", "raftps_raft_commit_index", "raftps_raft_applied_index", "raftps_raft_apply_seconds", "raftps_raft_batch_commands", "raftps_raft_leases"} {
		if !names[want] {
			t.Errorf("metric %s missing (have %v)", want, names)
		}
	}
}

// TestCloseTransfersLeadership: a leader closed gracefully hands over
// leadership at once instead of leaving the cluster to an election.
func TestCloseTransfersLeadership(t *testing.T) {
	c := mustCluster(t, 3)
	ctx := ctxT(t, 20*time.Second)
	old := c.leader(ctx)
	mustPut(ctx, t, old, "k", "1")
	c.mu.Lock()
	for i, s := range c.stores {
		if s == old {
			c.stores[i] = nil
		}
	}
	c.mu.Unlock()
	t0 := time.Now()
	if err := old.Close(); err != nil {
		t.Fatal(err)
	}
	nl := c.leader(ctx)
	d := time.Since(t0)
	t.Logf("graceful close: %s leads %v after Close started", nl.cfg.ID, d)
	if old.transfers.Load() != 1 {
		t.Fatalf("Close did not transfer leadership (new leader after %v)", d)
	}
	mustPut(ctx, t, c.follower(ctx), "k", "2")
}

// TestSlowWatcherDoesNotBlockApply: a watcher that never reads must not
// hold up writes.
func TestSlowWatcherDoesNotBlockApply(t *testing.T) {
	c := mustCluster(t, 3)
	ctx := ctxT(t, 90*time.Second)
	l := c.leader(ctx)
	if _, err := l.Watch(ctx, &pb.WatchRequest{Key: []byte("/s/"), RangeEnd: []byte("/s0")}); err != nil {
		t.Fatal(err)
	}
	// A blocked apply blocks every later put for good; each put may also
	// meet an election (the loaded machine, load 40: one took over 2 s),
	// so the bound of a put is well past an election, not a round trip.
	for i := 0; i < 200; i++ {
		wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		_, err := put(wctx, t, l, fmt.Sprintf("/s/%d", i), "v")
		cancel()
		if err != nil {
			t.Fatalf("put %d with a stuck watcher: %v", i, err)
		}
	}
}

type observerFunc func(fsm.Notification)

func (f observerFunc) Applied(n fsm.Notification) { f(n) }

// TestRestartAndSnapshotCatchUp: a follower that was down while the leader
// snapshotted and truncated its log restarts on its data dir (Bootstrap
// still set, as the same command line would) and catches up through
// InstallSnapshot; linearizable reads on it then see the latest writes.
func TestRestartAndSnapshotCatchUp(t *testing.T) { forEachLogStore(t, testRestartAndSnapshotCatchUp) }

func testRestartAndSnapshotCatchUp(t *testing.T) {
	c := &cluster{tb: t}
	fwd := directForwarder{c}
	mk := func(id, dir, addr string, boot bool) *Store {
		cfg := testConfig(t, id, dir)
		cfg.RaftAddr = addr
		cfg.Bootstrap = boot
		cfg.SnapshotThreshold, cfg.SnapshotInterval, cfg.TrailingLogs = 32, 50*time.Millisecond, 8
		s, err := New(cfg, fsm.New(nil), fwd)
		if err != nil {
			t.Fatal(err)
		}
		if err := s.Open(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		c.mu.Lock()
		c.stores = append(c.stores, s)
		c.mu.Unlock()
		return s
	}
	ctx := ctxT(t, 60*time.Second)
	dirs := []string{t.TempDir(), t.TempDir(), t.TempDir()}
	n1 := mk("n1", dirs[0], "127.0.0.1:0", true)
	if err := n1.WaitForLeader(ctx); err != nil {
		t.Fatal(err)
	}
	n2 := mk("n2", dirs[1], "127.0.0.1:0", false)
	n3 := mk("n3", dirs[2], "127.0.0.1:0", false)
	for _, s := range []*Store{n2, n3} {
		if err := n1.Join(ctx, s.cfg.ID, s.Addr(), true); err != nil {
			t.Fatal(err)
		}
	}
	mustPut(ctx, t, n1, "k", "0")
	if err := n3.LinearizableRead(ctx); err != nil {
		t.Fatal(err)
	}
	addr3 := n3.Addr()
	c.crash(n3)
	for i := 1; i <= 200; i++ {
		mustPut(ctx, t, n1, "k", fmt.Sprint(i))
	}
	// Wait for a snapshot and log truncation on the leader.
	for deadline := time.Now().Add(10 * time.Second); ; {
		first, _ := n1.logs.FirstIndex()
		if first > 1 {
			t.Logf("leader log starts at %d, last %d", first, n1.Raft().LastIndex())
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("leader never truncated its log")
		}
		time.Sleep(50 * time.Millisecond)
	}
	n3 = mk("n3", dirs[2], addr3, true)
	t0 := time.Now()
	if v, _, err := get(ctx, n3, "k", false); err != nil || v != "200" {
		t.Fatalf("restarted follower: k = %q, %v; want 200", v, err)
	}
	t.Logf("restarted follower caught up in %v (revision %d)", time.Since(t0), n3.FSM().Revision())
	if n3.ClusterID() != n1.ClusterID() || n1.ClusterID() == "" {
		t.Fatalf("cluster ids %q vs %q", n3.ClusterID(), n1.ClusterID())
	}
	mustPut(ctx, t, n3, "k", "201")
	if v, _, err := get(ctx, n2, "k", false); err != nil || v != "201" {
		t.Fatalf("after restart: k on n2 = %q, %v", v, err)
	}
}

// flakyForwarder fails the first n ReadIndex calls as a gRPC layer would
// while the leader is unreachable.
type flakyForwarder struct {
	directForwarder
	fails atomic.Int64
}

func (f *flakyForwarder) ReadIndex(ctx context.Context, id, addr string) (uint64, error) {
	if f.fails.Add(-1) >= 0 {
		return 0, status.Error(codes.Unavailable, "leader unreachable")
	}
	return f.directForwarder.ReadIndex(ctx, id, addr)
}

func TestIdempotentForwardRetries(t *testing.T) {
	c := mustCluster(t, 3)
	ctx := ctxT(t, 10*time.Second)
	f := c.follower(ctx)
	ff := &flakyForwarder{directForwarder: directForwarder{c}}
	ff.fails.Store(2)
	f.fwd = ff
	if err := f.LinearizableRead(ctx); err != nil {
		t.Fatalf("read through a flaky forwarder: %v", err)
	}
	if n := ff.fails.Load(); n >= 0 {
		t.Fatalf("forwarder not retried (fails left %d)", n)
	}
}
