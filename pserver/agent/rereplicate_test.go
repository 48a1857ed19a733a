package agent

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	pb "github.com/raftps/raftps/api/raftpspb"
	"github.com/raftps/raftps/pserver"
	"github.com/raftps/raftps/pserver/replica"
	"github.com/raftps/raftps/pserver/wire"
	"github.com/raftps/raftps/schema"
)

// promote does the master's promotion of node (an in-sync backup of
// (job, slot)): one Txn that compares the record's epoch. It returns the
// new epoch.
func promote(t *testing.T, meta *fakeMeta, job string, slot int32, node string) int64 {
	t.Helper()
	rec, ok := replicaRecord(t, meta, job, slot)
	if !ok {
		t.Fatalf("no replica record of %s/%d", job, slot)
	}
	next, err := rec.Promote(node)
	if err != nil {
		t.Fatal(err)
	}
	out, err := meta.Txn(context.Background(), &pb.TxnRequest{Compare: []*pb.Compare{schema.EpochCompare(job, slot, rec.Epoch)},
		Success: []*pb.RequestOp{putOp([]byte(schema.ReplicaKey(job, slot)), next.Marshal())}})
	if err != nil || !out.GetSucceeded() {
		t.Fatalf("promotion Txn: %v %v", out, err)
	}
	return out.GetHeader().GetRevision()
}

// nodeByID returns the node named id.
func nodeByID(nodes []*replicaNode, id string) *replicaNode {
	for _, n := range nodes {
		if n.id == id {
			return n
		}
	}
	return nil
}

// pusher pushes consecutive push ids to s from a goroutine, at most n,
// until stopped, and records the version each was acknowledged with; an
// error ends it (finish fails the test).
type pusher struct {
	stop chan struct{}
	done chan struct{}
	mu   sync.Mutex
	vers map[uint64]int64
	last uint64
	err  error
}

func startPusher(ctx context.Context, s *pserver.Slot, from uint64, n int) *pusher {
	p := &pusher{stop: make(chan struct{}), done: make(chan struct{}), vers: map[uint64]int64{}}
	go func() {
		defer close(p.done)
		for id := from; id < from+uint64(n); id++ {
			select {
			case <-p.stop:
				return
			default:
			}
			resp, err := pushOne(ctx, s, id)
			p.mu.Lock()
			if err != nil {
				p.err = err
				p.mu.Unlock()
				return
			}
			p.vers[id], p.last = resp.Version, id
			p.mu.Unlock()
			time.Sleep(10 * time.Millisecond)
		}
	}()
	return p
}

// finish stops the pusher and returns the versions by push id and the
// last id.
func (p *pusher) finish(t *testing.T) (map[uint64]int64, uint64) {
	t.Helper()
	close(p.stop)
	<-p.done
	if p.err != nil {
		t.Fatalf("push while the new backup was built: %v", p.err)
	}
	return p.vers, p.last
}

// rereplicatedEvent returns the message of the event PSERVER_REREPLICATED
// naming node ("" if none).
func rereplicatedEvent(meta *fakeMeta, node string) string {
	meta.mu.Lock()
	defer meta.mu.Unlock()
	for _, ev := range meta.events {
		if ev.Type == pb.JobEvent_PSERVER_REREPLICATED && strings.Contains(ev.Message, "on "+node+" joined") {
			return ev.Message
		}
	}
	return ""
}

