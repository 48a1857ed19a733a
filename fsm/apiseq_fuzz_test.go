package fsm

import (
	"bytes"
	"fmt"
	"math"
	"testing"

	"github.com/hashicorp/raft"
	"google.golang.org/protobuf/proto"

	pb "github.com/raftps/raftps/api/raftpspb"
	"github.com/raftps/raftps/fsm/jobq"
	"github.com/raftps/raftps/jobspec"
	"github.com/raftps/raftps/schema"
)

// The API-level model fuzzer (issue 12, "the test tier"): random sequences
// of public API calls — KV puts, deletes and checkpoint-pointer commits as
// Txns, leases, job submits with extreme values, task hand-outs, finishes,
// failures, expiries, requeues, events, deletes and prunes — under a
// leader's clocks that step, jump and change with the term. After every
// entry:
//
//   - the FSM's invariants hold (key/value, lease and history consistency;
//     every job's queues, counts and event seqs: jobq.Queue.Check);
//   - a snapshot restores, and the restored FSM snapshots to the identical
//     bytes (whatever Apply accepted, Snapshot + Restore reproduces);
//   - a replica restored from the previous step's snapshot applies the same
//     entry with the same results and reaches the identical snapshot;
//   - accepted commands kept the bounds: no lease above MaxLeaseTTL, no job
//     with zero tasks or a spec ValidateSpec refuses.

// gen reads fuzz input; past the end it yields zeros.
type gen struct{ b []byte }

func (g *gen) byte() byte {
	if len(g.b) == 0 {
		return 0
	}
	v := g.b[0]
	g.b = g.b[1:]
	return v
}

func (g *gen) pick(n int) int { return int(g.byte()) % n }

func (g *gen) u64() uint64 {
	var v uint64
	for range 8 {
		v = v<<8 | uint64(g.byte())
	}
	return v
}

// extreme returns one of the values at and around every bound, or raw bits.
func (g *gen) extreme() int64 {
	vals := []int64{0, 1, -1, 2, 3, 7, 10, 64, 100, 1000, 4096,
		math.MaxInt32, math.MinInt32, math.MaxInt64, math.MinInt64, math.MaxInt64 / 2, math.MaxInt64/2 + 1,
		1 << 20, 1 << 22, 1<<22 + 1, 1 << 30, 1 << 31, 1 << 40, 1 << 50, 1<<50 + 1, 1 << 62,
		MaxLeaseTTL, MaxLeaseTTL + 1, jobspec.MaxJobBytes / 4, jobspec.MaxJobBytes/4 + 1}
	if i := g.pick(len(vals) + 4); i < len(vals) {
		return vals[i]
	}
	return int64(g.u64())
}

var (
	fuzzJobs     = []string{"a", "b", "c"}
	fuzzTrainers = []string{"t1", "t2", "t3"}
	fuzzKeys     = []string{"k0", "k1", "k2", "/nodes/n1"}
)

func (g *gen) int32() int32 {
	v := g.extreme()
	if v > math.MaxInt32 || v < math.MinInt32 {
		return int32(v >> 32)
	}
	return int32(v)
}

