package master

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	pb "github.com/raftps/raftps/api/raftpspb"
	"github.com/raftps/raftps/api/rpctypes"
	"github.com/raftps/raftps/fsm"
	"github.com/raftps/raftps/gossip"
	"github.com/raftps/raftps/raftstore"
	"github.com/raftps/raftps/schema"
)

// openStore starts a single-node raftstore on loopback and waits until it
// leads and has applied its own term.
func openStore(t *testing.T) *raftstore.Store {
	t.Helper()
	return openStoreAt(t, t.TempDir())
}

func ctxT(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// fakeMembers is gossip's view, set by the test.
type fakeMembers struct {
	mu      sync.Mutex
	members []gossip.Member
}

func (f *fakeMembers) Members() []gossip.Member {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]gossip.Member(nil), f.members...)
}

func (f *fakeMembers) Subscribe() (<-chan gossip.Event, func()) {
	return make(chan gossip.Event), func() {}
}

func (f *fakeMembers) LocalID() string { return "n1" }

func member(id string, st gossip.Status, raftAddr string, roles ...string) gossip.Member {
	return gossip.Member{Status: st, Meta: gossip.Meta{ID: id, Roles: roles, RaftAddr: raftAddr,
		GRPCAddr: id + ":7000", HTTPAddr: id + ":7080"}}
}

func jobSpec(name string) *pb.JobSpec {
	return &pb.JobSpec{
		Name:           name,
		Model:          &pb.ModelSpec{Name: "softmax"},
		Dataset:        &pb.DatasetSpec{Path: "/data/fmnist", Records: 1000},
		RecordsPerTask: 100,
		Passes:         2,
		BatchSize:      10,
		NumPservers:    1,
		Optimizer:      &pb.OptimizerSpec{Name: "sgd", LearningRate: 0.1},
	}
}

func submit(t *testing.T, s *raftstore.Store, name string) {
	t.Helper()
	if _, err := s.SubmitJob(ctxT(t, 5*time.Second), &pb.SubmitJobRequest{Spec: jobSpec(name)}); err != nil {
		t.Fatalf("submit %s: %v", name, err)
	}
}

func grant(t *testing.T, s *raftstore.Store) int64 {
	t.Helper()
	resp, err := s.LeaseGrant(ctxT(t, 5*time.Second), &pb.LeaseGrantRequest{Ttl: 60})
	if err != nil {
		t.Fatal(err)
	}
	return resp.Id
}

func put(t *testing.T, s *raftstore.Store, key string, value []byte, lease int64) {
	t.Helper()
	if _, err := s.Put(ctxT(t, 5*time.Second), &pb.PutRequest{Key: []byte(key), Value: value, Lease: lease}); err != nil {
		t.Fatalf("put %s: %v", key, err)
	}
}

func exists(t *testing.T, s *raftstore.Store, key string) bool {
	t.Helper()
	resp, err := s.FSM().Range(&pb.RangeRequest{Key: []byte(key)})
	if err != nil {
		t.Fatal(err)
	}
	return len(resp.Kvs) == 1
}

// takeTask hands a task of job to trainer and returns its id.
func takeTask(t *testing.T, s *raftstore.Store, job, trainer string) int64 {
	t.Helper()
	resp, err := s.GetTask(ctxT(t, 5*time.Second), &pb.GetTaskRequest{Job: job, Trainer: trainer})
	if err != nil || resp.Result != pb.GetTaskResponse_TASK {
		t.Fatalf("get task for %s: %v %v", trainer, resp, err)
	}
	return resp.Task.Id
}

// holds reports whether trainer holds a pending task of job.
func holds(s *raftstore.Store, job, trainer string) bool {
	for _, task := range s.FSM().Jobs().Pending(job) {
		if task.Trainer == trainer || task.BackupTrainer == trainer {
			return true
		}
	}
	return false
}

func newMaster(s *raftstore.Store, mem *fakeMembers) *Master {
	return New(Config{Logger: slogDiscard()}, s, mem)
}