// TestRereplicationAfterPromotion (issue 34, re-replication): three
// nodes, a replicated async slot (replicas 2) whose primary is killed and
// its backup promoted: the promoted primary, with no backup left, builds
// one on the third node from its snapshot while pushes go on (none
// waits for the build: the pusher's pushes all succeed), joins it at a
// newer epoch (a PSERVER_REREPLICATED event), after which every push
// waits for it (byte-equal after more pushes). Then the promoted primary
// is killed too and the rebuilt backup promoted: it serves the same
// version with no restore, a retry of the last acknowledged push id (and
// of one applied before the snapshot) is answered with its version, not
// applied again, and a new push is applied once.
func TestRereplicationAfterPromotion(t *testing.T) {
	meta := newFakeMeta()
	spec := asyncReplicated("rr")
	spec.NumPservers = 1
	meta.setJobs(running(spec))
	nodes, mem := startReplicaNodes(t, meta, 3, "n1", "n2", "n3")
	var rec schema.ReplicaRecord
	waitFor(t, "a primary serving slot 0 and its backup", func() bool {
		var ok bool
		rec, ok = replicaRecord(t, meta, "rr", 0)
		if !ok || len(rec.Backups) != 1 {
			return false
		}
		_, serving := nodeByID(nodes, rec.Primary.Node).ta.served("rr", 0)
		return serving && nodeByID(nodes, rec.Backups[0].Node).ta.backupOf("rr", 0) != nil
	})
	prim, back := nodeByID(nodes, rec.Primary.Node), nodeByID(nodes, rec.Backups[0].Node)
	var third *replicaNode
	for _, n := range nodes {
		if n != prim && n != back {
			third = n
		}
	}
	ps, _ := prim.ta.served("rr", 0)
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	for id := uint64(1); id <= 10; id++ {
		if _, err := pushOne(ctx, ps, id); err != nil {
			t.Fatalf("push %d: %v", id, err)
		}
	}

	// The primary dies; the master promotes its backup.
	prim.kill(mem)
	promoted := promote(t, meta, "rr", 0, back.id)
	var ns *pserver.Slot
	waitFor(t, "the promoted node to serve slot 0", func() bool { var ok bool; ns, ok = back.ta.served("rr", 0); return ok })
	// Pushes go on during the build (ids 11 to at most 55: with 10 more
	// below, every id stays in the slot's push-id window of 64).
	p := startPusher(ctx, ns, 11, 45)
	waitFor(t, "a new backup on the third node, joined", func() bool {
		r, ok := replicaRecord(t, meta, "rr", 0)
		return ok && r.Primary.Node == back.id && len(r.Backups) == 1 && r.Backups[0].Node == third.id && r.Epoch > promoted
	})
	vers, last := p.finish(t)
	for id := uint64(1); id <= 10; id++ {
		vers[id] = int64(id)
	}
	joined, _ := replicaRecord(t, meta, "rr", 0)
	nb := third.ta.backupOf("rr", 0)
	if nb == nil {
		t.Fatal("the third node holds no backup of slot 0 though the record names it")
	}
	for end, id := last+10, last+1; id <= end; id++ {
		resp, err := pushOne(ctx, ns, id)
		if err != nil {
			t.Fatalf("push %d after the join: %v", id, err)
		}
		if nb.Applied() < resp.Version {
			t.Fatalf("push %d acknowledged at version %d; the rebuilt backup has applied only %d", id, resp.Version, nb.Applied())
		}
		vers[id], last = resp.Version, id
	}
	if nb.Applied() != ns.Version() || nb.Slot().Step() != ns.Step() || !bytes.Equal(pullBytes(t, ns), pullBytes(t, nb.Slot())) {
		t.Fatalf("rebuilt backup at %d (step %d), primary at %d (step %d); bytes equal %v", nb.Applied(), nb.Slot().Step(),
			ns.Version(), ns.Step(), bytes.Equal(pullBytes(t, ns), pullBytes(t, nb.Slot())))
	}
	msg := rereplicatedEvent(meta, third.id)
	var snapVersion int64
	if _, err := fmt.Sscanf(msg[strings.Index(msg, "(snapshot at version"):], "(snapshot at version %d", &snapVersion); err != nil {
		t.Fatalf("PSERVER_REREPLICATED event naming the new backup's node: %q (%v)", msg, err)
	}
	var beforeSnap uint64 // the push id of the snapshot's version: the push-id memory installed, not replicated
	for id, v := range vers {
		if v == snapVersion {
			beforeSnap = id
		}
	}
	if beforeSnap == 0 {
		t.Fatalf("no push produced the snapshot's version %d", snapVersion)
	}

	// The promoted primary dies too; the rebuilt backup is promoted.
	version := ns.Version()
	back.kill(mem)
	if got, _ := replicaRecord(t, meta, "rr", 0); got.Epoch != joined.Epoch {
		t.Fatalf("record changed after the join: %+v, joined %+v", got, joined)
	}
	promote(t, meta, "rr", 0, third.id)
	var ts *pserver.Slot
	waitFor(t, "the rebuilt backup to serve slot 0", func() bool { var ok bool; ts, ok = third.ta.served("rr", 0); return ok })
	if ts != nb.Slot() || ts.Version() != version {
		t.Fatalf("served slot: the rebuilt backup's %v, version %d, want %d", ts == nb.Slot(), ts.Version(), version)
	}
	for _, id := range []uint64{last, beforeSnap} {
		if resp, err := pushOne(ctx, ts, id); err != nil || resp.Version != vers[id] || ts.Version() != version {
			t.Fatalf("retry of acknowledged push %d: %v %v, slot at %d; want version %d, not applied again", id, resp, err, ts.Version(), vers[id])
		}
	}
	if resp, err := pushOne(ctx, ts, last+1); err != nil || resp.Version != version+1 {
		t.Fatalf("new push on the rebuilt backup: %v %v, want version %d", resp, err, version+1)
	}
	meta.mu.Lock()
	defer meta.mu.Unlock()
	for _, ev := range meta.events {
		if ev.Type == pb.JobEvent_PSERVER_RESTORED && ev.Version > 0 {
			t.Errorf("a restore or rollback event: %v", ev)
		}
	}
}