// spec builds a job spec: mostly sane, with extreme values in some fields.
func (g *gen) spec() *pb.JobSpec {
	s := &pb.JobSpec{
		Name:           fuzzJobs[g.pick(len(fuzzJobs))],
		Model:          &pb.ModelSpec{Name: []string{"softmax", "mlp", "hashed_lr", "x"}[g.pick(4)]},
		Dataset:        &pb.DatasetSpec{Path: "/d", Records: int64(1 + g.pick(50))},
		RecordsPerTask: int64(1 + g.pick(8)),
		Passes:         int32(1 + g.pick(3)),
		BatchSize:      8,
		Optimizer:      &pb.OptimizerSpec{Name: []string{"sgd", "adam", "momentum", "adagrad"}[g.pick(4)], LearningRate: 0.1},
		NumPservers:    int32(1 + g.pick(3)),
		EvalEachPass:   g.pick(2) == 0,
	}
	for n := g.pick(4); n > 0; n-- {
		switch g.pick(16) {
		case 0:
			s.Dataset.Records = g.extreme()
		case 1:
			s.RecordsPerTask = g.extreme()
		case 2:
			s.Passes = g.int32()
		case 3:
			s.NumPservers = g.int32()
		case 4:
			s.NumVirtualShards = g.int32()
		case 5:
			s.Checkpoint = &pb.CheckpointPolicy{KeepMax: g.int32(), Replicas: g.int32(), EverySteps: g.extreme(), EverySeconds: g.extreme()}
		case 6:
			s.MaxSteps = g.extreme()
		case 7:
			s.TaskTimeoutFloorMs = g.extreme()
		case 8:
			s.MaxTaskTimeouts = g.int32()
		case 9:
			s.Model.Hidden = []int32{g.int32(), g.int32()}
		case 10:
			s.Model.EmbeddingDim, s.Model.HashBuckets = g.int32(), g.extreme()
		case 11:
			s.Params = append(s.Params, &pb.ParamSpec{Name: fmt.Sprint("p", len(s.Params)), Shape: []int64{g.extreme(), g.extreme()}})
		case 12:
			s.Params = append(s.Params, &pb.ParamSpec{Name: "w", Shape: []int64{g.extreme()}, Embedding: g.pick(2) == 0})
		case 13:
			s.DenseBlockSize = g.extreme()
		case 14:
			s.Staleness, s.BatchSize = g.int32(), g.int32()
		case 15:
			s.Optimizer.LearningRate = []float64{math.NaN(), math.Inf(1), -1, 1e308}[g.pick(4)]
		}
	}
	// Keep accepted jobs small enough to snapshot at every step: a spec that
	// validates with many tasks gets records_per_task raised.
	if v, err := jobspec.ValidateSpec(s); err == nil {
		if n := jobspec.NumTasks(v.Dataset.Records, v.RecordsPerTask); n > 256 {
			s.RecordsPerTask = (v.Dataset.Records-1)/256 + 1
		}
	}
	return s
}

// pendingTask picks a pending task of job (or an invented one).
func (g *gen) pendingTask(f *FSM, job string) (id, epoch int64) {
	p := f.Jobs().Pending(job)
	if len(p) == 0 || g.pick(8) == 0 {
		return g.extreme(), g.extreme()
	}
	t := p[g.pick(len(p))]
	if t.BackupEpoch != 0 && g.pick(2) == 0 {
		return t.Id, t.BackupEpoch
	}
	return t.Id, t.Epoch
}

