package agent

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	pb "github.com/raftps/raftps/api/raftpspb"
	"github.com/raftps/raftps/internal/testing/testutil"
	"github.com/raftps/raftps/pserver"
	"github.com/raftps/raftps/pserver/checkpoint"
	"github.com/raftps/raftps/schema"
)

// waitTimeout bounds every wait of these tests: generous, because the
// machine running them may be loaded; a passing wait returns at once.
const waitTimeout = 30 * time.Second

type members int

func (m members) PServerNodes() int { return int(m) }

type tbWriter struct{ tb testing.TB }

func (w tbWriter) Write(p []byte) (int, error) {
	w.tb.Log(strings.TrimSpace(string(p)))
	return len(p), nil
}

// testAgent is an agent over a fakeMeta, with its own pserver.Server and
// checkpoint store in a temp dir, running until the test ends.
type testAgent struct {
	a      *Agent
	meta   *fakeMeta
	server *pserver.Server
	ckpt   *checkpoint.Manager
	cancel context.CancelFunc
	done   chan struct{}
}

func startAgent(t *testing.T, meta *fakeMeta, share members, ttl int64) *testAgent {
	t.Helper()
	return startAgentWith(t, meta, share, ttl, testutil.LoggerLevel(t, slog.LevelInfo), nil)
}

// startAgentWith is startAgent with a logger and a change to the Config.
func startAgentWith(t *testing.T, meta *fakeMeta, share members, ttl int64, log *slog.Logger, edit func(*Config)) *testAgent {
	t.Helper()
	return startAgentPeers(t, meta, share, ttl, log, edit, nil)
}

