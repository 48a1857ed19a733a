package agent

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"net"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	pb "github.com/raftps/raftps/api/raftpspb"
	"github.com/raftps/raftps/internal/testing/testutil"
	"github.com/raftps/raftps/pserver"
	"github.com/raftps/raftps/pserver/checkpoint"
	"github.com/raftps/raftps/pserver/replica"
	"github.com/raftps/raftps/pserver/wire"
	"github.com/raftps/raftps/schema"
)

// replicaMembers is the live pserver nodes, each with its Replica
// address; a test removes a node it kills.
type replicaMembers struct {
	mu  sync.Mutex
	mem []schema.ReplicaMember
}

func (m *replicaMembers) PServerNodes() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.mem)
}

func (m *replicaMembers) PServerPeers() []schema.ReplicaMember {
	m.mu.Lock()
	defer m.mu.Unlock()
	return slices.Clone(m.mem)
}

// restarted gives node a new process instance, as its gossip meta
// would after a restart.
func (m *replicaMembers) restarted(node, instance string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for i := range m.mem {
		if m.mem[i].Node == node {
			m.mem[i].Instance = instance
		}
	}
}

// checkpointPeers is self's view of the members as checkpoint holders
// (the other nodes' CheckpointStore services, on their gRPC servers).
type checkpointPeers struct {
	m    *replicaMembers
	self string
}

func (p checkpointPeers) Peers() []checkpoint.Peer {
	var out []checkpoint.Peer
	for _, m := range p.m.PServerPeers() {
		if m.Node != p.self {
			out = append(out, checkpoint.Peer{ID: m.Node, Addr: m.Addr, Host: m.Node})
		}
	}
	return out
}

func (m *replicaMembers) remove(node string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.mem = slices.DeleteFunc(m.mem, func(x schema.ReplicaMember) bool { return x.Node == node })
}

// replicaNode is one node of startReplicaNodes: its agent (started by
// start) and its gRPC server (PServer and Replica services).
type replicaNode struct {
	id    string
	ta    *testAgent
	gs    *grpc.Server
	rs    *replica.Service
	start func() *testAgent
}

// kill stops the node as a crash would look to the others: its gRPC
// server stops, it leaves the live members, its agent stops (its lease
// is revoked: the master's nodeGone).
func (n *replicaNode) kill(mem *replicaMembers) {
	n.gs.Stop()
	mem.remove(n.id)
	if n.ta != nil {
		n.ta.stop()
	}
}

// startReplicaNodes makes nodes ids over meta, each serving its PServer,
// Replica and CheckpointStore services on its own loopback gRPC server (the address its
// slot records carry), all in the live members; the agents of the first
// started of them are started (the others by their start).
func startReplicaNodes(t testing.TB, meta *fakeMeta, started int, ids ...string) ([]*replicaNode, *replicaMembers) {
	t.Helper()
	return startReplicaNodesWith(t, meta, started, nil, ids...)
}