// command builds the next API call as a command.
func (g *gen) command(tb testing.TB, f *FSM) *pb.Command {
	job := fuzzJobs[g.pick(len(fuzzJobs))]
	trainer := fuzzTrainers[g.pick(len(fuzzTrainers))]
	key := []byte(fuzzKeys[g.pick(len(fuzzKeys))])
	var lease int64
	if ls := f.Leases(); len(ls) > 0 && g.pick(3) == 0 {
		lease = ls[g.pick(len(ls))].ID
	}
	switch op := g.pick(20); op {
	case 0, 1:
		return mustCmd(tb, pb.CommandType_COMMAND_PUT, &pb.PutRequest{Key: key, Value: bytes.Repeat([]byte{'v'}, g.pick(64)), Lease: lease, PrevKv: g.pick(2) == 0})
	case 2:
		end := []byte(nil)
		if g.pick(2) == 0 {
			end = []byte{0}
		}
		return mustCmd(tb, pb.CommandType_COMMAND_DELETE_RANGE, &pb.DeleteRangeRequest{Key: key, RangeEnd: end, PrevKv: true})
	case 3, 4:
		// A checkpoint pointer commit: the slot's pointer moves from the
		// revision the committer read (or a stale one) to a new version.
		slot := int32(g.pick(2))
		pk := []byte(schema.CheckpointKey(job, slot))
		var mod int64
		if r, err := f.Range(&pb.RangeRequest{Key: pk}); err == nil && len(r.Kvs) > 0 {
			mod = r.Kvs[0].ModRevision
		}
		if g.pick(4) == 0 {
			mod = g.extreme()
		}
		ptr, err := schema.MarshalPointer(&pb.CheckpointPointer{Uuid: "u", Version: g.extreme(), Step: g.extreme(), NumPservers: g.int32(), KeptVersions: []int64{g.extreme()}})
		if err != nil {
			tb.Fatal(err)
		}
		return mustCmd(tb, pb.CommandType_COMMAND_TXN, &pb.TxnRequest{
			Compare: []*pb.Compare{{Key: pk, Target: pb.Compare_MOD, TargetUnion: &pb.Compare_ModRevision{ModRevision: mod}}},
			Success: []*pb.RequestOp{{Request: &pb.RequestOp_RequestPut{RequestPut: &pb.PutRequest{Key: pk, Value: ptr, Lease: lease}}}},
			Failure: []*pb.RequestOp{{Request: &pb.RequestOp_RequestRange{RequestRange: &pb.RangeRequest{Key: pk}}}},
		})
	case 5:
		id := int64(0)
		if g.pick(2) == 0 {
			id = g.extreme()
		}
		return mustCmd(tb, pb.CommandType_COMMAND_LEASE_GRANT, &pb.LeaseGrantRequest{Id: id, Ttl: g.extreme()})
	case 6:
		id := g.extreme()
		if ls := f.Leases(); len(ls) > 0 && g.pick(4) != 0 {
			id = ls[g.pick(len(ls))].ID
		}
		return mustCmd(tb, pb.CommandType_COMMAND_LEASE_REVOKE, &pb.LeaseRevokeRequest{Id: id})
	case 7:
		return mustCmd(tb, pb.CommandType_COMMAND_COMPACT, &pb.CompactRequest{Revision: f.Revision() - int64(g.pick(4))})
	case 8, 9:
		return mustCmd(tb, pb.CommandType_COMMAND_SUBMIT_JOB, &pb.SubmitJobRequest{Spec: g.spec()})
	case 10:
		return mustCmd(tb, pb.CommandType_COMMAND_CANCEL_JOB, &pb.CancelJobRequest{Name: job})
	case 11, 12:
		return mustCmd(tb, pb.CommandType_COMMAND_GET_TASK, &pb.GetTaskRequest{Job: job, Trainer: trainer})
	case 13, 14:
		id, epoch := g.pendingTask(f, job)
		m := &pb.TaskMetrics{Loss: []float64{0.5, math.NaN(), math.Inf(1), 1e308, -1e308}[g.pick(5)], Examples: g.extreme(), Step: g.extreme(), DurationMs: g.extreme()}
		if g.pick(2) == 0 {
			m.Step, m.Examples = int64(g.pick(100)), int64(g.pick(100))
		}
		return mustCmd(tb, pb.CommandType_COMMAND_TASK_FINISHED, &pb.TaskFinishedRequest{Job: job, TaskId: id, Epoch: epoch, Trainer: trainer, Metrics: m})
	case 15:
		id, epoch := g.pendingTask(f, job)
		return mustCmd(tb, pb.CommandType_COMMAND_TASK_FAILED, &pb.TaskFailedRequest{Job: job, TaskId: id, Epoch: epoch, Trainer: trainer, Reason: string(bytes.Repeat([]byte("é"), g.pick(256)))})
	case 16:
		if g.pick(2) == 0 {
			job = ""
		}
		return mustCmd(tb, pb.CommandType_COMMAND_EXPIRE_TASKS, &pb.ExpireTasksRequest{Job: job})
	case 17:
		if g.pick(2) == 0 {
			job = ""
		}
		return mustCmd(tb, pb.CommandType_COMMAND_REQUEUE_TRAINER, &pb.RequeueTrainerRequest{Job: job, Trainer: trainer, Reason: "gone"})
	case 18:
		typ := []pb.JobEvent_Type{pb.JobEvent_CHECKPOINT_COMMITTED, pb.JobEvent_TRAINER_JOINED, pb.JobEvent_PSERVER_RESTORED, pb.JobEvent_TASK_DONE}[g.pick(4)]
		return mustCmd(tb, pb.CommandType_COMMAND_JOB_EVENT, &pb.JobEvent{Job: job, Type: typ, Trainer: trainer, Version: g.extreme(), Pass: g.int32(), Message: string(bytes.Repeat([]byte{'m'}, g.pick(256)*4))})
	default:
		if g.pick(2) == 0 {
			return mustCmd(tb, pb.CommandType_COMMAND_DELETE_JOB, &pb.DeleteJobRequest{Name: job})
		}
		return mustCmd(tb, pb.CommandType_COMMAND_PRUNE_JOBS, &pb.PruneJobsRequest{MaxAgeMs: g.extreme(), KeepFinished: g.int32()})
	}
}

// fuzzSnapshot snapshots f, failing the test on error.
func fuzzSnapshot(tb testing.TB, f *FSM) []byte {
	tb.Helper()
	return mustSnapshot(tb, f)
}