// startAgentPeers is startAgentWith whose checkpoint manager reads
// replicas from peers (nil: none).
func startAgentPeers(t *testing.T, meta *fakeMeta, share members, ttl int64, log *slog.Logger, edit func(*Config), peers checkpoint.Peers) *testAgent {
	t.Helper()
	st, err := checkpoint.Open(t.TempDir(), log)
	if err != nil {
		t.Fatal(err)
	}
	mgr, err := checkpoint.New(checkpoint.Config{NodeID: "n1", Store: st, Meta: meta, Peers: peers, Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	srv := pserver.NewServer()
	cfg := Config{NodeID: "n1", Addr: "127.0.0.1:1", LeaseTTL: ttl, Poll: 20 * time.Millisecond, Logger: log}
	if edit != nil {
		edit(&cfg)
	}
	a := New(cfg, meta, srv, mgr, share)
	ctx, cancel := context.WithCancel(context.Background())
	ta := &testAgent{a: a, meta: meta, server: srv, ckpt: mgr, cancel: cancel, done: make(chan struct{})}
	go func() { defer close(ta.done); _ = a.Run(ctx) }()
	t.Cleanup(func() {
		ta.stop()
		st.Close()
	})
	return ta
}

func (ta *testAgent) stop() {
	ta.cancel()
	<-ta.done
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(waitTimeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", waitTimeout, what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func running(spec *pb.JobSpec) *pb.JobStatus {
	return &pb.JobStatus{Name: spec.Name, State: pb.JobState_JOB_RUNNING, Spec: spec}
}

func syncSpec(name string, pservers int32, everySteps int64) *pb.JobSpec {
	s := &pb.JobSpec{
		Name: name, Mode: pb.UpdateMode_UPDATE_MODE_SYNC, NumPservers: pservers,
		Optimizer: &pb.OptimizerSpec{Name: "sgd", LearningRate: 0.1},
		Params:    []*pb.ParamSpec{{Name: "w", Shape: []int64{4}}},
	}
	if everySteps > 0 {
		s.Checkpoint = &pb.CheckpointPolicy{EverySteps: everySteps, Replicas: 1}
	}
	return s
}

// slotRecord returns the claim of (job, slot) and its key's create revision.
func slotRecord(meta *fakeMeta, job string, slot int32) (schema.SlotRecord, int64, bool) {
	kv := meta.get(schema.SlotKey(job, slot))
	if kv == nil {
		return schema.SlotRecord{}, 0, false
	}
	r, err := schema.ParseSlotRecord(kv.GetValue())
	if err != nil {
		return schema.SlotRecord{}, 0, false
	}
	return r, kv.GetCreateRevision(), true
}

// served reports whether the agent's server serves (job, slot) unfenced.
func (ta *testAgent) served(job string, slot int32) (*pserver.Slot, bool) {
	s, ok := ta.server.Slot(job, slot)
	if !ok || s.Fenced() {
		return nil, false
	}
	return s, true
}

func packed(f ...float32) []byte {
	b := make([]byte, 4*len(f))
	for i, v := range f {
		binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(v))
	}
	return b
}

// step pushes one sync step from trainer "t1" (the only member) to s.
func step(t *testing.T, s *pserver.Slot) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	at := s.Step()
	if _, err := s.Push(ctx, &pb.PushRequest{Trainer: "t1", Step: at, Examples: 1,
		Grads: []*pb.Tensor{{Name: "w", Block: 0, Data: packed(1, 1, 1, 1)}}}); err != nil {
		t.Fatalf("push step %d: %v", at, err)
	}
}

// TestClaimServeAndRecord: a lone pserver node claims every slot of a
// running job under its lease, serves each, writes the incarnation (the
// claim's create revision) back into the slot record, and records the
// restore (initializer: there is no checkpoint yet).
func TestClaimServeAndRecord(t *testing.T) {
	meta := newFakeMeta()
	spec := syncSpec("j", 2, 0)
	meta.setJobs(running(spec))
	ta := startAgent(t, meta, 1, 5)
	for slot := int32(0); slot < 2; slot++ {
		waitFor(t, "slot served", func() bool { _, ok := ta.served("j", slot); return ok })
		rec, create, ok := slotRecord(meta, "j", slot)
		if !ok || rec.Node != "n1" || rec.Addr != "127.0.0.1:1" || rec.Incarnation != create {
			t.Fatalf("slot %d record %+v (create revision %d, present %v)", slot, rec, create, ok)
		}
		kv := meta.get(schema.SlotKey("j", slot))
		if kv.GetLease() == 0 || kv.GetLease() != ta.a.session.ID() {
			t.Fatalf("slot %d claim under lease %d, session holds %d", slot, kv.GetLease(), ta.a.session.ID())
		}
		waitFor(t, "restore record", func() bool { return meta.get(schema.RestoreKey("j", slot)) != nil })
		r, err := schema.ParseRestore(meta.get(schema.RestoreKey("j", slot)).GetValue())
		if err != nil || r.GetSlot() != slot || r.GetVersion() != 0 || !strings.HasPrefix(r.GetReason(), "initializer") {
			t.Fatalf("slot %d restore record %v %v", slot, r, err)
		}
	}
}

// TestFairShare: with two pserver nodes alive, an agent claims only its
// share (ceil(2/2) = 1) of a two-slot job and leaves the other slot free.
func TestFairShare(t *testing.T) {
	meta := newFakeMeta()
	meta.setJobs(running(syncSpec("j", 2, 0)))
	ta := startAgent(t, meta, 2, 5)
	waitFor(t, "one slot served", func() bool { _, ok := ta.served("j", 0); return ok })
	// Several more rounds: the agent must stay at its share.
	time.Sleep(10 * ta.a.cfg.Poll)
	if _, _, ok := slotRecord(meta, "j", 1); ok {
		t.Fatal("slot 1 claimed beyond the fair share of 1")
	}
	if _, ok := ta.server.Slot("j", 1); ok {
		t.Fatal("slot 1 served beyond the fair share")
	}
}

// TestClaimMovedFences: when the slot's claim is taken over (the key
// deleted and re-created by another node), the agent fences and unhosts
// its slot, and leaves the other node's claim alone.
func TestClaimMovedFences(t *testing.T) {
	meta := newFakeMeta()
	meta.setJobs(running(syncSpec("j", 1, 0)))
	ta := startAgent(t, meta, 2, 5) // share 1 of 1: it would re-claim a free slot
	var s *pserver.Slot
	waitFor(t, "slot served", func() bool { var ok bool; s, ok = ta.served("j", 0); return ok })
	meta.del(schema.SlotKey("j", 0))
	other := meta.put(schema.SlotKey("j", 0), schema.SlotRecord{Node: "n2", Addr: "x:1"}.Marshal(), 0)
	waitFor(t, "slot fenced", func() bool { _, ok := ta.server.Slot("j", 0); return !ok && s.Fenced() })
	if rec, create, _ := slotRecord(meta, "j", 0); rec.Node != "n2" || create != other {
		t.Fatalf("the other node's claim was touched: %+v create %d", rec, create)
	}
}

// TestLeaseNotFoundFencesAndReclaims: when the lease turns out to be gone
// (keepalive answers NotFound: Session.Ensure reports lost), every hosted
// slot is fenced at once, and the agent re-claims the slots under a new
// lease with a new incarnation.
func TestLeaseNotFoundFencesAndReclaims(t *testing.T) {
	meta := newFakeMeta()
	meta.setJobs(running(syncSpec("j", 1, 0)))
	ta := startAgent(t, meta, 1, 1)
	var s *pserver.Slot
	waitFor(t, "slot served", func() bool { var ok bool; s, ok = ta.served("j", 0); return ok })
	_, inc1, _ := slotRecord(meta, "j", 0)
	lease1 := ta.a.session.ID()
	meta.expireLease(lease1)
	waitFor(t, "old slot fenced", s.Fenced)
	waitFor(t, "slot re-claimed under a new lease", func() bool {
		s2, ok := ta.served("j", 0)
		rec, inc2, held := slotRecord(meta, "j", 0)
		return ok && s2 != s && held && inc2 > inc1 && rec.Incarnation == inc2 && meta.get(schema.SlotKey("j", 0)).GetLease() != lease1
	})
}

// TestTrainerFeed: the slot's sync membership follows the job's trainer
// keys: a step completes once every registered trainer pushed.
func TestTrainerFeed(t *testing.T) {
	meta := newFakeMeta()
	meta.setJobs(running(syncSpec("j", 1, 0)))
	ta := startAgent(t, meta, 1, 5)
	var s *pserver.Slot
	waitFor(t, "slot served", func() bool { var ok bool; s, ok = ta.served("j", 0); return ok })
	registerTrainers(t, meta, ta, "t2", "t1") // in that order: membership is sorted
	// t1 alone does not complete the step: t2 is a member.
	pushed := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
		defer cancel()
		_, err := s.Push(ctx, &pb.PushRequest{Trainer: "t1", Step: 0, Examples: 1, Grads: []*pb.Tensor{{Name: "w", Data: packed(1, 1, 1, 1)}}})
		pushed <- err
	}()
	time.Sleep(10 * ta.a.cfg.Poll)
	if s.Step() != 0 {
		t.Fatalf("step completed without t2 (step %d)", s.Step())
	}
	// t2 leaves: t1's push completes the step.
	meta.del(schema.TrainerKey("j", "t2"))
	if err := <-pushed; err != nil {
		t.Fatalf("t1's push after t2 left: %v", err)
	}
	if s.Step() != 1 {
		t.Fatalf("step %d after t2 left, want 1", s.Step())
	}
	ta.a.mu.Lock()
	defer ta.a.mu.Unlock()
	if got := ta.a.hosted[slotKey{"j", 0}].trainers; got != "t1" {
		t.Fatalf("membership %q, want t1", got)
	}
}