// startReplicaNodesWith is startReplicaNodes with each agent's Config
// changed by tune (nil: none).
func startReplicaNodesWith(t testing.TB, meta *fakeMeta, started int, tune func(*Config), ids ...string) ([]*replicaNode, *replicaMembers) {
	t.Helper()
	var lis []net.Listener
	mem := &replicaMembers{}
	for _, id := range ids {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		lis = append(lis, l)
		mem.mem = append(mem.mem, schema.ReplicaMember{Node: id, Addr: l.Addr().String(), Instance: NewInstance()})
	}
	var out []*replicaNode
	for i, m := range mem.PServerPeers() {
		log := testutil.LoggerLevel(t, slog.LevelInfo).With("node", m.Node)
		st, err := checkpoint.Open(t.TempDir(), log)
		if err != nil {
			t.Fatal(err)
		}
		mgr, err := checkpoint.New(checkpoint.Config{NodeID: m.Node, Store: st, Meta: meta, Logger: log,
			Peers: checkpointPeers{mem, m.Node}, Client: checkpoint.NewClient()})
		if err != nil {
			t.Fatal(err)
		}
		srv, rs := pserver.NewServer(), replica.NewService()
		gs := grpc.NewServer(wire.ServerOptions()...)
		pb.RegisterPServerServer(gs, srv)
		pb.RegisterReplicaServer(gs, rs)
		pb.RegisterCheckpointStoreServer(gs, checkpoint.NewService(st, log))
		go gs.Serve(lis[i])
		n := &replicaNode{id: m.Node, gs: gs, rs: rs}
		n.start = func() *testAgent {
			inst := m.Instance
			if n.ta != nil { // a new process
				inst = NewInstance()
				mem.restarted(m.Node, inst)
			}
			cfg := Config{NodeID: m.Node, Addr: m.Addr, Instance: inst, LeaseTTL: 5, Poll: 20 * time.Millisecond, Logger: log,
				Replicas: rs, DialOptions: []grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}}
			if tune != nil {
				tune(&cfg)
			}
			a := New(cfg, meta, srv, mgr, mem)
			ctx, cancel := context.WithCancel(context.Background())
			ta := &testAgent{a: a, meta: meta, server: srv, ckpt: mgr, cancel: cancel, done: make(chan struct{})}
			go func() { defer close(ta.done); _ = a.Run(ctx) }()
			n.ta = ta
			return ta
		}
		if i < started {
			n.start()
		}
		t.Cleanup(func() {
			if n.ta != nil {
				n.ta.stop()
			}
			gs.Stop()
			st.Close()
		})
		out = append(out, n)
	}
	return out, mem
}

// startReplicaAgents starts agents n1 and n2 over meta (startReplicaNodes),
// returned with their gRPC servers in the same order.
func startReplicaAgents(t *testing.T, meta *fakeMeta) ([]*testAgent, []*grpc.Server) {
	t.Helper()
	nodes, _ := startReplicaNodes(t, meta, 2, "n1", "n2")
	return []*testAgent{nodes[0].ta, nodes[1].ta}, []*grpc.Server{nodes[0].gs, nodes[1].gs}
}

// backupOf returns the backup agent ta holds of (job, slot), if any.
func (ta *testAgent) backupOf(job string, slot int32) *replica.Backup {
	ta.a.mu.Lock()
	defer ta.a.mu.Unlock()
	if hb := ta.a.backups[slotKey{job, slot}]; hb != nil {
		return hb.b
	}
	return nil
}

func replicaRecord(t testing.TB, meta *fakeMeta, job string, slot int32) (schema.ReplicaRecord, bool) {
	t.Helper()
	kv := meta.get(schema.ReplicaKey(job, slot))
	if kv == nil {
		return schema.ReplicaRecord{}, false
	}
	r, err := schema.ParseReplicaRecord(kv.GetValue(), kv.GetModRevision())
	if err != nil {
		t.Fatal(err)
	}
	return r, true
}

// pullBytes reads every dense block of s, concatenated.
func pullBytes(t *testing.T, s *pserver.Slot) []byte {
	t.Helper()
	resp, err := s.Pull(context.Background(), &pb.PullRequest{})
	if err != nil {
		t.Fatal(err)
	}
	var b []byte
	for _, ts := range resp.Tensors {
		b = append(b, ts.Data...)
	}
	return b
}

func asyncReplicated(name string) *pb.JobSpec {
	return &pb.JobSpec{Name: name, Mode: pb.UpdateMode_UPDATE_MODE_ASYNC, NumPservers: 2, Replicas: 2, Seed: 7,
		NumVirtualShards: 4, DenseBlockSize: 4,
		Optimizer: &pb.OptimizerSpec{Name: "momentum", LearningRate: 0.1, Momentum: 0.9},
		Params:    []*pb.ParamSpec{{Name: "w", Shape: []int64{64}, Init: pb.Initializer_INIT_UNIFORM, Scale: 1}}}
}

// pushOne pushes a gradient made of id to every block of slot s.
func pushOne(ctx context.Context, s *pserver.Slot, id uint64) (*pb.PushResponse, error) {
	l := s.Layout()
	var ts []*pb.Tensor
	for _, p := range l.Params {
		for b := int64(0); b < p.Blocks; b++ {
			if l.SlotOfBlock(p, b) == s.Index() {
				g := float32(id) + float32(b)/8
				ts = append(ts, &pb.Tensor{Name: p.Spec.GetName(), Block: b, Data: packed(g, -g, 1, 2)})
			}
		}
	}
	return s.Push(ctx, &pb.PushRequest{Trainer: "t1", PushId: id, Examples: 1, Grads: ts})
}