// TestReconcileWritesNodeRecords: reconcile writes one schema.NodeRecord
// per gossip member (plaintext: every member is proven), with gossip's roles, addresses and status, and does
// not rewrite a record that is up to date.
func TestReconcileWritesNodeRecords(t *testing.T) {
	s := openStore(t)
	mem := &fakeMembers{members: []gossip.Member{
		member("n1", gossip.StatusAlive, s.Addr(), gossip.RoleServer, gossip.RolePServer),
		member("n9", gossip.StatusAlive, "127.0.0.1:1", gossip.RoleTrainer),
	}}
	m := newMaster(s, mem)
	ctx := ctxT(t, 10*time.Second)
	m.reconcile(ctx)
	for _, want := range mem.members {
		resp, err := s.FSM().Range(&pb.RangeRequest{Key: []byte(schema.NodeKey(want.Meta.ID))})
		if err != nil || len(resp.Kvs) != 1 {
			t.Fatalf("node record of %s: %v %v", want.Meta.ID, resp, err)
		}
		rec, err := schema.ParseNodeRecord(resp.Kvs[0].Value)
		if err != nil {
			t.Fatal(err)
		}
		if rec.ID != want.Meta.ID || rec.Status != want.Status.String() || rec.GRPCAddr != want.Meta.GRPCAddr ||
			rec.RaftAddr != want.Meta.RaftAddr || strings.Join(rec.Roles, ",") != strings.Join(want.Meta.Roles, ",") {
			t.Fatalf("record %+v does not match member %+v", rec, want)
		}
	}
	rev := s.FSM().Revision()
	m.reconcile(ctx)
	if got := s.FSM().Revision(); got != rev {
		t.Fatalf("an unchanged membership rewrote records: revision %d -> %d", rev, got)
	}
}

// TestNodeGoneRequeuesAndRevokes: when gossip declares a node dead, its
// trainers' pending tasks are requeued and the leases of its trainer and
// slot records revoked (their keys vanish); another node's are untouched.
func TestNodeGoneRequeuesAndRevokes(t *testing.T) {
	s := openStore(t)
	submit(t, s, "j")
	deadLease, deadSlotLease, liveLease := grant(t, s), grant(t, s), grant(t, s)
	put(t, s, schema.TrainerKey("j", "n2-a"), schema.TrainerRecord{Node: "n2", Addr: "n2:7000"}.Marshal(), deadLease)
	put(t, s, schema.SlotKey("j", 0), schema.SlotRecord{Node: "n2", Addr: "n2:7000", Incarnation: 3}.Marshal(), deadSlotLease)
	put(t, s, schema.TrainerKey("j", "n3-a"), schema.TrainerRecord{Node: "n3", Addr: "n3:7000"}.Marshal(), liveLease)
	takeTask(t, s, "j", "n2-a")
	takeTask(t, s, "j", "n3-a")

	m := newMaster(s, &fakeMembers{})
	m.nodeGone(ctxT(t, 10*time.Second), member("n2", gossip.StatusDead, "", gossip.RolePServer, gossip.RoleTrainer))

	if holds(s, "j", "n2-a") {
		t.Fatal("the dead node's trainer still holds a task")
	}
	if !holds(s, "j", "n3-a") {
		t.Fatal("the live node's trainer lost its task")
	}
	for _, id := range []int64{deadLease, deadSlotLease} {
		if _, ok := s.FSM().Lease(id); ok {
			t.Fatalf("lease %d of the dead node not revoked", id)
		}
	}
	if exists(t, s, schema.TrainerKey("j", "n2-a")) || exists(t, s, schema.SlotKey("j", 0)) {
		t.Fatal("the dead node's records survived its leases")
	}
	if _, ok := s.FSM().Lease(liveLease); !ok || !exists(t, s, schema.TrainerKey("j", "n3-a")) {
		t.Fatal("the live node's lease or record was touched")
	}
}

// TestSweepRequeuesUnregisteredTrainers: a trainer that holds a task but
// has no registration (its lease expired) loses the task at the next
// sweep; a registered one keeps it.
func TestSweepRequeuesUnregisteredTrainers(t *testing.T) {
	s := openStore(t)
	submit(t, s, "j")
	put(t, s, schema.TrainerKey("j", "alive"), schema.TrainerRecord{Node: "n1"}.Marshal(), grant(t, s))
	takeTask(t, s, "j", "alive")
	takeTask(t, s, "j", "ghost")
	newMaster(s, &fakeMembers{}).sweep(ctxT(t, 10*time.Second))
	if holds(s, "j", "ghost") {
		t.Fatal("an unregistered trainer still holds its task after a sweep")
	}
	if !holds(s, "j", "alive") {
		t.Fatal("a registered trainer lost its task")
	}
}