// servedWithTrainer waits until (job, slot) is served with t1 as its only
// trainer.
func servedWithTrainer(t *testing.T, ta *testAgent, job string, slot int32) *pserver.Slot {
	t.Helper()
	return servedWithTrainers(t, ta, job, slot, "t1")
}

// servedWithTrainers is servedWithTrainer for the trainers ids (sorted).
func servedWithTrainers(t *testing.T, ta *testAgent, job string, slot int32, ids ...string) *pserver.Slot {
	t.Helper()
	var s *pserver.Slot
	want := strings.Join(ids, ",")
	waitFor(t, "slot served with trainers "+want, func() bool {
		var ok bool
		if s, ok = ta.served(job, slot); !ok {
			return false
		}
		ta.a.mu.Lock()
		defer ta.a.mu.Unlock()
		h := ta.a.hosted[slotKey{job, slot}]
		return h != nil && h.slot == s && h.trainers == want
	})
	return s
}

func pointer(meta *fakeMeta, job string, slot int32) *pb.CheckpointPointer {
	kv := meta.get(schema.CheckpointKey(job, slot))
	if kv == nil {
		return nil
	}
	p, err := schema.ParsePointer(kv.GetValue())
	if err != nil {
		return nil
	}
	return p
}

// TestStepExactCheckpoints: in a sync job with every_steps 2, the slot
// checkpoints inside the completion of steps 2 and 4, and each version is
// the step itself (epoch 0).
func TestStepExactCheckpoints(t *testing.T) {
	meta := newFakeMeta()
	meta.setJobs(running(syncSpec("j", 1, 2)))
	meta.put(schema.TrainerKey("j", "t1"), schema.TrainerRecord{Node: "n1"}.Marshal(), 0)
	ta := startAgent(t, meta, 1, 5)
	s := servedWithTrainer(t, ta, "j", 0)
	step(t, s)
	time.Sleep(5 * ta.a.cfg.Poll)
	if p := pointer(meta, "j", 0); p != nil {
		t.Fatalf("checkpoint after step 1 with every_steps 2: %v", p)
	}
	stepTo(t, meta, s, "j", 2, 2)
	stepTo(t, meta, s, "j", 4, 4)
	p := pointer(meta, "j", 0)
	if p.GetStep() != 4 || !slices.Contains(p.GetKeptVersions(), 2) {
		t.Fatalf("pointer %v: want version 4 at step 4 keeping version 2", p)
	}
}