// TestReplicatedSlotFailover (issue 34) runs a replicated async job of two
// slots (replicas 2) on two agents over one store (each agent is primary
// of one slot, at its fair share, and backup of the other), in three
// acts on slot 0:
//   - replication before acknowledgement: the primary places its backup
//     on the other node (record {primary, backups}, the claim's
//     incarnation), the backup builds the same initializer, and each of
//     20 pushes is acknowledged only once the backup applied its version;
//     the backup's slot is then byte-identical to the primary's;
//   - a deposed primary: once the record is promoted to the backup and
//     the backup knows the new epoch, a push on the old primary is not
//     acknowledged (ErrFenced: the trainer re-resolves), though the old
//     primary's claim and lease still live;
//   - failover: once the old primary's lease is revoked, the promoted
//     node, already at its fair share, serves the slot it holds too
//     (same bytes, same version and
//     incarnation, no restore: a PSERVER_PROMOTED event and a restore
//     record "promoted backup"); the trainer's retry of the refused push
//     is applied there once, and a retry of an acknowledged push is
//     answered with its version, not applied again.
func TestReplicatedSlotFailover(t *testing.T) {
	meta := newFakeMeta()
	spec := asyncReplicated("rep")
	meta.setJobs(running(spec))
	agents, _ := startReplicaAgents(t, meta)
	var prim, back *testAgent
	waitFor(t, "a primary serving slot 0 and a backup on the other node", func() bool {
		for i, ta := range agents {
			if _, ok := ta.served("rep", 0); ok && agents[1-i].backupOf("rep", 0) != nil {
				prim, back = ta, agents[1-i]
				return true
			}
		}
		return false
	})
	rec, ok := replicaRecord(t, meta, "rep", 0)
	_, inc, _ := slotRecord(meta, "rep", 0)
	if !ok || rec.Primary.Node != prim.a.cfg.NodeID || len(rec.Backups) != 1 || rec.Backups[0].Node != back.a.cfg.NodeID || rec.Incarnation != inc {
		t.Fatalf("replica record %+v (ok %v), primary %s, claim incarnation %d", rec, ok, prim.a.cfg.NodeID, inc)
	}
	ps, _ := prim.served("rep", 0)
	bk := back.backupOf("rep", 0)
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	for id := uint64(1); id <= 20; id++ {
		resp, err := pushOne(ctx, ps, id)
		if err != nil {
			t.Fatalf("push %d: %v", id, err)
		}
		if bk.Applied() < resp.Version {
			t.Fatalf("push %d acknowledged at version %d; the backup has applied only %d", id, resp.Version, bk.Applied())
		}
	}
	if ps.Version() != 20 || !bytes.Equal(pullBytes(t, ps), pullBytes(t, bk.Slot())) {
		t.Fatalf("after 20 pushes: primary at version %d; backup at %d, bytes equal %v", ps.Version(), bk.Applied(),
			bytes.Equal(pullBytes(t, ps), pullBytes(t, bk.Slot())))
	}

	if lag := gaugeValue(t, "rep", "0"); lag != 0 {
		t.Fatalf("replication lag %v after every push was acknowledged, want 0", lag)
	}

	// The master promotes the backup (one Txn, epoch compared).
	promoted, err := rec.Promote(back.a.cfg.NodeID)
	if err != nil {
		t.Fatal(err)
	}
	out, err := meta.Txn(ctx, &pb.TxnRequest{Compare: []*pb.Compare{schema.EpochCompare("rep", 0, rec.Epoch)},
		Success: []*pb.RequestOp{putOp([]byte(schema.ReplicaKey("rep", 0)), promoted.Marshal())}})
	if err != nil || !out.GetSucceeded() {
		t.Fatalf("promotion Txn: %v %v", out, err)
	}
	newEpoch := out.GetHeader().GetRevision()
	waitFor(t, "the backup to know the new epoch", func() bool { return bk.Epoch() == newEpoch })
	if _, err := pushOne(ctx, ps, 21); !errors.Is(err, wire.ErrFenced) {
		t.Fatalf("push on the deposed primary: %v, want ErrFenced (not acknowledged)", err)
	}
	if bk.Applied() != 20 {
		t.Fatalf("the backup applied %d after refusing the deposed primary, want 20", bk.Applied())
	}
	if lag := gaugeValue(t, "rep", "0"); lag != 1 {
		t.Fatalf("replication lag %v on the deposed primary (push 21 applied, never acknowledged), want 1", lag)
	}

	// The old primary's lease is revoked (the master's nodeGone): the
	// promoted node claims the slot and serves what it holds.
	if _, err := meta.LeaseRevoke(ctx, &pb.LeaseRevokeRequest{Id: prim.a.session.ID()}); err != nil {
		t.Fatal(err)
	}
	var ns *pserver.Slot
	waitFor(t, "the promoted node to serve slot 0", func() bool { ns, ok = back.served("rep", 0); return ok })
	pr, err := ns.Pull(ctx, &pb.PullRequest{})
	if err != nil || ns != bk.Slot() || pr.Version != 20 || pr.Incarnation != inc {
		t.Fatalf("promoted slot: same object %v, pull %v (want version 20, incarnation %d)", ns == bk.Slot(), err, inc)
	}
	r, err := schema.ParseRestore(meta.get(schema.RestoreKey("rep", 0)).GetValue())
	if err != nil || r.GetSource() != "promoted backup" || r.GetVersion() != 20 {
		t.Fatalf("restore record after the promotion: %v %v", r, err)
	}
	if resp, err := pushOne(ctx, ns, 21); err != nil || resp.Version != 21 {
		t.Fatalf("retry of the refused push on the promoted node: %v %v, want version 21", resp, err)
	}
	if resp, err := pushOne(ctx, ns, 20); err != nil || resp.Version != 20 || ns.Version() != 21 {
		t.Fatalf("retry of acknowledged push 20 on the promoted node: %v %v, slot at %d; want version 20, not applied again", resp, err, ns.Version())
	}
	// The event is recorded after the slot is served (claimPromoted).
	var evs []*pb.JobEvent
	waitFor(t, "a PSERVER_PROMOTED event", func() bool {
		meta.mu.Lock()
		evs = slices.Clone(meta.events)
		meta.mu.Unlock()
		return slices.ContainsFunc(evs, func(ev *pb.JobEvent) bool { return ev.Type == pb.JobEvent_PSERVER_PROMOTED })
	})
	for _, ev := range evs {
		if ev.Type == pb.JobEvent_PSERVER_RESTORED && ev.Version > 0 {
			t.Errorf("a rollback or restore event: %v", ev)
		}
	}
}