// checkAPIInvariants checks the bounds accepted commands must keep.
func checkAPIInvariants(tb testing.TB, f *FSM) {
	tb.Helper()
	checkInvariants(tb, f)
	f.mu.RLock()
	q, ok := f.jobs.(*jobq.Queue)
	var qerr error
	if ok {
		qerr = q.Check()
	}
	f.mu.RUnlock()
	if qerr != nil {
		tb.Fatalf("job queue: %v", qerr)
	}
	for _, l := range f.Leases() {
		if l.TTL <= 0 || l.TTL > MaxLeaseTTL {
			tb.Fatalf("lease %d with ttl %d was granted", l.ID, l.TTL)
		}
	}
	for _, j := range f.Jobs().Jobs() {
		if j.TotalTasks < 1 || j.TotalTasks > jobspec.MaxTasks || j.Todo+j.Pending+j.Done+j.Failed != j.TotalTasks {
			tb.Fatalf("job %q: %d tasks = %d todo + %d pending + %d done + %d failed", j.Name, j.TotalTasks, j.Todo, j.Pending, j.Done, j.Failed)
		}
		if _, err := jobspec.ValidateSpec(j.Spec); err != nil {
			tb.Fatalf("job %q holds a spec validation refuses: %v", j.Name, err)
		}
		if len(j.Spec.GetName()) == 0 || j.State == pb.JobState_JOB_PENDING {
			tb.Fatalf("job %q in state %v", j.Name, j.State)
		}
	}
	if n := len(f.Jobs().Jobs()); n > jobq.MaxJobs {
		tb.Fatalf("%d jobs", n)
	}
}

// FuzzAPISequence: see the comment at the top of the file.
func FuzzAPISequence(f *testing.F) {
	f.Add([]byte{8, 0, 0, 11, 0, 0, 11, 0, 1, 13, 0, 0, 16, 16, 0})
	f.Add([]byte{9, 1, 0, 1, 0, 3, 1, 5, 0, 14, 11, 1, 1, 12, 0, 0, 13, 0, 0, 3, 0, 0, 1})
	f.Add([]byte("\x08\x00\x00\x02\x00\x0b\x00\x00\x0f\x00\x00\x0f\x00\x00\x0f\x00\x00\x10\x13\x00\x00\x13\x05\x00"))
	f.Add(bytes.Repeat([]byte{5, 0, 1, 1, 13, 3, 0, 0, 0, 11, 2, 2}, 6))
	f.Fuzz(func(t *testing.T, data []byte) {
		if len(data) > 2048 {
			return
		}
		g := &gen{b: data}
		a := New(nil)
		b := New(nil) // restored from a's snapshot after every step
		var (
			term       uint64 = 1
			wall, mono int64  = 1_700_000_000e9, 1
			index      uint64
		)
		for step := 0; len(g.b) > 0 && step < 64; step++ {
			// The leader's clocks: mostly forward, sometimes a wall-clock
			// step either way, sometimes a new term with a new monotonic
			// origin.
			switch g.pick(8) {
			case 0:
				wall = satAdd(wall, g.extreme())
			case 1:
				term++
				mono = int64(g.pick(100)) + 1
			default:
				d := int64(g.pick(64)) * 1e8
				wall, mono = satAdd(wall, d), satAdd(mono, d)
			}
			cmds := []*pb.Command{g.command(t, a)}
			for g.pick(6) == 0 && len(cmds) < 4 {
				cmds = append(cmds, g.command(t, a))
			}
			entry, err := EncodeEntryAt(wall, mono, cmds)
			if err != nil {
				t.Fatal(err)
			}
			index++
			log := &raft.Log{Index: index, Term: term, Type: raft.LogCommand, Data: entry}
			ra := a.Apply(log).(*ApplyResult)
			rb := b.Apply(log).(*ApplyResult)
			if ra.Err != nil || len(ra.Results) != len(cmds) {
				t.Fatalf("step %d: entry error %v", step, ra.Err)
			}
			for i := range ra.Results {
				if !proto.Equal(ra.Results[i], rb.Results[i]) {
					t.Fatalf("step %d command %d (%v): the replica restored from a snapshot answered %v, the original %v",
						step, i, cmds[i].Type, rb.Results[i], ra.Results[i])
				}
			}
			checkAPIInvariants(t, a)
			sa, sb := fuzzSnapshot(t, a), fuzzSnapshot(t, b)
			if !bytes.Equal(sa, sb) {
				t.Fatalf("step %d: the restored replica diverged (%d vs %d snapshot bytes)", step, len(sa), len(sb))
			}
			b = New(nil)
			if err := restore(b, sa); err != nil {
				t.Fatalf("step %d: snapshot of an accepted state does not restore: %v", step, err)
			}
			if again := fuzzSnapshot(t, b); !bytes.Equal(again, sa) {
				t.Fatalf("step %d: Snapshot + Restore is not the identity (%d vs %d bytes)", step, len(again), len(sa))
			}
			if !equalDump(dumpState(t, a), dumpState(t, b)) {
				t.Fatalf("step %d: restored state reads differently", step)
			}
		}
	})
}
