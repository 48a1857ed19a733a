package agent

import (
	"context"
	"log/slog"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	pb "github.com/raftps/raftps/api/raftpspb"
	"github.com/raftps/raftps/internal/testing/testutil"
	"github.com/raftps/raftps/pserver"
	"github.com/raftps/raftps/pserver/checkpoint"
	"github.com/raftps/raftps/schema"
)

// nodeMeta is one node's view of a shared fakeMeta: cut makes every call
// of that node fail as Unavailable (a partition of that node alone), and
// the keepalives that reach the store are recorded on arrival, as the
// leader's lease timers do (raftstore.Store.LeaseLastKeepAlive).
type nodeMeta struct {
	*fakeMeta
	mu      sync.Mutex
	cut     bool
	arrived map[int64]time.Time
}

func newNodeMeta(f *fakeMeta) *nodeMeta {
	return &nodeMeta{fakeMeta: f, arrived: map[int64]time.Time{}}
}

func (n *nodeMeta) setCut(v bool) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.cut = v
}

func (n *nodeMeta) isCut() bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.cut
}

// lastArrival is when the last keepalive of lease id arrived.
func (n *nodeMeta) lastArrival(id int64) time.Time {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.arrived[id]
}

func (n *nodeMeta) Txn(ctx context.Context, r *pb.TxnRequest) (*pb.TxnResponse, error) {
	if n.isCut() {
		return nil, errUnreachable
	}
	return n.fakeMeta.Txn(ctx, r)
}

func (n *nodeMeta) Range(ctx context.Context, r *pb.RangeRequest) (*pb.RangeResponse, error) {
	if n.isCut() {
		return nil, errUnreachable
	}
	return n.fakeMeta.Range(ctx, r)
}

func (n *nodeMeta) Put(ctx context.Context, r *pb.PutRequest) (*pb.PutResponse, error) {
	if n.isCut() {
		return nil, errUnreachable
	}
	return n.fakeMeta.Put(ctx, r)
}

func (n *nodeMeta) LeaseGrant(ctx context.Context, req *pb.LeaseGrantRequest) (*pb.LeaseGrantResponse, error) {
	if n.isCut() {
		return nil, errUnreachable
	}
	return n.fakeMeta.LeaseGrant(ctx, req)
}

func (n *nodeMeta) LeaseKeepAlive(ctx context.Context, id int64) (int64, error) {
	n.mu.Lock()
	if n.cut {
		n.mu.Unlock()
		return 0, errUnreachable
	}
	n.arrived[id] = time.Now()
	n.mu.Unlock()
	return n.fakeMeta.LeaseKeepAlive(ctx, id)
}