// gaugeValue reads raftps_pserver_replication_lag_updates{job, slot}.
func gaugeValue(t *testing.T, job, slot string) float64 {
	t.Helper()
	var m dto.Metric
	if err := metricReplicationLag.WithLabelValues(job, slot).Write(&m); err != nil {
		t.Fatal(err)
	}
	return m.GetGauge().GetValue()
}

// TestReplicatedBackupDropped (issue 34): when a primary's backup stops
// answering (its node's gRPC server is gone), the primary drops it from
// the in-sync set with a Txn that raises the record's epoch, and only
// then acknowledges the push that was waiting: the record then names no
// backup, at a newer epoch, and later pushes are acknowledged at once
// (R = 1 semantics: the primary's lease fences it).
func TestReplicatedBackupDropped(t *testing.T) {
	meta := newFakeMeta()
	spec := asyncReplicated("drop")
	spec.NumPservers = 1
	meta.setJobs(running(spec))
	agents, servers := startReplicaAgents(t, meta)
	prim, backup := -1, -1
	waitFor(t, "a primary serving slot 0 and a backup on the other node", func() bool {
		for i, ta := range agents {
			if _, ok := ta.served("drop", 0); ok && agents[1-i].backupOf("drop", 0) != nil {
				prim, backup = i, 1-i
				return true
			}
		}
		return false
	})
	ps, _ := agents[prim].served("drop", 0)
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	if _, err := pushOne(ctx, ps, 1); err != nil {
		t.Fatal(err)
	}
	before, _ := replicaRecord(t, meta, "drop", 0)
	servers[backup].Stop() // the backup's node stops answering
	resp, err := pushOne(ctx, ps, 2)
	if err != nil || resp.Version != 2 {
		t.Fatalf("push after the backup died: %v %v, want version 2 once the backup is dropped", resp, err)
	}
	after, ok := replicaRecord(t, meta, "drop", 0)
	if !ok || len(after.Backups) != 0 || after.Epoch <= before.Epoch || after.Primary.Node != agents[prim].a.cfg.NodeID {
		t.Fatalf("record after the drop: %+v (before %+v), want no backups at a newer epoch", after, before)
	}
	if resp, err := pushOne(ctx, ps, 3); err != nil || resp.Version != 3 {
		t.Fatalf("push with an ISR of one: %v %v", resp, err)
	}
}