// stepTo pushes steps until s is at step `to`, then waits for the
// pointer of (job, slot 0) to reach version want.
func stepTo(t *testing.T, meta *fakeMeta, s *pserver.Slot, job string, to, want int64) {
	t.Helper()
	for s.Step() < to {
		step(t, s)
	}
	waitFor(t, "version committed", func() bool { p := pointer(meta, job, 0); return p != nil && p.GetVersion() == want })
}

// TestAsyncCheckpointByPoll: an async job's every_steps policy is applied
// by the reconciliation poll (no step-exact hook).
func TestAsyncCheckpointByPoll(t *testing.T) {
	meta := newFakeMeta()
	spec := syncSpec("a", 1, 2)
	spec.Mode = pb.UpdateMode_UPDATE_MODE_ASYNC
	meta.setJobs(running(spec))
	ta := startAgent(t, meta, 1, 5)
	var s *pserver.Slot
	waitFor(t, "slot served", func() bool { var ok bool; s, ok = ta.served("a", 0); return ok })
	for i := range 2 {
		if _, err := s.Push(context.Background(), &pb.PushRequest{Trainer: "t1", Step: int64(i), Examples: 1,
			Grads: []*pb.Tensor{{Name: "w", Data: packed(1, 1, 1, 1)}}}); err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, "a checkpoint of step 2", func() bool { p := pointer(meta, "a", 0); return p != nil && p.GetStep() >= 2 })
}

// rollBack serves slot 0 of a 1-slot sync job (a checkpoint every step)
// at step 3, publishes a rollback to version (as another slot's restore
// would) and waits until the agent serves a new Slot at that version's
// step, the old one fenced. It returns the meta, the agent and the new Slot.
// Trainer t1 makes the steps; the trainers away (sorted, after "t1") are
// registered too and leave the steps first.
func rollBack(t *testing.T, version int64, away ...string) (*fakeMeta, *testAgent, *pserver.Slot) {
	t.Helper()
	meta := newFakeMeta()
	meta.setJobs(running(syncSpec("j", 1, 1)))
	for _, id := range append([]string{"t1"}, away...) {
		meta.put(schema.TrainerKey("j", id), schema.TrainerRecord{Node: "n1"}.Marshal(), 0)
	}
	ta := startAgent(t, meta, 1, 5)
	s := servedWithTrainers(t, ta, "j", 0, append([]string{"t1"}, away...)...)
	for _, id := range away {
		s.LeaveStep(id)
	}
	for v := int64(1); v <= 3; v++ {
		stepTo(t, meta, s, "j", v, v)
	}
	// Slot 7 of some other layout "restored" version: everyone follows.
	meta.put(schema.RollbackKey("j"), schema.Rollback{Version: version, Slot: 7, Node: "n9", Epoch: 1}.Marshal(), 0)
	var s2 *pserver.Slot
	waitFor(t, fmt.Sprintf("rolled back to step %d", version), func() bool {
		var ok bool
		s2, ok = ta.served("j", 0)
		return ok && s2 != s && s2.Step() == version
	})
	if !s.Fenced() {
		t.Fatal("the slot that was rolled back from still serves")
	}
	return meta, ta, s2
}