// TestGetJobFillsMembership: GetJob reads the job's trainers, slots (sorted
// by index; a record that does not parse is skipped), checkpoint pointers
// and restore records from schema's keys and records.
func TestGetJobFillsMembership(t *testing.T) {
	s := openStore(t)
	submit(t, s, "j")
	submit(t, s, "other")
	put(t, s, schema.SlotKey("j", 1), schema.SlotRecord{Node: "n2", Addr: "n2:7000", Incarnation: 9}.Marshal(), 0)
	put(t, s, schema.SlotKey("j", 0), schema.SlotRecord{Node: "n1", Addr: "n1:7000", Incarnation: 7}.Marshal(), 0)
	put(t, s, schema.SlotKey("j", 2), []byte("not json"), 0)
	put(t, s, schema.ReplicaKey("j", 1), schema.ReplicaRecord{Primary: schema.ReplicaMember{Node: "n2", Addr: "n2:7000"},
		Backups: []schema.ReplicaMember{{Node: "n3", Addr: "n3:7000"}}}.Marshal(), 0)
	put(t, s, schema.TrainerKey("j", "t1"), schema.TrainerRecord{Node: "n1"}.Marshal(), 0)
	put(t, s, schema.TrainerKey("other", "t9"), schema.TrainerRecord{Node: "n1"}.Marshal(), 0)
	ptr, err := schema.MarshalPointer(&pb.CheckpointPointer{Version: 4, Md5: "abc"})
	if err != nil {
		t.Fatal(err)
	}
	put(t, s, schema.CheckpointKey("j", 0), ptr, 0)
	rst, err := schema.MarshalRestore(&pb.RestoreRecord{Slot: 1, Version: 4})
	if err != nil {
		t.Fatal(err)
	}
	put(t, s, schema.RestoreKey("j", 1), rst, 0)

	svc := NewService(s, &fakeMembers{})
	resp, err := svc.GetJob(ctxT(t, 5*time.Second), &pb.GetJobRequest{Name: "j"})
	if err != nil {
		t.Fatal(err)
	}
	j := resp.Status
	if len(j.Pservers) != 2 || j.Pservers[0].Index != 0 || j.Pservers[0].Node != "n1" || j.Pservers[0].Incarnation != 7 ||
		j.Pservers[1].Index != 1 || j.Pservers[1].Addr != "n2:7000" || j.Pservers[1].Incarnation != 9 ||
		len(j.Pservers[0].Backups) != 0 || j.Pservers[0].ReplicaEpoch != 0 ||
		len(j.Pservers[1].Backups) != 1 || j.Pservers[1].Backups[0] != "n3" || j.Pservers[1].ReplicaEpoch <= 0 {
		t.Fatalf("pservers %v (slot 1 replicated: backups [n3], an epoch)", j.Pservers)
	}
	if len(j.Trainers) != 1 || j.Trainers[0] != "t1" {
		t.Fatalf("trainers %v, want [t1]", j.Trainers)
	}
	if len(j.Checkpoints) != 1 || j.Checkpoints[0].Version != 4 || len(j.Restores) != 1 || j.Restores[0].Slot != 1 {
		t.Fatalf("checkpoints %v restores %v", j.Checkpoints, j.Restores)
	}
}

// TestServiceErrors: the Master service's errors carry the right code and
// map back to our sentinels (rpctypes): an unknown job is NotFound, a
// taken name InvalidArgument naming the field.
func TestServiceErrors(t *testing.T) {
	s := openStore(t)
	svc := NewService(s, &fakeMembers{})
	svc.CheckDataset = nil
	ctx := ctxT(t, 10*time.Second)
	_, err := svc.GetJob(ctx, &pb.GetJobRequest{Name: "nope"})
	if status.Code(err) != codes.NotFound || !errors.Is(rpctypes.FromStatus(err), fsm.ErrNotFound) {
		t.Fatalf("unknown job: %v", err)
	}
	if _, err := svc.SubmitJob(ctx, &pb.SubmitJobRequest{Spec: jobSpec("j")}); err != nil {
		t.Fatal(err)
	}
	_, err = svc.SubmitJob(ctx, &pb.SubmitJobRequest{Spec: jobSpec("j")})
	if status.Code(err) != codes.InvalidArgument || !strings.Contains(status.Convert(err).Message(), `name: job "j" already exists`) {
		t.Fatalf("duplicate name: %v", err)
	}
	_, err = svc.CancelJob(ctx, &pb.CancelJobRequest{Name: "nope"})
	if status.Code(err) != codes.NotFound {
		t.Fatalf("cancel unknown job: %v", err)
	}
}