// TestReplicatedLostPrimaryHandsOff (issue 34): a primary that loses its
// lease while gossip still sees it alive (cut off from the Raft leader:
// the master promotes nobody) fences the slot; when it gets a lease
// again and finds the record naming it as primary of a slot it no longer
// serves, it promotes its in-sync backup (epoch compared) instead of
// deleting the record, and the backup serves every acknowledged update,
// with no restore. Before handOffLostSlot the record was deleted and the
// slot restored from the initializer: version 0, the 5 acknowledged
// pushes lost (integration/jepsen's TestJepsenReplicatedSlots found it).
func TestReplicatedLostPrimaryHandsOff(t *testing.T) {
	meta := newFakeMeta()
	spec := asyncReplicated("handoff")
	spec.NumPservers = 1
	meta.setJobs(running(spec))
	agents, _ := startReplicaAgents(t, meta)
	var prim, back *testAgent
	waitFor(t, "a primary serving slot 0 and a backup on the other node", func() bool {
		for i, ta := range agents {
			if _, ok := ta.served("handoff", 0); ok && agents[1-i].backupOf("handoff", 0) != nil {
				prim, back = ta, agents[1-i]
				return true
			}
		}
		return false
	})
	ps, _ := prim.served("handoff", 0)
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	for id := uint64(1); id <= 5; id++ {
		if _, err := pushOne(ctx, ps, id); err != nil {
			t.Fatalf("push %d: %v", id, err)
		}
	}
	before, _ := replicaRecord(t, meta, "handoff", 0)
	// The primary's lease ends at the leader (as it does when the node is
	// cut off from it for a TTL); gossip still reports the node alive.
	if _, err := meta.LeaseRevoke(ctx, &pb.LeaseRevokeRequest{Id: prim.a.session.ID()}); err != nil {
		t.Fatal(err)
	}
	var (
		ns    *pserver.Slot
		where string
	)
	waitFor(t, "slot 0 served again", func() bool {
		for _, ta := range agents {
			if s, ok := ta.served("handoff", 0); ok && s != ps {
				ns, where = s, ta.a.cfg.NodeID
				return true
			}
		}
		return false
	})
	rec, ok := replicaRecord(t, meta, "handoff", 0)
	if v := ns.Version(); v != 5 || where != back.a.cfg.NodeID || !ok || rec.Primary.Node != back.a.cfg.NodeID || rec.Epoch <= before.Epoch {
		t.Fatalf("slot 0 served by %s at version %d (want the backup %s at version 5: every acknowledged push); record %+v (ok %v), was %+v",
			where, v, back.a.cfg.NodeID, rec, ok, before)
	}
	r, err := schema.ParseRestore(meta.get(schema.RestoreKey("handoff", 0)).GetValue())
	if err != nil || r.GetSource() != "promoted backup" {
		t.Fatalf("restore record after the hand-off: %v %v, want the promoted backup's", r, err)
	}
}