// TestRollbackFollowed: a rollback published by another slot's restore
// brings this slot (which is ahead) back to that version, on the new
// epoch, served by a new Slot (the old one fenced); versions written
// afterwards carry the new epoch.
func TestRollbackFollowed(t *testing.T) {
	meta, ta, s2 := rollBack(t, 2)
	servedWithTrainer(t, ta, "j", 0)
	step(t, s2)
	want := int64(schema.EpochStride + 3)
	waitFor(t, "a version on epoch 1", func() bool { p := pointer(meta, "j", 0); return p != nil && p.GetVersion() == want })
	// The event names the version and what it means: its epoch and step.
	meta.mu.Lock()
	defer meta.mu.Unlock()
	var msgs []string
	for _, e := range meta.events {
		if e.GetType() == pb.JobEvent_PSERVER_RESTORED {
			msgs = append(msgs, e.GetMessage())
		}
	}
	const msg = "slot 0 on n1: rolled back from step 3 to version 2 (epoch 0, step 2; slot 7 was restored)"
	if !slices.Contains(msgs, msg) {
		t.Fatalf("PSERVER_RESTORED events %q, want %q", msgs, msg)
	}
}

// TestRollbackKeepsAway: a trainer that had left the sync steps (it is
// waiting for a task) is away on the Slot a rollback builds too, so that
// Slot's steps complete without it instead of waiting for it until it
// leaves again at its next WAIT.
func TestRollbackKeepsAway(t *testing.T) {
	_, _, s2 := rollBack(t, 2, "t2")
	if got := s2.Away(); !slices.Equal(got, []string{"t2"}) {
		t.Fatalf("away after the rollback: %q, want [t2]", got)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := s2.Push(ctx, &pb.PushRequest{Trainer: "t1", Step: 2, Examples: 1,
		Grads: []*pb.Tensor{{Name: "w", Block: 0, Data: packed(1, 1, 1, 1)}}}); err != nil {
		t.Fatalf("t1's push on the rolled-back slot (t2 had left the steps): %v", err)
	}
	if s2.Step() != 3 {
		t.Fatalf("step %d after t1's push, want 3", s2.Step())
	}
}

// TestRollbackToInitializer: a rollback to version 0 (another slot, served
// before, found no globally consistent version and started from the
// initializer) resets this slot to the initializer on the new epoch, so the
// model is one trajectory and its versions cannot collide with the
// abandoned one's.
func TestRollbackToInitializer(t *testing.T) {
	meta, ta, s2 := rollBack(t, 0)
	spec := syncSpec("j", 1, 1)
	init, err := pserver.NewSlot(spec, 0, 1)
	if err != nil {
		t.Fatal(err)
	}
	got, err := s2.Pull(context.Background(), &pb.PullRequest{})
	if err != nil {
		t.Fatal(err)
	}
	want, err := init.Pull(context.Background(), &pb.PullRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if !proto.Equal(&pb.PullResponse{Tensors: got.Tensors}, &pb.PullResponse{Tensors: want.Tensors}) {
		t.Fatal("the reset slot's parameters are not the initializer's")
	}
	servedWithTrainer(t, ta, "j", 0)
	step(t, s2)
	want1 := int64(schema.EpochStride + 1)
	waitFor(t, "a version on epoch 1", func() bool { p := pointer(meta, "j", 0); return p != nil && p.GetVersion() == want1 })
}

// TestJobEndReleases: when the job is no longer running the agent writes a
// last checkpoint of unsaved steps, stops serving and deletes its claim.
func TestJobEndReleases(t *testing.T) {
	meta := newFakeMeta()
	spec := syncSpec("j", 1, 10)
	meta.setJobs(running(spec))
	meta.put(schema.TrainerKey("j", "t1"), schema.TrainerRecord{Node: "n1"}.Marshal(), 0)
	ta := startAgent(t, meta, 1, 5)
	s := servedWithTrainer(t, ta, "j", 0)
	step(t, s)
	meta.setJobs(&pb.JobStatus{Name: "j", State: pb.JobState_JOB_SUCCEEDED, Spec: spec})
	waitFor(t, "claim released", func() bool { _, _, ok := slotRecord(meta, "j", 0); return !ok })
	if _, ok := ta.server.Slot("j", 0); ok {
		t.Fatal("slot still hosted after the job ended")
	}
	if p := pointer(meta, "j", 0); p == nil || p.GetStep() != 1 {
		t.Fatalf("last checkpoint %v, want step 1", p)
	}
}

// TestShutdownRevokesLease: a graceful stop revokes the lease, so the
// claims vanish at once instead of after the TTL.
func TestShutdownRevokesLease(t *testing.T) {
	meta := newFakeMeta()
	meta.setJobs(running(syncSpec("j", 1, 0)))
	ta := startAgent(t, meta, 1, 60)
	waitFor(t, "slot served", func() bool { _, ok := ta.served("j", 0); return ok })
	ta.stop()
	if _, _, ok := slotRecord(meta, "j", 0); ok {
		t.Fatal("claim survived a graceful stop")
	}
}

// TestPartitionFencesWithinTTL: a node cut off from the leader cannot
// renew its lease, and keepalives fail with Unavailable, not NotFound, so
// Session.Ensure never reports the lease lost. The agent must still fence
// every hosted slot once the lease may have expired (one TTL after the last
// renewal), because by then another node may hold the slot; after the
// partition heals it re-claims and serves again, without a restart.
func TestPartitionFencesWithinTTL(t *testing.T) {
	meta := newFakeMeta()
	meta.setJobs(running(syncSpec("j", 1, 0)))
	const ttl = 1
	ta := startAgent(t, meta, 1, ttl)
	var s *pserver.Slot
	waitFor(t, "slot served", func() bool { var ok bool; s, ok = ta.served("j", 0); return ok })
	_, inc1, _ := slotRecord(meta, "j", 0)
	cut := time.Now()
	meta.setUnreachable(true)
	waitFor(t, "slot fenced", s.Fenced)
	if took := time.Since(cut); took > ttl*time.Second+2*time.Second {
		// The fence must come within the TTL (plus a renewal period): the
		// margin is for a loaded machine, not for the mechanism.
		t.Fatalf("fenced %v after the partition, TTL is %ds", took, ttl)
	}
	if _, ok := ta.server.Slot("j", 0); ok {
		t.Fatal("fenced slot still hosted")
	}
	// The leader expires the lease meanwhile; then the partition heals.
	meta.expireLease(meta.get(schema.SlotKey("j", 0)).GetLease())
	meta.setUnreachable(false)
	waitFor(t, "slot re-claimed and served after the heal", func() bool {
		s2, ok := ta.served("j", 0)
		_, inc2, held := slotRecord(meta, "j", 0)
		return ok && s2 != s && held && inc2 > inc1
	})
}

// TestPartitionHealsBeforeExpiry: a partition shorter than the TTL fences
// nothing; the lease is renewed after it and the slot keeps serving.
func TestPartitionHealsBeforeExpiry(t *testing.T) {
	meta := newFakeMeta()
	meta.setJobs(running(syncSpec("j", 1, 0)))
	ta := startAgent(t, meta, 1, 30)
	var s *pserver.Slot
	waitFor(t, "slot served", func() bool { var ok bool; s, ok = ta.served("j", 0); return ok })
	meta.setUnreachable(true)
	time.Sleep(20 * ta.a.cfg.Poll)
	meta.setUnreachable(false)
	time.Sleep(20 * ta.a.cfg.Poll)
	if s.Fenced() {
		t.Fatal("a partition well within the TTL fenced the slot")
	}
	if s2, ok := ta.served("j", 0); !ok || s2 != s {
		t.Fatal("slot no longer served by the same Slot")
	}
}

// startBlockedRestore hosts job "a" slot 0, then makes the agent claim
// job "b" slot 0 with a restore that blocks reading b's pointers until
// release is called (also at cleanup).
func startBlockedRestore(t *testing.T, meta *fakeMeta, ttl int64) (ta *testAgent, hostedA *pserver.Slot, release func()) {
	t.Helper()
	a, b := syncSpec("a", 1, 0), syncSpec("b", 1, 0)
	meta.setJobs(running(a))
	ta = startAgent(t, meta, 1, ttl)
	waitFor(t, "a/0 served", func() bool { var ok bool; hostedA, ok = ta.served("a", 0); return ok })
	entered, release := meta.blockRanges(schema.CheckpointPrefix("b"))
	t.Cleanup(release)
	meta.setJobs(running(a), running(b))
	select {
	case <-entered:
	case <-time.After(waitTimeout):
		t.Fatal("the restore of b/0 never started")
	}
	return ta, hostedA, release
}

// TestLeaseKeptAliveDuringLongRestore: the lease is renewed while a
// restore (up to a minute) runs: the keepalive does not wait for the
// reconciliation round.
func TestLeaseKeptAliveDuringLongRestore(t *testing.T) {
	meta := newFakeMeta()
	const ttl = 1
	ta, hostedA, release := startBlockedRestore(t, meta, ttl)
	before := meta.keepaliveCount()
	time.Sleep(3 * ttl * time.Second)
	if n := meta.keepaliveCount() - before; n < 2 {
		t.Fatalf("%d keepalives in 3 TTLs of a blocked restore", n)
	}
	if hostedA.Fenced() {
		t.Fatal("a/0 fenced while its lease was being renewed")
	}
	release()
	waitFor(t, "b/0 served after the restore", func() bool { _, ok := ta.served("b", 0); return ok })
}

// TestPartitionDuringLongRestoreFences: a node whose reconciliation is
// stuck in a long restore when it is partitioned still fences what it
// serves within the TTL.
func TestPartitionDuringLongRestoreFences(t *testing.T) {
	meta := newFakeMeta()
	const ttl = 1
	_, hostedA, _ := startBlockedRestore(t, meta, ttl)
	cut := time.Now()
	meta.setUnreachable(true)
	deadline := cut.Add(ttl*time.Second + 2*time.Second) // TTL plus a margin for a loaded machine
	for !hostedA.Fenced() {
		if time.Now().After(deadline) {
			t.Fatalf("a/0 not fenced %v after the partition (TTL %ds)", time.Since(cut), ttl)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestFencedUnderLiveLeaseRetakes: when the agent fenced its slots while
// its lease in fact lived on (the watchdog fired, then a renewal got
// through before the leader expired the lease), its claim is still in
// place; the agent takes its own claim back (same lease, same
// incarnation) and serves again.
func TestFencedUnderLiveLeaseRetakes(t *testing.T) {
	meta := newFakeMeta()
	meta.setJobs(running(syncSpec("j", 1, 0)))
	ta := startAgent(t, meta, 1, 30)
	var s *pserver.Slot
	waitFor(t, "slot served", func() bool { var ok bool; s, ok = ta.served("j", 0); return ok })
	_, inc1, _ := slotRecord(meta, "j", 0)
	ta.a.fenceAll("test: the watchdog fired")
	if !s.Fenced() {
		t.Fatal("fenceAll left the slot serving")
	}
	waitFor(t, "own claim taken back", func() bool {
		s2, ok := ta.served("j", 0)
		_, inc2, held := slotRecord(meta, "j", 0)
		return ok && s2 != s && held && inc2 == inc1
	})
}

// TestStepWaitReported: a sync step that waits longer than StepWaitWarn
// is logged with the trainers it waits for and those that pushed; a step
// that completes in time is not.
func TestStepWaitReported(t *testing.T) {
	meta := newFakeMeta()
	meta.setJobs(running(syncSpec("j", 1, 0)))
	var logs testutil.LockedBuffer
	ta := startAgentWith(t, meta, 1, 5, slog.New(slog.NewTextHandler(&logs, nil)), func(c *Config) { c.StepWaitWarn = 200 * time.Millisecond })
	var s *pserver.Slot
	waitFor(t, "slot served", func() bool { var ok bool; s, ok = ta.served("j", 0); return ok })
	registerTrainers(t, meta, ta, "t1", "t2")
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	push := func(id string, step int64) chan error {
		ch := make(chan error, 1)
		go func() {
			_, err := s.Push(ctx, &pb.PushRequest{Trainer: id, Step: step, Examples: 1, Grads: []*pb.Tensor{{Name: "w", Data: packed(1, 1, 1, 1)}}})
			ch <- err
		}()
		return ch
	}
	// Step 0 completes at once: nothing is reported.
	a, b := push("t1", 0), push("t2", 0)
	if err := errors.Join(<-a, <-b); err != nil {
		t.Fatal(err)
	}
	time.Sleep(20 * ta.a.cfg.Poll)
	if strings.Contains(logs.String(), "sync step waiting") {
		t.Fatalf("a step that completed at once was reported:\n%s", logs.String())
	}
	// Step 1 waits for t2.
	a = push("t1", 1)
	want := "waiting_for=t2 pushed=t1"
	waitFor(t, "the waiting step reported", func() bool { return strings.Contains(logs.String(), want) })
	for _, line := range strings.Split(logs.String(), "\n") {
		if strings.Contains(line, want) && !strings.Contains(line, "step=1 ") {
			t.Fatalf("report names the wrong step: %s", line)
		}
	}
	b = push("t2", 1)
	if err := errors.Join(<-a, <-b); err != nil {
		t.Fatal(err)
	}
}

// TestTrainerFeedHoldsLock: the trainer feed updates a slot's membership
// (hosted.trainers) under the agent's lock, which readers on other
// goroutines take (the tests' membership waits do). Before, the feed wrote
// it without the lock: a reader that took the lock between the write and
// the reconcile goroutine's next locking saw it with no happens-before
// edge, a data race the race detector reported now and then in
// TestStepWaitReported. Here the feed runs on this goroutine, which takes
// no lock between its write and the reader's read, so under -race the
// unlocked write is reported every time.
func TestTrainerFeedHoldsLock(t *testing.T) {
	meta := newFakeMeta()
	spec := syncSpec("j", 1, 0)
	a := New(Config{NodeID: "n1", Logger: slog.New(slog.NewTextHandler(t.Output(), nil))}, meta, pserver.NewServer(), nil, members(1))
	s, err := pserver.NewSlot(spec, 0, 1)
	if err != nil {
		t.Fatal(err)
	}
	h := &hosted{key: slotKey{"j", 0}, spec: spec, slot: s}
	a.mu.Lock()
	a.hosted[h.key] = h
	a.mu.Unlock()
	meta.put(schema.TrainerKey("j", "t1"), schema.TrainerRecord{Node: "n1"}.Marshal(), 0)
	seen := make(chan string, 1)
	go func() {
		for deadline := time.Now().Add(waitTimeout); time.Now().Before(deadline); {
			a.mu.Lock()
			got := h.trainers
			a.mu.Unlock()
			if got != "" {
				seen <- got
				return
			}
		}
		seen <- "(none within the wait)"
	}()
	a.feedTrainers(context.Background(), "j")
	if got := <-seen; got != "t1" {
		t.Fatalf("membership %q, want t1", got)
	}
}

// registerTrainers adds trainer records of job "j" (on n1) in the order
// given and waits until slot 0's sync membership is all of them, sorted.
func registerTrainers(t *testing.T, meta *fakeMeta, ta *testAgent, ids ...string) {
	t.Helper()
	for _, id := range ids {
		meta.put(schema.TrainerKey("j", id), schema.TrainerRecord{Node: "n1"}.Marshal(), 0)
	}
	want := strings.Join(slices.Sorted(slices.Values(ids)), ",")
	waitFor(t, "membership "+want, func() bool {
		ta.a.mu.Lock()
		defer ta.a.mu.Unlock()
		h := ta.a.hosted[slotKey{"j", 0}]
		return h != nil && h.trainers == want
	})
}

// TestEvalSnapshotNotDropped (issue 33, checkpoint best): when the
// checkpoint writer lags, a newer snapshot replaces the pending one, except
// that a pending eval snapshot (the parameters a pass's metric measures)
// stays and the newer periodic one is skipped; a newer eval snapshot
// replaces a pending periodic one.
func TestEvalSnapshotNotDropped(t *testing.T) {
	a := New(Config{NodeID: "n1", Logger: slog.New(slog.NewTextHandler(t.Output(), nil))}, newFakeMeta(), pserver.NewServer(), nil, members(1))
	h := &hosted{key: slotKey{"j", 0}, snaps: make(chan queued, 1)}
	at := func(step int64) *pserver.SlotSnapshot { return &pserver.SlotSnapshot{Step: step} }
	for _, tc := range []struct {
		name        string
		first, then queued
		want        int64
	}{
		{"periodic after eval", queued{snap: at(40), eval: true}, queued{snap: at(42)}, 40},
		{"eval after periodic", queued{snap: at(35)}, queued{snap: at(40), eval: true}, 40},
		{"periodic after periodic", queued{snap: at(35)}, queued{snap: at(42)}, 42},
	} {
		a.queueSnapshot(h, tc.first)
		a.queueSnapshot(h, tc.then)
		if got := (<-h.snaps).snap.Step; got != tc.want {
			t.Errorf("%s: the writer gets step %d, want %d", tc.name, got, tc.want)
		}
	}
}