// TestRereplicationDeposedDuringBuild (issue 34, re-replication,
// adversarial): a primary whose backup died builds a new one, and the
// record moves on (the master deletes it: the primary was suspected)
// while the build waits at its join: the join Txn fails its epoch
// compare, so the half-built backup never enters the ISR (the record
// never names it), the primary acknowledges nothing more (ErrFenced), and
// the new backup's node discards it.
func TestRereplicationDeposedDuringBuild(t *testing.T) {
	meta := newFakeMeta()
	spec := asyncReplicated("dep")
	spec.NumPservers = 1
	meta.setJobs(running(spec))
	atJoin, release := make(chan string, 1), make(chan struct{})
	var once sync.Once
	beforeJoinHook = func(job string, _ int32, node string) {
		if job == "dep" {
			once.Do(func() { atJoin <- node; <-release })
		}
	}
	t.Cleanup(func() { beforeJoinHook = nil })
	nodes, mem := startReplicaNodes(t, meta, 3, "n1", "n2", "n3")
	var rec schema.ReplicaRecord
	waitFor(t, "a primary serving slot 0 and its backup", func() bool {
		var ok bool
		rec, ok = replicaRecord(t, meta, "dep", 0)
		if !ok || len(rec.Backups) != 1 {
			return false
		}
		_, serving := nodeByID(nodes, rec.Primary.Node).ta.served("dep", 0)
		return serving && nodeByID(nodes, rec.Backups[0].Node).ta.backupOf("dep", 0) != nil
	})
	prim := nodeByID(nodes, rec.Primary.Node)
	ps, _ := prim.ta.served("dep", 0)
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	if _, err := pushOne(ctx, ps, 1); err != nil {
		t.Fatal(err)
	}
	nodeByID(nodes, rec.Backups[0].Node).kill(mem)
	if resp, err := pushOne(ctx, ps, 2); err != nil || resp.Version != 2 {
		t.Fatalf("push after the backup died: %v %v, want version 2 once it is dropped", resp, err)
	}
	var node string
	select {
	case node = <-atJoin:
	case <-ctx.Done():
		t.Fatal("no re-replication reached its join")
	}
	learnerNode := nodeByID(nodes, node)
	if learnerNode == nil || learnerNode == prim || learnerNode.ta.backupOf("dep", 0) == nil {
		t.Fatalf("re-replication to %q: not the third node, or it holds no installed backup", node)
	}
	// The master deletes the record meanwhile (epoch compared).
	dropped, _ := replicaRecord(t, meta, "dep", 0)
	out, err := meta.Txn(ctx, &pb.TxnRequest{Compare: []*pb.Compare{schema.EpochCompare("dep", 0, dropped.Epoch)},
		Success: []*pb.RequestOp{{Request: &pb.RequestOp_RequestDeleteRange{RequestDeleteRange: &pb.DeleteRangeRequest{Key: []byte(schema.ReplicaKey("dep", 0))}}}}})
	if err != nil || !out.GetSucceeded() {
		t.Fatalf("record delete: %v %v", out, err)
	}
	close(release)
	waitFor(t, "the half-built backup discarded by its node", func() bool { return learnerNode.ta.backupOf("dep", 0) == nil })
	if r, ok := replicaRecord(t, meta, "dep", 0); ok {
		t.Fatalf("a record after the failed join: %+v", r)
	}
	if _, err := pushOne(ctx, ps, 3); !errors.Is(err, wire.ErrFenced) {
		t.Fatalf("push on the deposed primary: %v, want ErrFenced", err)
	}
	if rereplicatedEvent(meta, node) != "" {
		t.Fatal("a PSERVER_REREPLICATED event for a backup that never joined")
	}
}