// TestLonePrimaryFencedKeepsState: a replicated primary whose backup was
// dropped (its in-sync set is itself alone) holds the only copy of what
// it acknowledged. When its lease is lost it fences the slot and holds
// its state over (holdover.go); with a lease again it serves that state
// at once: every acknowledged push, no restore. Before holdOver the
// record was deleted (handOffLostSlot: no live backup) and the slot
// restored from the initializer, version 0 (a loaded `raftps demo` run
// went back from step 1247 to its checkpoint at 1200 so).
func TestLonePrimaryFencedKeepsState(t *testing.T) {
	meta := newFakeMeta()
	spec := asyncReplicated("lone")
	spec.NumPservers = 1
	meta.setJobs(running(spec))
	agents, servers := startReplicaAgents(t, meta)
	var prim *testAgent
	back := -1
	waitFor(t, "a primary serving slot 0 and a backup on the other node", func() bool {
		for i, ta := range agents {
			if _, ok := ta.served("lone", 0); ok && agents[1-i].backupOf("lone", 0) != nil {
				prim, back = ta, 1-i
				return true
			}
		}
		return false
	})
	ps, _ := prim.served("lone", 0)
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	for id := uint64(1); id <= 3; id++ {
		if _, err := pushOne(ctx, ps, id); err != nil {
			t.Fatalf("push %d: %v", id, err)
		}
	}
	// The backup's node stops answering: the primary drops it from the
	// in-sync set (an epoch-bumping Txn) and acknowledges alone.
	servers[back].Stop()
	for id := uint64(4); id <= 6; id++ {
		if _, err := pushOne(ctx, ps, id); err != nil {
			t.Fatalf("push %d after the backup stopped: %v", id, err)
		}
	}
	before, ok := replicaRecord(t, meta, "lone", 0)
	if !ok || len(before.Backups) != 0 || before.Primary.Node != prim.a.cfg.NodeID {
		t.Fatalf("record after the backup stopped: %+v (ok %v), want %s alone", before, ok, prim.a.cfg.NodeID)
	}
	want := pullBytes(t, ps)
	if _, err := meta.LeaseRevoke(ctx, &pb.LeaseRevokeRequest{Id: prim.a.session.ID()}); err != nil {
		t.Fatal(err)
	}
	var ns *pserver.Slot
	waitFor(t, "slot 0 served again", func() bool {
		s, ok := prim.served("lone", 0)
		ns = s
		return ok && s != ps
	})
	if v := ns.Version(); v != 6 || !bytes.Equal(pullBytes(t, ns), want) {
		t.Fatalf("slot 0 served again at version %d, want 6 (every acknowledged push) with the fenced primary's parameters", v)
	}
	r, err := schema.ParseRestore(meta.get(schema.RestoreKey("lone", 0)).GetValue())
	if err != nil || r.GetSource() != "promoted backup" {
		t.Fatalf("restore record after the fence: %v %v, want the held-over state's (no restore)", r, err)
	}
}

// TestPromotionServedWithoutPoll: a promoted node serves the slot as soon
// as the record naming it primary is written (and the old claim freed, as
// a confirmed report's Txn does), not at its next Poll. The agents here
// poll once an hour: the test drives their rounds itself until the slot
// is replicated, then only the promotion's watch event can start the
// round that claims and serves it.
func TestPromotionServedWithoutPoll(t *testing.T) {
	meta := newFakeMeta()
	spec := asyncReplicated("kick")
	meta.setJobs(running(spec))
	nodes, _ := startReplicaNodesWith(t, meta, 2, func(c *Config) { c.Poll, c.LeaseTTL = time.Hour, 3600 }, "n1", "n2")
	agents := []*testAgent{nodes[0].ta, nodes[1].ta}
	round := func() {
		for _, ta := range agents {
			select {
			case ta.a.kick <- struct{}{}:
			default:
			}
		}
	}
	var back *testAgent
	waitFor(t, "a primary serving slot 0 and a backup on the other node (rounds driven by the test)", func() bool {
		round()
		for i, ta := range agents {
			if _, ok := ta.served("kick", 0); ok && agents[1-i].backupOf("kick", 0) != nil {
				back = agents[1-i]
				return true
			}
		}
		return false
	})
	// The rounds the test asked for are taken and run (a round on this
	// in-process store takes milliseconds) before the promotion.
	waitFor(t, "the test's last rounds taken", func() bool { return len(agents[0].a.kick)+len(agents[1].a.kick) == 0 })
	time.Sleep(300 * time.Millisecond)
	rec, _ := replicaRecord(t, meta, "kick", 0)
	promoted, err := rec.Promote(back.a.cfg.NodeID)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	// The promotion and the old primary's claim freed in one Txn (as
	// master.Suspects does), then no more rounds from the test.
	out, err := meta.Txn(ctx, &pb.TxnRequest{Compare: []*pb.Compare{schema.EpochCompare("kick", 0, rec.Epoch)},
		Success: []*pb.RequestOp{putOp([]byte(schema.ReplicaKey("kick", 0)), promoted.Marshal()),
			{Request: &pb.RequestOp_RequestDeleteRange{RequestDeleteRange: &pb.DeleteRangeRequest{Key: []byte(schema.SlotKey("kick", 0))}}}}})
	if err != nil || !out.GetSucceeded() {
		t.Fatalf("promotion Txn: %v %v", out, err)
	}
	waitFor(t, "the promoted node to serve slot 0 with no poll round due for an hour", func() bool {
		_, ok := back.served("kick", 0)
		return ok
	})
}