// startNode runs an agent named node over meta until the test ends.
func startNode(t *testing.T, meta Meta, node string, ttl int64) *testAgent {
	t.Helper()
	log := testutil.LoggerLevel(t, slog.LevelInfo).With("node", node)
	st, err := checkpoint.Open(t.TempDir(), log)
	if err != nil {
		t.Fatal(err)
	}
	mgr, err := checkpoint.New(checkpoint.Config{NodeID: node, Store: st, Meta: meta, Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	srv := pserver.NewServer()
	a := New(Config{NodeID: node, Addr: "127.0.0.1:1", LeaseTTL: ttl, Poll: 20 * time.Millisecond, Logger: log}, meta, srv, mgr, members(1))
	ctx, cancel := context.WithCancel(context.Background())
	ta := &testAgent{a: a, server: srv, ckpt: mgr, cancel: cancel, done: make(chan struct{})}
	go func() { defer close(ta.done); _ = a.Run(ctx) }()
	t.Cleanup(func() {
		ta.stop()
		st.Close()
	})
	return ta
}

// revokeWithHandover does what the master does for a node gossip declared
// dead (master.handoverRevoke): revoke the lease of the claim of slot 0,
// then write a handover record with schema.HandoverWait from the age of
// the lease's last keepalive arrival, if the slot is still unclaimed.
func revokeWithHandover(t *testing.T, meta *fakeMeta, holder *nodeMeta, job string, ttl int64) schema.HandoverRecord {
	t.Helper()
	kv := meta.get(schema.SlotKey(job, 0))
	if kv == nil {
		t.Fatal("slot 0 not claimed")
	}
	ctx := context.Background()
	if _, err := meta.LeaseRevoke(ctx, &pb.LeaseRevokeRequest{Id: kv.GetLease()}); err != nil {
		t.Fatal(err)
	}
	since := time.Since(holder.lastArrival(kv.GetLease()))
	rev := meta.revision()
	rec := schema.HandoverRecord{Node: "n1", Incarnation: kv.GetCreateRevision(), Lease: kv.GetLease(), RevokedRevision: rev,
		SinceKeepAliveNanos: int64(since), WaitNanos: int64(schema.HandoverWait(ttl, since))}
	resp, err := meta.Txn(ctx, &pb.TxnRequest{
		Compare: []*pb.Compare{{Target: pb.Compare_CREATE, Result: pb.Compare_EQUAL, Key: []byte(schema.SlotKey(job, 0)),
			TargetUnion: &pb.Compare_CreateRevision{CreateRevision: 0}}},
		Success: []*pb.RequestOp{{Request: &pb.RequestOp_RequestPut{RequestPut: &pb.PutRequest{
			Key: []byte(schema.HandoverKey(job, 0)), Value: rec.Marshal()}}}},
	})
	if err != nil || !resp.GetSucceeded() {
		t.Fatalf("handover record: %v (succeeded %v)", err, resp.GetSucceeded())
	}
	return rec
}

// TestHandoverNotBeforeHolderFence: the node serving a slot is cut off
// from the cluster; after a gossip-detection delay the master revokes its
// lease early and writes the handover record; another node claims the
// slot and serves it after the record's wait, which is shorter than a
// TTL after its claim — and still after the cut-off holder's watchdog
// fenced it. It fails if the new holder serves while the old one does.
func TestHandoverNotBeforeHolderFence(t *testing.T) {
	const ttl = 3 // holder fences 2 s after its last keepalive
	meta := newFakeMeta()
	meta.setJobs(running(syncSpec("j", 1, 0)))
	m1 := newNodeMeta(meta)
	a1 := startNode(t, m1, "n1", ttl)
	var s1 *pserver.Slot
	waitFor(t, "n1 serves slot 0", func() bool { var ok bool; s1, ok = a1.served("j", 0); return ok })
	waitFor(t, "a keepalive of n1's lease", func() bool {
		return !m1.lastArrival(meta.get(schema.SlotKey("j", 0)).GetLease()).IsZero()
	})

	m1.setCut(true)
	cut := time.Now()
	var fencedAt time.Time
	fenced := make(chan struct{})
	go func() {
		defer close(fenced)
		for !s1.Fenced() {
			time.Sleep(time.Millisecond)
		}
		fencedAt = time.Now()
	}()
	// Gossip takes a while to declare n1 dead; the master then revokes.
	time.Sleep(1200 * time.Millisecond)
	if s1.Fenced() {
		t.Fatalf("n1 fenced %v after the cut, before 2/3 of the TTL", time.Since(cut))
	}
	rec := revokeWithHandover(t, meta, m1, "j", ttl)
	t.Logf("revoked %v after the cut; last keepalive %v before; claimant wait %v",
		time.Since(cut).Round(time.Millisecond), time.Duration(rec.SinceKeepAliveNanos).Round(time.Millisecond), time.Duration(rec.WaitNanos).Round(time.Millisecond))

	a2 := startNode(t, newNodeMeta(meta), "n2", ttl)
	var claimedAt, servedAt time.Time
	waitFor(t, "n2 serves slot 0", func() bool {
		if r, _, ok := slotRecord(meta, "j", 0); ok && r.Node == "n2" && claimedAt.IsZero() {
			claimedAt = time.Now()
		}
		if _, ok := a2.served("j", 0); ok {
			servedAt = time.Now()
			return true
		}
		time.Sleep(time.Millisecond)
		return false
	})
	select {
	case <-fenced:
	case <-time.After(waitTimeout):
		t.Fatal("n1 never fenced")
	}
	t.Logf("n1 fenced %v after the cut; n2 claimed %v and served %v after the cut",
		fencedAt.Sub(cut).Round(time.Millisecond), claimedAt.Sub(cut).Round(time.Millisecond), servedAt.Sub(cut).Round(time.Millisecond))
	if !fencedAt.Before(servedAt) {
		t.Fatalf("slot 0 served from two nodes: n2 served %v before n1 fenced", fencedAt.Sub(servedAt))
	}
	if w := servedAt.Sub(claimedAt); w >= ttl*time.Second {
		t.Fatalf("n2 served %v after its claim: the handover record did not shorten the wait below the TTL (%ds)", w, ttl)
	}
	got, err := schema.ParseHandoverRecord(meta.get(schema.HandoverKey("j", 0)).GetValue())
	if _, inc, _ := slotRecord(meta, "j", 0); err != nil || got.ConsumedBy != inc || got.Node != "n1" {
		t.Fatalf("handover record after the claim: %+v %v (claim incarnation %d)", got, err, inc)
	}
}

// TestHandoverWait: a slot another node held is served after the wait of
// an unconsumed handover record about that holder (short when the old
// holder's last keepalive is old), and schema.HandoverWait of the holder's
// lease TTL after the claim when there is no record (the leader did not
// know the last keepalive), it was consumed by an earlier claim, or it
// describes a later claim that never served (no restore record of its
// own).
func TestHandoverWait(t *testing.T) {
	const ttl = 2
	held := &pb.RestoreRecord{Slot: 0, Source: "n9", Reason: "initializer", Incarnation: 2, LeaseTtl: ttl}
	for _, tc := range []struct {
		name   string
		record *schema.HandoverRecord
		short  bool
	}{
		{"old last keepalive", &schema.HandoverRecord{Node: "n9", Incarnation: 2, Lease: 7, RevokedRevision: 3,
			SinceKeepAliveNanos: int64(3 * time.Second), WaitNanos: int64(schema.HandoverWait(ttl, 3*time.Second))}, true},
		{"unknown", nil, false},
		{"consumed", &schema.HandoverRecord{Node: "n9", Incarnation: 2, Lease: 7, RevokedRevision: 3, WaitNanos: 0, ConsumedBy: 4}, false},
		{"another claim's", &schema.HandoverRecord{Node: "n8", Incarnation: 5, Lease: 8, RevokedRevision: 6, WaitNanos: 0}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			meta := newFakeMeta()
			b, _ := schema.MarshalRestore(held)
			meta.put(schema.RestoreKey("j", 0), b, 0)
			if tc.record != nil {
				meta.put(schema.HandoverKey("j", 0), tc.record.Marshal(), 0)
			}
			meta.setJobs(running(syncSpec("j", 1, 0)))
			ta := startNode(t, meta, "n1", ttl)
			var claimedAt time.Time
			waitFor(t, "slot served", func() bool {
				if _, _, ok := slotRecord(meta, "j", 0); ok && claimedAt.IsZero() {
					claimedAt = time.Now()
				}
				_, ok := ta.served("j", 0)
				if !ok {
					time.Sleep(time.Millisecond)
				}
				return ok
			})
			w := time.Since(claimedAt)
			t.Logf("served %v after the claim", w.Round(time.Millisecond))
			if tc.short && w >= ttl*time.Second {
				t.Fatalf("served %v after the claim, want the record's wait (0 s), under the TTL %ds", w, ttl)
			}
			// The test sees the claim up to a poll after the agent does.
			if want := schema.HandoverWait(ttl, 0); !tc.short && w < want-100*time.Millisecond {
				t.Fatalf("served %v after the claim, want at least HandoverWait(%d s, 0) = %v", w, ttl, want)
			}
			got, err := schema.ParseHandoverRecord(meta.get(schema.HandoverKey("j", 0)).GetValue())
			_, inc, _ := slotRecord(meta, "j", 0)
			if err != nil || got.ConsumedBy != inc {
				t.Fatalf("handover key after the claim: %+v %v (claim %d)", got, err, inc)
			}
		})
	}
}

// TestHandoverWaitsHolderTTL (issue 33, defect 2): without a handover
// record (an operator revoked the holder's lease), the next claimant waits
// for the holder's fence, which its lease TTL sets, not its own: a holder
// with a 6 s lease, cut off from the cluster, fences 4 s after its last
// keepalive, and a claimant whose lease is 2 s must not serve before that.
func TestHandoverWaitsHolderTTL(t *testing.T) {
	const ttl1, ttl2 = 6, 2
	meta := newFakeMeta()
	meta.setJobs(running(syncSpec("j", 1, 0)))
	m1 := newNodeMeta(meta)
	a1 := startNode(t, m1, "n1", ttl1)
	var s1 *pserver.Slot
	waitFor(t, "n1 serves slot 0", func() bool { var ok bool; s1, ok = a1.served("j", 0); return ok })
	rec, err := schema.ParseRestore(meta.get(schema.RestoreKey("j", 0)).GetValue())
	if _, inc, _ := slotRecord(meta, "j", 0); err != nil || rec.GetIncarnation() != inc || rec.GetLeaseTtl() != ttl1 {
		t.Fatalf("n1's restore record %v (%v): want incarnation %d and lease TTL %d", rec, err, inc, ttl1)
	}

	m1.setCut(true)
	cut := time.Now()
	fenced := make(chan time.Time, 1)
	go func() {
		for !s1.Fenced() {
			time.Sleep(time.Millisecond)
		}
		fenced <- time.Now()
	}()
	// An operator revokes n1's lease: no handover record.
	if _, err := meta.LeaseRevoke(context.Background(), &pb.LeaseRevokeRequest{Id: meta.get(schema.SlotKey("j", 0)).GetLease()}); err != nil {
		t.Fatal(err)
	}
	a2 := startNode(t, newNodeMeta(meta), "n2", ttl2)
	var servedAt time.Time
	waitFor(t, "n2 serves slot 0", func() bool {
		if _, ok := a2.served("j", 0); ok {
			servedAt = time.Now()
			return true
		}
		time.Sleep(time.Millisecond)
		return false
	})
	var fencedAt time.Time
	select {
	case fencedAt = <-fenced:
	case <-time.After(waitTimeout):
		t.Fatal("n1 never fenced")
	}
	t.Logf("n1 (TTL %d s) fenced %v after the cut; n2 (TTL %d s) served %v after it",
		ttl1, fencedAt.Sub(cut).Round(time.Millisecond), ttl2, servedAt.Sub(cut).Round(time.Millisecond))
	if !fencedAt.Before(servedAt) {
		t.Fatalf("slot 0 served from two nodes for %v: n2 waited its own TTL, not n1's", fencedAt.Sub(servedAt).Round(time.Millisecond))
	}
}

// TestLostClaimPublishesNoRollback (issue 33, defect 3): a sync slot taken
// over from another holder publishes a rollback, but only while its claim
// is held. A claim lost during its restore (here the job is deleted, its
// keys with it) publishes neither the rollback, which would roll the other
// slots back while the real holder stays ahead, nor a restore record, and
// leaves no key behind the deleted job.
func TestLostClaimPublishesNoRollback(t *testing.T) {
	meta := newFakeMeta()
	b, _ := schema.MarshalRestore(&pb.RestoreRecord{Slot: 0, Source: "n9", Reason: "initializer", Incarnation: 1, LeaseTtl: 1})
	meta.put(schema.RestoreKey("j", 0), b, 0)
	entered, release := meta.blockRanges(schema.CheckpointPrefix("j"))
	t.Cleanup(release)
	meta.setJobs(running(syncSpec("j", 1, 0)))
	ta := startAgent(t, meta, 1, 1)
	select {
	case <-entered:
	case <-time.After(waitTimeout):
		t.Fatal("the restore of j/0 never started")
	}
	meta.deletePrefix(schema.JobPrefix("j"))
	meta.setJobs()
	round := meta.rounds()
	release()
	waitFor(t, "the round of the claim to end", func() bool { return meta.rounds() > round })
	if kv := meta.get(schema.RollbackKey("j")); kv != nil {
		t.Fatalf("a claim lost during its restore published a rollback, left behind the deleted job: %s", kv.GetValue())
	}
	if kv := meta.get(schema.RestoreKey("j", 0)); kv != nil {
		t.Fatalf("a claim lost during its restore wrote a restore record: %s", kv.GetValue())
	}
	if _, ok := ta.server.Slot("j", 0); ok {
		t.Fatal("the slot is served after its claim was lost")
	}
}

// TestPausedHolderRefusesAfterDeadline (issue 33, a paused old holder):
// the watchdog is not the only fence. Here the watchdog's fence cannot
// run (the test holds the agent's lock, which it needs, as a process that
// was paused past its deadline and has not yet run its timer's goroutine
// when the requests queued meanwhile are handled): a request that comes
// after the last renewal's send plus schema.PServerFence is refused by the
// slot itself, Unavailable, though the slot is still hosted.
func TestPausedHolderRefusesAfterDeadline(t *testing.T) {
	const ttl = 3 // the deadline is 2 s after the last renewal's send
	meta := newFakeMeta()
	spec := syncSpec("j", 1, 0)
	spec.Mode = pb.UpdateMode_UPDATE_MODE_ASYNC
	meta.setJobs(running(spec))
	m1 := newNodeMeta(meta)
	a1 := startNode(t, m1, "n1", ttl)
	waitFor(t, "n1 serves slot 0", func() bool { _, ok := a1.served("j", 0); return ok })
	lease := meta.get(schema.SlotKey("j", 0)).GetLease()
	waitFor(t, "a keepalive of n1's lease", func() bool { return !m1.lastArrival(lease).IsZero() })

	a1.a.mu.Lock()
	unlock := sync.OnceFunc(a1.a.mu.Unlock)
	defer unlock()
	m1.setCut(true)
	last := m1.lastArrival(lease) // final: every later keepalive fails
	time.Sleep(time.Until(last.Add(schema.PServerFence(ttl) + 100*time.Millisecond)))
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	_, pullErr := a1.server.Pull(ctx, &pb.PullRequest{Job: "j", Slot: 0})
	_, pushErr := a1.server.Push(ctx, &pb.PushRequest{Job: "j", Slot: 0, Trainer: "t1", Examples: 1,
		Grads: []*pb.Tensor{{Name: "w", Block: 0, Data: packed(1, 1, 1, 1)}}})
	unlock()
	for _, c := range []struct {
		what string
		err  error
	}{{"pull", pullErr}, {"push", pushErr}} {
		if status.Code(c.err) != codes.Unavailable {
			t.Errorf("%s %v after n1's last keepalive (deadline %v after it): %v, want Unavailable: a paused holder served past its deadline",
				c.what, time.Since(last).Round(time.Millisecond), schema.PServerFence(ttl), c.err)
		}
	}
}