// TestRereplicationOfRestoredSlot (issue 34, re-replication): a
// replicated slot restored from a checkpoint writes a record with no
// backup and builds one from its snapshot: n1 serves the slot alone (no
// other node yet: R = 1, no record) and checkpoints it; n2 joins the
// live members (its agent not started yet) and n1's lease is revoked: n1
// claims the slot again, restores it from its checkpoint, writes a
// record with no backup, and builds a backup on n2 once n2's agent runs:
// the record then names n2, whose backup is byte-equal at the restored
// version, and pushes wait for it.
func TestRereplicationOfRestoredSlot(t *testing.T) {
	meta := runOneSlot("rs", 1)
	nodes, mem := startReplicaNodes(t, meta, 0, "n1", "n2")
	n2 := mem.PServerPeers()[1]
	mem.remove("n2")
	n1 := nodes[0]
	n1.start()
	var s *pserver.Slot
	waitFor(t, "n1 serving slot 0", func() bool { var ok bool; s, ok = n1.ta.served("rs", 0); return ok })
	if _, ok := replicaRecord(t, meta, "rs", 0); ok {
		t.Fatal("a replica record with no other node")
	}
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	for id := uint64(1); id <= 5; id++ {
		if _, err := pushOne(ctx, s, id); err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, "a checkpoint of version 5", func() bool { p := pointer(meta, "rs", 0); return p != nil && p.GetStep() >= 5 })
	mem.mu.Lock()
	mem.mem = append(mem.mem, n2)
	mem.mu.Unlock()
	if _, err := meta.LeaseRevoke(ctx, &pb.LeaseRevokeRequest{Id: n1.ta.a.session.ID()}); err != nil {
		t.Fatal(err)
	}
	var rs *pserver.Slot
	waitFor(t, "n1 serving the slot restored from its checkpoint", func() bool {
		var ok bool
		rs, ok = n1.ta.served("rs", 0)
		return ok && rs != s
	})
	if rs.Version() < 5 {
		t.Fatalf("restored at version %d, want the checkpoint's (>= 5)", rs.Version())
	}
	waitFor(t, "a replica record for the restored slot", func() bool { _, ok := replicaRecord(t, meta, "rs", 0); return ok })
	nodes[1].start()
	waitFor(t, "a backup built on n2 and joined", func() bool {
		r, ok := replicaRecord(t, meta, "rs", 0)
		return ok && len(r.Backups) == 1 && r.Backups[0].Node == "n2"
	})
	nb := nodes[1].ta.backupOf("rs", 0)
	if nb == nil {
		t.Fatal("n2 holds no backup though the record names it")
	}
	resp, err := pushOne(ctx, rs, 6)
	if err != nil {
		t.Fatal(err)
	}
	if nb.Applied() < resp.Version || !bytes.Equal(pullBytes(t, rs), pullBytes(t, nb.Slot())) {
		t.Fatalf("push acknowledged at version %d; backup applied %d, bytes equal %v", resp.Version, nb.Applied(),
			bytes.Equal(pullBytes(t, rs), pullBytes(t, nb.Slot())))
	}
}

// TestLearnerBufferBounded: a learner buffers at most learnerMaxUpdates
// updates while its install is sent; the next one abandons the build
// with an error wrapping ErrTooFarAhead (ResourceExhausted) that says so,
// and frees the buffer.
func TestLearnerBufferBounded(t *testing.T) {
	l := &learner{node: "n3", more: make(chan struct{}, 1)}
	u := &pb.ReplicateRequest{Grads: []*pb.Tensor{{Data: make([]byte, 8)}}}
	for range learnerMaxUpdates {
		l.add(u)
	}
	if buf, err := l.take(); err != nil || len(buf) != learnerMaxUpdates {
		t.Fatalf("take after %d updates: %d buffered, %v", learnerMaxUpdates, len(buf), err)
	}
	for range learnerMaxUpdates + 1 {
		l.add(u)
	}
	buf, err := l.take()
	if !errors.Is(err, replica.ErrTooFarAhead) || !strings.Contains(err.Error(), "build abandoned") || len(buf) != 0 || l.bytes != 0 {
		t.Fatalf("take after %d updates: %d buffered (%d bytes), %v; want ErrTooFarAhead, nothing held", learnerMaxUpdates+1, len(buf), l.bytes, err)
	}
}