func slogDiscard() *slog.Logger { return slog.New(slog.DiscardHandler) }

// TestDeleteJob: a running job is not deleted (FailedPrecondition); once
// cancelled, DeleteJob removes it and its keys, and a second delete is
// NotFound.
func TestDeleteJob(t *testing.T) {
	s := openStore(t)
	svc := NewService(s, &fakeMembers{})
	ctx := ctxT(t, 10*time.Second)
	submit(t, s, "j")
	submit(t, s, "k")
	put(t, s, schema.SlotKey("j", 0), schema.SlotRecord{Node: "n1"}.Marshal(), 0)
	put(t, s, schema.SlotKey("k", 0), schema.SlotRecord{Node: "n1"}.Marshal(), 0)
	if _, err := svc.DeleteJob(ctx, &pb.DeleteJobRequest{Name: "j"}); status.Code(err) != codes.FailedPrecondition {
		t.Fatalf("delete of a running job: %v, want FailedPrecondition", err)
	}
	if !exists(t, s, schema.SlotKey("j", 0)) {
		t.Fatal("a refused delete removed the job's keys")
	}
	if _, err := svc.CancelJob(ctx, &pb.CancelJobRequest{Name: "j"}); err != nil {
		t.Fatal(err)
	}
	if _, err := svc.DeleteJob(ctx, &pb.DeleteJobRequest{Name: "j"}); err != nil {
		t.Fatal(err)
	}
	if _, ok := s.FSM().Jobs().Job("j"); ok || exists(t, s, schema.SlotKey("j", 0)) {
		t.Fatal("the deleted job or its keys remain")
	}
	if !exists(t, s, schema.SlotKey("k", 0)) {
		t.Fatal("another job's keys were deleted")
	}
	if _, err := svc.DeleteJob(ctx, &pb.DeleteJobRequest{Name: "j"}); status.Code(err) != codes.NotFound {
		t.Fatalf("second delete: %v, want NotFound", err)
	}
	if _, err := svc.DeleteJob(ctx, &pb.DeleteJobRequest{}); status.Code(err) != codes.InvalidArgument {
		t.Fatalf("delete without a name: %v, want InvalidArgument", err)
	}
}

// TestSweepPrunesFinishedJobs: with KeepFinishedJobs 1, a sweep deletes all
// finished jobs but the newest, with their keys; running jobs stay.
func TestSweepPrunesFinishedJobs(t *testing.T) {
	s := openStore(t)
	ctx := ctxT(t, 10*time.Second)
	for _, name := range []string{"a", "b", "c", "run"} {
		submit(t, s, name)
		put(t, s, schema.SlotKey(name, 0), schema.SlotRecord{Node: "n1"}.Marshal(), 0)
	}
	for _, name := range []string{"a", "b", "c"} {
		if _, err := s.CancelJob(ctx, &pb.CancelJobRequest{Name: name}); err != nil {
			t.Fatal(err)
		}
		time.Sleep(5 * time.Millisecond) // distinct finish times
	}
	m := New(Config{Logger: slogDiscard(), KeepFinishedJobs: 1}, s, &fakeMembers{})
	m.sweep(ctx)
	for name, want := range map[string]bool{"a": false, "b": false, "c": true, "run": true} {
		if _, ok := s.FSM().Jobs().Job(name); ok != want {
			t.Errorf("job %s present %v, want %v", name, ok, want)
		}
		if got := exists(t, s, schema.SlotKey(name, 0)); got != want {
			t.Errorf("keys of job %s present %v, want %v", name, got, want)
		}
	}
}