// TestPickBackups: backups go to zones no member of the slot holds yet
// (the primary's, the backups', the earlier picks'), then in the slot's
// rotation; nodes without a zone never share one, and without zones the
// picks are the rotation itself (the slots' backups spread over nodes).
func TestPickBackups(t *testing.T) {
	m := func(node, zone string) schema.ReplicaMember {
		return schema.ReplicaMember{Node: node, Addr: node + ":1", Zone: zone}
	}
	nodes := func(ms []schema.ReplicaMember) string {
		var out []string
		for _, x := range ms {
			out = append(out, x.Node)
		}
		return strings.Join(out, ",")
	}
	for _, tc := range []struct {
		name  string
		cands []schema.ReplicaMember
		rec   schema.ReplicaRecord
		rot   int
		n     int
		want  string
	}{
		{"no zones: the rotation", []schema.ReplicaMember{m("n2", ""), m("n3", ""), m("n4", "")}, schema.ReplicaRecord{Primary: m("n1", "")}, 1, 2, "n3,n4"},
		{"another zone first", []schema.ReplicaMember{m("n2", "a"), m("n3", "b"), m("n4", "a")}, schema.ReplicaRecord{Primary: m("n1", "a")}, 0, 1, "n3"},
		{"rotation among the other zones", []schema.ReplicaMember{m("n2", "b"), m("n3", "b"), m("n4", "a")}, schema.ReplicaRecord{Primary: m("n1", "a")}, 1, 1, "n3"},
		{"two backups, three zones", []schema.ReplicaMember{m("n2", "a"), m("n3", "b"), m("n4", "b"), m("n5", "c")}, schema.ReplicaRecord{Primary: m("n1", "a")}, 2, 2, "n4,n5"},
		{"a held zone when no other is left", []schema.ReplicaMember{m("n2", "a"), m("n3", "b")}, schema.ReplicaRecord{Primary: m("n1", "a")}, 0, 2, "n3,n2"},
		{"the backups' zones count (re-replication)", []schema.ReplicaMember{m("n4", "b"), m("n5", "c")},
			schema.ReplicaRecord{Primary: m("n1", "a"), Backups: []schema.ReplicaMember{m("n2", "b")}}, 0, 1, "n5"},
		{"a zoneless node never shares a zone", []schema.ReplicaMember{m("n2", ""), m("n3", "a")}, schema.ReplicaRecord{Primary: m("n1", "a")}, 0, 1, "n2"},
		{"fewer candidates than wanted", []schema.ReplicaMember{m("n2", "")}, schema.ReplicaRecord{Primary: m("n1", "")}, 5, 2, "n2"},
		{"none", nil, schema.ReplicaRecord{Primary: m("n1", "")}, 0, 1, ""},
	} {
		if got := nodes(pickBackups(tc.cands, tc.rec, tc.rot, tc.n)); got != tc.want {
			t.Errorf("%s: picked %q, want %q", tc.name, got, tc.want)
		}
	}
}
