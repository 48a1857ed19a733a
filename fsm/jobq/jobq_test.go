package jobq

import (
	"bytes"
	"errors"
	"math"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/raftps/raftps/api/errs"
	pb "github.com/raftps/raftps/api/raftpspb"
	"github.com/raftps/raftps/jobspec"
	"github.com/raftps/raftps/schema"
)

const (
	sec = int64(1e9)
	t0  = int64(1_700_000_000) * sec
)

// testSpec is a valid spec: records/rpt tasks, one pass, no eval.
func testSpec(name string, records, rpt int64) *pb.JobSpec {
	return &pb.JobSpec{
		Name:               name,
		Model:              &pb.ModelSpec{Name: "softmax"},
		Dataset:            &pb.DatasetSpec{Path: "/data/fashion-mnist", Format: "fashion-mnist", Records: records},
		RecordsPerTask:     rpt,
		Passes:             1,
		BatchSize:          32,
		Optimizer:          &pb.OptimizerSpec{Name: "sgd", LearningRate: 0.1},
		NumPservers:        2,
		TaskTimeoutFloorMs: 1000,
	}
}

func mustSubmit(tb testing.TB, q *Queue, now int64, spec *pb.JobSpec) *pb.JobStatus {
	tb.Helper()
	r, err := q.Submit(now, &pb.SubmitJobRequest{Spec: spec})
	if err != nil {
		tb.Fatalf("Submit(%q): %v", spec.GetName(), err)
	}
	mustCheck(tb, q)
	return r.Status
}

func mustGet(tb testing.TB, q *Queue, now int64, job, trainer string) *pb.GetTaskResponse {
	tb.Helper()
	r, err := q.GetTask(now, &pb.GetTaskRequest{Job: job, Trainer: trainer})
	if err != nil {
		tb.Fatalf("GetTask(%q, %q): %v", job, trainer, err)
	}
	mustCheck(tb, q)
	return r
}

// mustTask is mustGet that requires a TASK.
func mustTask(tb testing.TB, q *Queue, now int64, job, trainer string) *pb.Task {
	tb.Helper()
	r := mustGet(tb, q, now, job, trainer)
	if r.Result != pb.GetTaskResponse_TASK {
		tb.Fatalf("GetTask(%q, %q) = %v, want TASK", job, trainer, r.Result)
	}
	return r.Task
}

func mustFinish(tb testing.TB, q *Queue, now int64, job string, id, epoch int64, m *pb.TaskMetrics) bool {
	tb.Helper()
	r, err := q.TaskFinished(now, &pb.TaskFinishedRequest{Job: job, TaskId: id, Epoch: epoch, Metrics: m})
	if err != nil {
		tb.Fatalf("TaskFinished(%q, %d, %d): %v", job, id, epoch, err)
	}
	mustCheck(tb, q)
	return r.Accepted
}

func mustFail(tb testing.TB, q *Queue, now int64, job string, id, epoch int64) bool {
	tb.Helper()
	r, err := q.TaskFailed(now, &pb.TaskFailedRequest{Job: job, TaskId: id, Epoch: epoch, Reason: "test"})
	if err != nil {
		tb.Fatalf("TaskFailed(%q, %d, %d): %v", job, id, epoch, err)
	}
	mustCheck(tb, q)
	return r.Accepted
}

func mustExpire(tb testing.TB, q *Queue, now int64, job string) int64 {
	tb.Helper()
	r, err := q.ExpireTasks(now, &pb.ExpireTasksRequest{Job: job})
	if err != nil {
		tb.Fatalf("ExpireTasks(%q): %v", job, err)
	}
	mustCheck(tb, q)
	return r.Expired
}

func mustCheck(tb testing.TB, q *Queue) {
	tb.Helper()
	if err := q.check(); err != nil {
		tb.Fatalf("invariant: %v", err)
	}
}

func mustStatus(tb testing.TB, q *Queue, job string) *pb.JobStatus {
	tb.Helper()
	st, ok := q.Job(job)
	if !ok {
		tb.Fatalf("Job(%q) not found", job)
	}
	return st
}

func mustEvents(tb testing.TB, q *Queue, job string) []*pb.JobEvent {
	tb.Helper()
	evs, err := q.Events(job, 1, 0)
	if err != nil {
		tb.Fatalf("Events(%q): %v", job, err)
	}
	return evs
}

func mustMarshal(tb testing.TB, q *Queue) []byte {
	tb.Helper()
	b, err := q.MarshalBinary()
	if err != nil {
		tb.Fatalf("MarshalBinary: %v", err)
	}
	return b
}

// eventTypes returns the types of evs, for comparisons.
func eventTypes(evs []*pb.JobEvent) []pb.JobEvent_Type {
	out := make([]pb.JobEvent_Type, len(evs))
	for i, e := range evs {
		out[i] = e.Type
	}
	return out
}

func countEvents(evs []*pb.JobEvent, typ pb.JobEvent_Type) int {
	n := 0
	for _, e := range evs {
		if e.Type == typ {
			n++
		}
	}
	return n
}

func TestSubmitValidation(t *testing.T) {
	for _, tc := range []struct {
		name  string
		edit  func(s *pb.JobSpec)
		field string
	}{
		{"empty name", func(s *pb.JobSpec) { s.Name = "" }, "name"},
		{"upper-case name", func(s *pb.JobSpec) { s.Name = "MNIST" }, "name"},
		{"slash in name", func(s *pb.JobSpec) { s.Name = "a/b" }, "name"},
		{"dot-dot name", func(s *pb.JobSpec) { s.Name = ".." }, "name"},
		{"long name", func(s *pb.JobSpec) { s.Name = strings.Repeat("a", 64) }, "name"},
		{"zero records per task", func(s *pb.JobSpec) { s.RecordsPerTask = 0 }, "records_per_task"},
		{"negative records per task", func(s *pb.JobSpec) { s.RecordsPerTask = -1 }, "records_per_task"},
		{"too many tasks", func(s *pb.JobSpec) { s.Dataset.Records = jobspec.MaxTasks + 1; s.RecordsPerTask = 1 }, "records_per_task"},
		{"zero records", func(s *pb.JobSpec) { s.Dataset.Records = 0 }, "dataset.records"},
		{"no dataset", func(s *pb.JobSpec) { s.Dataset = nil }, "dataset.path"},
		{"empty dataset path", func(s *pb.JobSpec) { s.Dataset.Path = "" }, "dataset.path"},
		{"zero batch size", func(s *pb.JobSpec) { s.BatchSize = 0 }, "batch_size"},
		{"zero passes", func(s *pb.JobSpec) { s.Passes = 0 }, "passes"},
		{"negative max steps", func(s *pb.JobSpec) { s.MaxSteps = -1 }, "max_steps"},
		{"negative learning rate", func(s *pb.JobSpec) { s.Optimizer.LearningRate = -0.1 }, "optimizer.learning_rate"},
		{"zero learning rate", func(s *pb.JobSpec) { s.Optimizer.LearningRate = 0 }, "optimizer.learning_rate"},
		{"NaN learning rate", func(s *pb.JobSpec) { s.Optimizer.LearningRate = math.NaN() }, "optimizer.learning_rate"},
		{"infinite learning rate", func(s *pb.JobSpec) { s.Optimizer.LearningRate = math.Inf(1) }, "optimizer.learning_rate"},
		{"zero pservers", func(s *pb.JobSpec) { s.NumPservers = 0 }, "num_pservers"},
		{"unknown model", func(s *pb.JobSpec) { s.Model.Name = "resnet" }, "model.name"},
		{"no model", func(s *pb.JobSpec) { s.Model = nil }, "model.name"},
		{"unknown optimizer", func(s *pb.JobSpec) { s.Optimizer.Name = "lbfgs" }, "optimizer.name"},
		{"no optimizer", func(s *pb.JobSpec) { s.Optimizer = nil }, "optimizer.name"},
		{"unknown mode", func(s *pb.JobSpec) { s.Mode = 7 }, "mode"},
		{"negative staleness", func(s *pb.JobSpec) { s.Staleness = -1 }, "staleness"},
		{"negative keep_max", func(s *pb.JobSpec) { s.Checkpoint = &pb.CheckpointPolicy{KeepMax: -1} }, "checkpoint.keep_max"},
		{"negative replicas", func(s *pb.JobSpec) { s.Checkpoint = &pb.CheckpointPolicy{Replicas: -1} }, "checkpoint.replicas"},
		{"negative every_steps", func(s *pb.JobSpec) { s.Checkpoint = &pb.CheckpointPolicy{EverySteps: -1} }, "checkpoint.every_steps"},
		{"negative max_task_timeouts", func(s *pb.JobSpec) { s.MaxTaskTimeouts = -1 }, "max_task_timeouts"},
		{"negative timeout floor", func(s *pb.JobSpec) { s.TaskTimeoutFloorMs = -1 }, "task_timeout_floor_ms"},
		{"fewer shards than pservers", func(s *pb.JobSpec) { s.NumVirtualShards = 1 }, "num_virtual_shards"},
		{"negative dense block", func(s *pb.JobSpec) { s.DenseBlockSize = -1 }, "dense_block_size"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			q := New()
			s := testSpec("mnist", 100, 10)
			tc.edit(s)
			_, err := q.Submit(t0, &pb.SubmitJobRequest{Spec: s})
			if !errors.Is(err, errs.ErrInvalid) {
				t.Fatalf("Submit: err = %v, want ErrInvalid", err)
			}
			if !strings.Contains(err.Error(), tc.field) {
				t.Errorf("Submit: err = %q, does not name %q", err, tc.field)
			}
			if n := len(q.Jobs()); n != 0 {
				t.Errorf("Submit created %d jobs", n)
			}
		})
	}
	t.Run("nil spec", func(t *testing.T) {
		if _, err := New().Submit(t0, &pb.SubmitJobRequest{}); !errors.Is(err, errs.ErrInvalid) {
			t.Fatalf("err = %v, want ErrInvalid", err)
		}
	})
	t.Run("duplicate name", func(t *testing.T) {
		q := New()
		mustSubmit(t, q, t0, testSpec("mnist", 100, 10))
		before := mustMarshal(t, q)
		_, err := q.Submit(t0+1, &pb.SubmitJobRequest{Spec: testSpec("mnist", 50, 5)})
		if !errors.Is(err, errs.ErrExists) || !strings.Contains(err.Error(), "mnist") {
			t.Fatalf("err = %v, want ErrExists naming the job", err)
		}
		if !bytes.Equal(before, mustMarshal(t, q)) {
			t.Errorf("a rejected Submit changed the state")
		}
	})
}

func TestSubmitDefaults(t *testing.T) {
	q := New()
	in := testSpec("mnist", 95, 10)
	in.TaskTimeoutFloorMs = 0
	st := mustSubmit(t, q, t0, in)
	s := st.Spec
	if s.MaxTaskTimeouts != 3 || s.TaskTimeoutFloorMs != 10000 || s.NumVirtualShards != 64 ||
		s.DenseBlockSize != 65536 || s.Checkpoint.GetReplicas() != 2 {
		t.Errorf("defaults not filled: %v", s)
	}
	if in.MaxTaskTimeouts != 0 || in.Checkpoint != nil {
		t.Errorf("Submit changed the caller's spec")
	}
	if st.State != pb.JobState_JOB_RUNNING || st.TotalTasks != 10 || st.Todo != 10 || st.SubmittedUnixNano != t0 || st.EventsSeq != 1 {
		t.Errorf("status = %v", st)
	}
	tasks := q.Tasks("mnist")
	if len(tasks) != 10 || tasks[9].Begin != 90 || tasks[9].End != 95 || tasks[3].Begin != 30 || tasks[3].End != 40 {
		t.Errorf("task ranges wrong: %v, %v", tasks[3], tasks[9])
	}
}

func TestWholePass(t *testing.T) {
	q := New()
	mustSubmit(t, q, t0, testSpec("mnist", 9, 2)) // 5 tasks, last [8, 9)
	now := t0
	var lastEpoch int64
	for want := int64(0); want < 5; want++ {
		now += sec
		task := mustTask(t, q, now, "mnist", "t1")
		if task.Id != want || task.Epoch <= lastEpoch || task.State != pb.TaskState_TASK_PENDING ||
			task.Trainer != "t1" || task.StartedUnixNano != now || task.DeadlineUnixNano != now+1000*msNs {
			t.Fatalf("task %d = %v", want, task)
		}
		lastEpoch = task.Epoch
		if want == 4 && (task.Begin != 8 || task.End != 9) {
			t.Errorf("last task covers [%d, %d), want [8, 9)", task.Begin, task.End)
		}
		if !mustFinish(t, q, now+sec/10, "mnist", task.Id, task.Epoch, &pb.TaskMetrics{Loss: float64(want), Examples: 2, Step: want + 1}) {
			t.Fatalf("finish of task %d not accepted", want)
		}
	}
	st := mustStatus(t, q, "mnist")
	if st.State != pb.JobState_JOB_SUCCEEDED || st.Done != 5 || st.Todo != 0 || st.FinishedUnixNano != now+sec/10 {
		t.Fatalf("status = %v", st)
	}
	if len(st.Metrics) != 1 || st.Metrics[0].TrainLoss != 2 || st.Metrics[0].Examples != 10 || st.Metrics[0].Step != 5 {
		t.Errorf("metrics = %v", st.Metrics)
	}
	if r := mustGet(t, q, now+sec, "mnist", "t1"); r.Result != pb.GetTaskResponse_JOB_OVER {
		t.Errorf("GetTask after the job = %v, want JOB_OVER", r.Result)
	}
	evs := mustEvents(t, q, "mnist")
	want := []pb.JobEvent_Type{pb.JobEvent_JOB_SUBMITTED, 0, 0, 0, 0, 0, pb.JobEvent_PASS_ENDED, pb.JobEvent_JOB_ENDED}
	if got := eventTypes(evs); !slicesEqual(got, want) {
		t.Errorf("events = %v, want %v", got, want)
	}
	for i, e := range evs {
		if e.Seq != int64(i+1) || e.Job != "mnist" {
			t.Errorf("event %d: seq %d job %q", i, e.Seq, e.Job)
		}
	}
	// version: the step the trainer reported (TaskMetrics.step).
	if e := evs[3]; e.TaskId != 2 || e.Loss != 2 || e.Trainer != "t1" || e.Epoch != 3 || e.Version != 3 {
		t.Errorf("TASK_DONE event = %v", e)
	}
}

func slicesEqual[T comparable](a, b []T) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func TestTimeout(t *testing.T) {
	q := New()
	spec := testSpec("j", 2, 1) // 2 tasks
	mustSubmit(t, q, t0, spec)
	now := t0
	task := mustTask(t, q, now, "j", "t1")
	if n := mustExpire(t, q, task.DeadlineUnixNano, "j"); n != 0 {
		t.Fatalf("expired %d at the deadline, want 0", n)
	}
	// Timeouts 1..3 go back to todo (the back of the queue), the 4th fails.
	for k := int32(1); k <= 4; k++ {
		now = task.DeadlineUnixNano + 1
		if n := mustExpire(t, q, now, "j"); n != 1 {
			t.Fatalf("timeout %d: expired %d, want 1", k, n)
		}
		ts := q.Tasks("j")[0]
		if ts.Timeouts != k {
			t.Fatalf("timeout %d: task timeouts = %d", k, ts.Timeouts)
		}
		if k == 4 {
			if ts.State != pb.TaskState_TASK_FAILED {
				t.Fatalf("after 4 timeouts state = %v, want FAILED", ts.State)
			}
			break
		}
		if ts.State != pb.TaskState_TASK_TODO {
			t.Fatalf("timeout %d: state = %v, want TODO", k, ts.State)
		}
		// Task 1 is now at the front: it is handed out and finished.
		if k == 1 {
			other := mustTask(t, q, now, "j", "t2")
			if other.Id != 1 {
				t.Fatalf("requeued task should be behind task 1, got %d", other.Id)
			}
			mustFinish(t, q, now, "j", other.Id, other.Epoch, nil)
		}
		task = mustTask(t, q, now, "j", "t1")
		if task.Id != 0 || task.Timeouts != k {
			t.Fatalf("got %v, want task 0 with %d timeouts", task, k)
		}
	}
	// Task 0 failed after its 4th timeout, task 1 is done: the pass and the
	// (one-pass) job end.
	st := mustStatus(t, q, "j")
	if st.State != pb.JobState_JOB_SUCCEEDED || st.Failed != 1 || st.Done != 1 || st.Timeouts != 4 || st.Requeued != 3 ||
		!strings.Contains(st.Message, "1 tasks failed") {
		t.Errorf("status = %v", st)
	}
	evs := mustEvents(t, q, "j")
	if countEvents(evs, pb.JobEvent_TASK_FAILED) != 1 || countEvents(evs, pb.JobEvent_TASK_REQUEUED) != 3 {
		t.Errorf("events = %v", eventTypes(evs))
	}
}

func TestAllTasksFailedFailsTheJob(t *testing.T) {
	q := New()
	spec := testSpec("j", 1, 1)
	spec.MaxTaskTimeouts = 1
	mustSubmit(t, q, t0, spec)
	now := t0
	for range 2 {
		task := mustTask(t, q, now, "j", "t1")
		now = task.DeadlineUnixNano + 1
		mustExpire(t, q, now, "j")
	}
	st := mustStatus(t, q, "j")
	if st.State != pb.JobState_JOB_FAILED || st.Failed != 1 || st.FinishedUnixNano != now {
		t.Fatalf("status = %v", st)
	}
}

func TestStaleAndUnknownFinishes(t *testing.T) {
	q := New()
	mustSubmit(t, q, t0, testSpec("j", 4, 1))
	old := mustTask(t, q, t0, "j", "t1")
	mustExpire(t, q, old.DeadlineUnixNano+1, "j")
	cur := mustTask(t, q, t0+2*sec, "j", "t2") // task 1
	cur0 := mustTask(t, q, t0+2*sec, "j", "t2")
	if cur0.Id != 2 {
		cur0 = nil
	}
	for _, tc := range []struct {
		name      string
		id, epoch int64
	}{
		{"stale epoch", old.Id, old.Epoch},
		{"future epoch", cur.Id, cur.Epoch + 100},
		{"zero epoch", cur.Id, 0},
		{"todo task", 0, old.Epoch},
		{"unknown id", 99, cur.Epoch},
		{"unknown eval id", -1, cur.Epoch},
		{"very negative id", -1 << 40, cur.Epoch},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := mustMarshal(t, q)
			if mustFinish(t, q, t0+3*sec, "j", tc.id, tc.epoch, &pb.TaskMetrics{Loss: 1}) {
				t.Errorf("TaskFinished accepted")
			}
			if mustFail(t, q, t0+3*sec, "j", tc.id, tc.epoch) {
				t.Errorf("TaskFailed accepted")
			}
			if !bytes.Equal(before, mustMarshal(t, q)) {
				t.Errorf("a rejected report changed the state")
			}
		})
	}
	t.Run("unknown job", func(t *testing.T) {
		_, err := q.TaskFinished(t0, &pb.TaskFinishedRequest{Job: "nope", TaskId: 0, Epoch: 1})
		if !errors.Is(err, errs.ErrNotFound) {
			t.Errorf("err = %v, want ErrNotFound", err)
		}
	})
	t.Run("second finish", func(t *testing.T) {
		if !mustFinish(t, q, t0+3*sec, "j", cur.Id, cur.Epoch, nil) {
			t.Fatal("first finish rejected")
		}
		if mustFinish(t, q, t0+3*sec, "j", cur.Id, cur.Epoch, nil) {
			t.Error("second finish accepted")
		}
	})
	t.Run("cancelled job", func(t *testing.T) {
		if _, err := q.Cancel(t0+4*sec, &pb.CancelJobRequest{Name: "j"}); err != nil {
			t.Fatal(err)
		}
		if mustFinish(t, q, t0+4*sec, "j", cur0.GetId(), cur0.GetEpoch(), nil) {
			t.Error("finish on a cancelled job accepted")
		}
	})
}

func TestPassRollover(t *testing.T) {
	q := New()
	spec := testSpec("j", 4, 1)
	spec.Passes = 2
	spec.MaxTaskTimeouts = 1
	mustSubmit(t, q, t0, spec)
	now := t0
	// Pass 0: task 0 times out once, task 3 fails twice, for good.
	task := mustTask(t, q, now, "j", "t1")
	now = task.DeadlineUnixNano + 1
	mustExpire(t, q, now, "j")
	for q.Tasks("j")[3].State != pb.TaskState_TASK_FAILED {
		task = mustTask(t, q, now, "j", "t1")
		if task.Id == 3 {
			mustFail(t, q, now, "j", 3, task.Epoch)
			continue
		}
		mustFinish(t, q, now, "j", task.Id, task.Epoch, &pb.TaskMetrics{Loss: 1, Examples: 1})
	}
	for {
		st := mustStatus(t, q, "j")
		if st.Pass == 1 {
			break
		}
		task = mustTask(t, q, now, "j", "t1")
		mustFinish(t, q, now, "j", task.Id, task.Epoch, &pb.TaskMetrics{Loss: 1, Examples: 1})
	}
	st := mustStatus(t, q, "j")
	if st.Todo != 3 || st.Done != 0 || st.Failed != 1 || st.State != pb.JobState_JOB_RUNNING || len(st.Metrics) != 1 {
		t.Fatalf("after rollover: %v", st)
	}
	for _, ts := range q.Tasks("j")[:3] {
		if ts.Timeouts != 0 || ts.Failures != 0 || ts.Pass != 1 || ts.State != pb.TaskState_TASK_TODO {
			t.Errorf("task not reset for pass 1: %v", ts)
		}
	}
	// Pass 1 hands out 0, 1, 2 in id order and never the failed task 3.
	for want := int64(0); want < 3; want++ {
		task = mustTask(t, q, now, "j", "t1")
		if task.Id != want || task.Pass != 1 {
			t.Fatalf("pass 1 task = %v, want id %d", task, want)
		}
		mustFinish(t, q, now, "j", task.Id, task.Epoch, &pb.TaskMetrics{Loss: 0.5, Examples: 1})
	}
	st = mustStatus(t, q, "j")
	if st.State != pb.JobState_JOB_SUCCEEDED || len(st.Metrics) != 2 || st.Metrics[1].TrainLoss != 0.5 {
		t.Errorf("final status = %v", st)
	}
	if n := countEvents(mustEvents(t, q, "j"), pb.JobEvent_PASS_ENDED); n != 2 {
		t.Errorf("%d PASS_ENDED events, want 2", n)
	}
}

func TestRequeueTrainer(t *testing.T) {
	q := New()
	mustSubmit(t, q, t0, testSpec("j", 5, 1))
	a0 := mustTask(t, q, t0, "j", "a")
	b1 := mustTask(t, q, t0, "j", "b")
	a2 := mustTask(t, q, t0, "j", "a")
	r, err := q.RequeueTrainer(t0+sec, &pb.RequeueTrainerRequest{Job: "j", Trainer: "a", Reason: "gossip: dead"})
	if err != nil || r.Requeued != 2 {
		t.Fatalf("RequeueTrainer = %v, %v; want 2", r, err)
	}
	mustCheck(t, q)
	st := mustStatus(t, q, "j")
	if st.Pending != 1 || st.Todo != 4 || st.Timeouts != 0 || st.Requeued != 2 {
		t.Errorf("status = %v", st)
	}
	for _, id := range []int64{a0.Id, a2.Id} {
		if ts := q.Tasks("j")[id]; ts.Timeouts != 0 || ts.State != pb.TaskState_TASK_TODO {
			t.Errorf("task %d = %v", id, ts)
		}
	}
	// Todo order: 3, 4, then the requeued 0, 2.
	var order []int64
	for range 4 {
		order = append(order, mustTask(t, q, t0+2*sec, "j", "c").Id)
	}
	if !slicesEqual(order, []int64{3, 4, 0, 2}) {
		t.Errorf("todo order = %v", order)
	}
	if mustFinish(t, q, t0+2*sec, "j", a0.Id, a0.Epoch, nil) {
		t.Error("the dead trainer's late finish was accepted")
	}
	if !mustFinish(t, q, t0+2*sec, "j", b1.Id, b1.Epoch, nil) {
		t.Error("the live trainer's finish was rejected")
	}
	evs := mustEvents(t, q, "j")
	if countEvents(evs, pb.JobEvent_TASK_REQUEUED) != 2 || countEvents(evs, pb.JobEvent_TRAINER_LEFT) != 1 {
		t.Errorf("events = %v", eventTypes(evs))
	}
	t.Run("errors", func(t *testing.T) {
		if _, err := q.RequeueTrainer(t0, &pb.RequeueTrainerRequest{Job: "nope", Trainer: "a"}); !errors.Is(err, errs.ErrNotFound) {
			t.Errorf("unknown job: %v", err)
		}
		if _, err := q.RequeueTrainer(t0, &pb.RequeueTrainerRequest{Job: "j"}); !errors.Is(err, errs.ErrInvalid) {
			t.Errorf("empty trainer: %v", err)
		}
	})
}

// speculativeSetup finishes 3 of 4 tasks in 1 s each and leaves task 3
// pending on "slow" since start; returns that task.
func speculativeSetup(t *testing.T, q *Queue) (*pb.Task, int64) {
	t.Helper()
	mustSubmit(t, q, t0, testSpec("j", 4, 1))
	slow := mustTask(t, q, t0, "j", "slow")
	for range 3 {
		task := mustTask(t, q, t0, "j", "fast")
		if !mustFinish(t, q, t0+sec, "j", task.Id, task.Epoch, nil) {
			t.Fatal("finish rejected")
		}
	}
	return slow, t0 + sec
}

func TestSpeculativeCopy(t *testing.T) {
	for _, tc := range []struct {
		name       string
		backupWins bool
	}{{"backup finishes first", true}, {"primary finishes first", false}} {
		t.Run(tc.name, func(t *testing.T) {
			q := New()
			slow, now := speculativeSetup(t, q)
			// Median 1 s: no backup until the task ran more than 2 s.
			if r := mustGet(t, q, t0+2*sec, "j", "fast"); r.Result != pb.GetTaskResponse_WAIT || r.RetryAfterMs != WaitRetryMs {
				t.Fatalf("at 2 s: %v, want WAIT", r)
			}
			if r := mustGet(t, q, t0+3*sec, "j", "slow"); r.Result != pb.GetTaskResponse_WAIT {
				t.Fatalf("the primary's own trainer got %v, want WAIT", r.Result)
			}
			now = t0 + 3*sec
			backup := mustTask(t, q, now, "j", "fast")
			if backup.Id != slow.Id || backup.Epoch <= slow.Epoch || backup.BackupEpoch != backup.Epoch ||
				backup.BackupTrainer != "fast" || backup.Trainer != "slow" {
				t.Fatalf("backup = %v", backup)
			}
			if r := mustGet(t, q, now, "j", "third"); r.Result != pb.GetTaskResponse_WAIT {
				t.Fatalf("a second backup was handed out: %v", r)
			}
			first, second := slow, backup
			if tc.backupWins {
				first, second = backup, slow
			}
			if !mustFinish(t, q, now+sec, "j", first.Id, first.Epoch, &pb.TaskMetrics{Loss: 1}) {
				t.Fatal("first finish rejected")
			}
			if mustFinish(t, q, now+2*sec, "j", second.Id, second.Epoch, &pb.TaskMetrics{Loss: 1}) {
				t.Fatal("second copy's finish accepted")
			}
			evs := mustEvents(t, q, "j")
			done := 0
			for _, e := range evs {
				if e.Type == pb.JobEvent_TASK_DONE && e.TaskId == slow.Id {
					done++
					if e.Epoch != first.Epoch {
						t.Errorf("TASK_DONE epoch %d, want %d", e.Epoch, first.Epoch)
					}
				}
			}
			if done != 1 {
				t.Errorf("task %d done %d times", slow.Id, done)
			}
			if st := mustStatus(t, q, "j"); st.State != pb.JobState_JOB_SUCCEEDED || st.Done != 4 {
				t.Errorf("status = %v", st)
			}
		})
	}
	t.Run("expiry needs both copies overdue", func(t *testing.T) {
		q := New()
		slow, _ := speculativeSetup(t, q)
		backup := mustTask(t, q, t0+3*sec, "j", "fast") // deadline t0+3s+3s (3 x slowest 1 s)
		if n := mustExpire(t, q, slow.DeadlineUnixNano+1, "j"); n != 0 {
			t.Fatalf("expired %d with the backup alive", n)
		}
		ts := q.Tasks("j")[slow.Id]
		if ts.Trainer != "fast" || ts.Epoch != backup.Epoch || ts.BackupEpoch != 0 {
			t.Fatalf("after the primary died: %v", ts)
		}
		if mustFinish(t, q, t0+5*sec, "j", slow.Id, slow.Epoch, nil) {
			t.Error("the dropped primary's finish was accepted")
		}
		if n := mustExpire(t, q, backup.DeadlineUnixNano+1, "j"); n != 1 {
			t.Fatalf("expired %d when both copies are overdue", n)
		}
		if ts := q.Tasks("j")[slow.Id]; ts.State != pb.TaskState_TASK_TODO || ts.Timeouts != 1 {
			t.Errorf("after both died: %v", ts)
		}
	})
	t.Run("an overdue backup is dropped, the primary runs on", func(t *testing.T) {
		q := New()
		slow, _ := speculativeSetup(t, q)
		// Primary deadline t0+1s (floor); stretch it so the backup dies first.
		q.jobs["j"].pending[q.jobs["j"].tasks[slow.Id].slot].primary.deadline = t0 + 100*sec
		backup := mustTask(t, q, t0+3*sec, "j", "fast")
		if n := mustExpire(t, q, backup.DeadlineUnixNano+1, "j"); n != 0 {
			t.Fatalf("expired %d", n)
		}
		if ts := q.Tasks("j")[slow.Id]; ts.State != pb.TaskState_TASK_PENDING || ts.Epoch != slow.Epoch || ts.BackupEpoch != 0 {
			t.Fatalf("after the backup died: %v", ts)
		}
		if mustFinish(t, q, t0+10*sec, "j", backup.Id, backup.Epoch, nil) {
			t.Error("the dropped backup's finish was accepted")
		}
		if !mustFinish(t, q, t0+10*sec, "j", slow.Id, slow.Epoch, nil) {
			t.Error("the primary's finish was rejected")
		}
	})
	t.Run("requeue of the backup's trainer keeps the primary", func(t *testing.T) {
		q := New()
		slow, _ := speculativeSetup(t, q)
		mustTask(t, q, t0+3*sec, "j", "fast")
		r, _ := q.RequeueTrainer(t0+3*sec, &pb.RequeueTrainerRequest{Job: "j", Trainer: "fast"})
		mustCheck(t, q)
		if ts := q.Tasks("j")[slow.Id]; r.Requeued != 0 || ts.State != pb.TaskState_TASK_PENDING || ts.BackupEpoch != 0 {
			t.Errorf("requeued %d, task %v", r.Requeued, ts)
		}
	})
}

func TestBlacklistCooldown(t *testing.T) {
	for _, tc := range []struct {
		strikes int32
		want    int64
	}{{1, 1 * sec}, {2, 2 * sec}, {3, 4 * sec}, {4, 8 * sec}, {12, 2048 * sec}, {13, 3600 * sec}, {40, 3600 * sec}, {math.MaxInt32, 3600 * sec}} {
		if got := cooldown(tc.strikes); got != tc.want {
			t.Errorf("cooldown(%d) = %d, want %d", tc.strikes, got, tc.want)
		}
	}
	q := New()
	mustSubmit(t, q, t0, testSpec("j", 10, 1))
	now := t0
	// Each round: 3 consecutive failures blacklist the trainer for 1 s, 2 s, 4 s ...
	failThree := func() {
		t.Helper()
		for range 3 {
			task := mustTask(t, q, now, "j", "bad")
			mustFail(t, q, now, "j", task.Id, task.Epoch)
		}
	}
	for round, wantMs := range []int64{1000, 2000, 4000} {
		failThree()
		r := mustGet(t, q, now, "j", "bad")
		if r.Result != pb.GetTaskResponse_WAIT || r.RetryAfterMs != wantMs {
			t.Fatalf("round %d: %v, want WAIT %d ms", round, r, wantMs)
		}
		if r := mustGet(t, q, now+wantMs*msNs-1, "j", "bad"); r.Result != pb.GetTaskResponse_WAIT || r.RetryAfterMs != 1 {
			t.Fatalf("round %d: 1 ns before the end: %v", round, r)
		}
		if r := mustGet(t, q, now, "j", "good"); r.Result != pb.GetTaskResponse_TASK {
			t.Fatalf("another trainer is blocked: %v", r)
		} else {
			mustFinish(t, q, now, "j", r.Task.Id, r.Task.Epoch, nil)
		}
		now += wantMs * msNs
	}
	// A success resets the consecutive count: fail, fail, finish, fail does
	// not blacklist.
	task := mustTask(t, q, now, "j", "bad")
	mustFail(t, q, now, "j", task.Id, task.Epoch)
	task = mustTask(t, q, now, "j", "bad")
	mustFail(t, q, now, "j", task.Id, task.Epoch)
	task = mustTask(t, q, now, "j", "bad")
	mustFinish(t, q, now, "j", task.Id, task.Epoch, nil)
	task = mustTask(t, q, now, "j", "bad")
	mustFail(t, q, now, "j", task.Id, task.Epoch)
	if r := mustGet(t, q, now, "j", "bad"); r.Result != pb.GetTaskResponse_TASK {
		t.Fatalf("after fail, fail, finish, fail: %v, want TASK", r)
	}
	// Capped at one hour: the 21st blacklisting.
	held := mustGet(t, q, now, "j", "bad").Task
	ts := q.jobs["j"].trainers["bad"]
	ts.strikes, ts.consecutive = 20, 2
	mustFail(t, q, now, "j", held.Id, held.Epoch)
	if r := mustGet(t, q, now, "j", "bad"); r.Result != pb.GetTaskResponse_WAIT || r.RetryAfterMs != 3600*1000 {
		t.Fatalf("after 21 blacklistings: %v, want WAIT 1 h", r)
	}
}

func TestAdaptiveTimeout(t *testing.T) {
	q := New()
	mustSubmit(t, q, t0, testSpec("j", 10, 1)) // floor 1 s
	now := t0
	for _, tc := range []struct {
		run  int64 // how long this task runs
		want int64 // deadline - start of the next task
	}{
		{sec / 10, 1 * sec},  // 3 x 0.1 s < floor
		{5 * sec, 15 * sec},  // 3 x slowest
		{sec / 10, 15 * sec}, // a fast task does not lower it
		{7 * sec, 21 * sec},
	} {
		task := mustTask(t, q, now, "j", "t")
		now += tc.run
		mustFinish(t, q, now, "j", task.Id, task.Epoch, nil)
		next := mustTask(t, q, now, "j", "t")
		if got := next.DeadlineUnixNano - next.StartedUnixNano; got != tc.want {
			t.Errorf("after a %d ns task: timeout %d, want %d", tc.run, got, tc.want)
		}
		mustFinish(t, q, now, "j", next.Id, next.Epoch, nil) // 0 s
	}
}

// TestEvalMetricNamesEvaluatedVersion (issue 33, checkpoint best): a
// pass's metric names a checkpoint version only if it holds the parameters
// evaluated (its step is the eval's), committed before the eval reported or
// after; a version of another step, or of another trajectory (a rollback's
// epoch) at the same step, is never named. Before, the metric named the
// newest committed version, whatever its step.
func TestEvalMetricNamesEvaluatedVersion(t *testing.T) {
	commit := func(q *Queue, v int64) {
		t.Helper()
		if _, err := q.RecordEvent(t0, &pb.JobEvent{Job: "j", Type: pb.JobEvent_CHECKPOINT_COMMITTED, Version: v}); err != nil {
			t.Fatal(err)
		}
	}
	// evalAt runs pass 0 (2 tasks) and its eval at step, committing before
	// it; returns the queue.
	evalAt := func(step int64, before ...int64) *Queue {
		t.Helper()
		q := New()
		spec := testSpec("j", 2, 1)
		spec.Passes = 3
		spec.EvalEachPass = true
		mustSubmit(t, q, t0, spec)
		for range 2 {
			task := mustTask(t, q, t0, "j", "a")
			mustFinish(t, q, t0, "j", task.Id, task.Epoch, &pb.TaskMetrics{Loss: 1, Examples: 1, Step: step})
		}
		for _, v := range before {
			commit(q, v)
		}
		ev := mustTask(t, q, t0, "j", "a")
		if !mustFinish(t, q, t0, "j", ev.Id, ev.Epoch, &pb.TaskMetrics{Accuracy: 0.5, Step: step}) {
			t.Fatal("eval finish rejected")
		}
		return q
	}
	version := func(q *Queue) int64 {
		t.Helper()
		st := mustStatus(t, q, "j")
		if len(st.Metrics) != 1 {
			t.Fatalf("metrics %v, want one", st.Metrics)
		}
		return st.Metrics[0].CheckpointVersion
	}
	epoch1 := int64(schema.EpochStride)
	for _, tc := range []struct {
		name          string
		before, after []int64
		want          int64
	}{
		{"newest is of an earlier step", []int64{35}, nil, 0},
		{"newest is of the step", []int64{35, 40}, nil, 40},
		{"committed after the eval", []int64{35}, []int64{40}, 40},
		{"a later step after the eval", []int64{35}, []int64{42}, 0},
		{"another epoch at the step", []int64{35}, []int64{epoch1 + 40}, 0},
		{"rolled back before the eval", []int64{epoch1 + 35, epoch1 + 40}, nil, epoch1 + 40},
	} {
		q := evalAt(40, tc.before...)
		for _, v := range tc.after {
			commit(q, v)
		}
		if got := version(q); got != tc.want {
			t.Errorf("%s: metric of step 40 names version %d, want %d", tc.name, got, tc.want)
		}
	}
}

func TestEvalFlow(t *testing.T) {
	q := New()
	spec := testSpec("j", 2, 1)
	spec.Passes = 2
	spec.EvalEachPass = true
	mustSubmit(t, q, t0, spec)
	if _, err := q.RecordEvent(t0, &pb.JobEvent{Job: "j", Type: pb.JobEvent_CHECKPOINT_COMMITTED, Version: 7}); err != nil {
		t.Fatal(err)
	}
	now := t0
	finishPass := func(pass int32) {
		t.Helper()
		for range 2 {
			task := mustTask(t, q, now, "j", "a")
			if task.Pass != pass || task.Kind != pb.TaskKind_TASK_KIND_TRAIN {
				t.Fatalf("task %v, want a train task of pass %d", task, pass)
			}
			mustFinish(t, q, now, "j", task.Id, task.Epoch, &pb.TaskMetrics{Loss: 2, Examples: 1, Step: 10})
		}
	}
	finishPass(0)
	st := mustStatus(t, q, "j")
	if st.Pass != 0 || st.Done != 2 || st.State != pb.JobState_JOB_RUNNING || len(st.Metrics) != 0 {
		t.Fatalf("after pass 0 training: %v", st)
	}
	ev := mustTask(t, q, now, "j", "a")
	if ev.Kind != pb.TaskKind_TASK_KIND_EVAL || ev.Id != -1 || ev.Pass != 0 || ev.DeadlineUnixNano != now+sec {
		t.Fatalf("eval task = %v", ev)
	}
	if r := mustGet(t, q, now, "j", "b"); r.Result != pb.GetTaskResponse_PASS_OVER || r.Pass != 0 || r.RetryAfterMs != WaitRetryMs {
		t.Fatalf("while eval runs: %v, want PASS_OVER", r)
	}
	// The eval times out once and is handed out again with a new epoch.
	now = ev.DeadlineUnixNano + 1
	if n := mustExpire(t, q, now, "j"); n != 1 {
		t.Fatalf("eval not expired")
	}
	if mustFinish(t, q, now, "j", ev.Id, ev.Epoch, &pb.TaskMetrics{Loss: 9}) {
		t.Fatal("stale eval finish accepted")
	}
	ev2 := mustTask(t, q, now, "j", "b")
	if ev2.Kind != pb.TaskKind_TASK_KIND_EVAL || ev2.Epoch <= ev.Epoch || ev2.Timeouts != 1 {
		t.Fatalf("eval retry = %v", ev2)
	}
	if !mustFinish(t, q, now, "j", ev2.Id, ev2.Epoch, &pb.TaskMetrics{Loss: 0.7, Accuracy: 0.81, Examples: 1000, Step: 11}) {
		t.Fatal("eval finish rejected")
	}
	st = mustStatus(t, q, "j")
	// Version 7 holds the parameters after step 7, not the 11 evaluated.
	want := &pb.PassMetric{Pass: 0, TrainLoss: 2, TestLoss: 0.7, TestAccuracy: 0.81, Examples: 2, Step: 11}
	if st.Pass != 1 || st.Todo != 2 || len(st.Metrics) != 1 || !proto.Equal(st.Metrics[0], want) {
		t.Fatalf("after eval: pass %d todo %d metrics %v, want %v", st.Pass, st.Todo, st.Metrics, want)
	}
	// A checkpoint of step 11 committed after the eval is the one it measured.
	if _, err := q.RecordEvent(now, &pb.JobEvent{Job: "j", Type: pb.JobEvent_CHECKPOINT_COMMITTED, Version: 11}); err != nil {
		t.Fatal(err)
	}
	if st = mustStatus(t, q, "j"); st.Metrics[0].CheckpointVersion != 11 {
		t.Fatalf("after the checkpoint of step 11: metric %v, want checkpoint_version 11", st.Metrics[0])
	}
	finishPass(1)
	ev3 := mustTask(t, q, now, "j", "a")
	if ev3.Id != -2 || ev3.Pass != 1 {
		t.Fatalf("eval of pass 1 = %v", ev3)
	}
	mustFinish(t, q, now, "j", ev3.Id, ev3.Epoch, &pb.TaskMetrics{Loss: 0.5, Accuracy: 0.85})
	st = mustStatus(t, q, "j")
	if st.State != pb.JobState_JOB_SUCCEEDED || len(st.Metrics) != 2 || st.Metrics[1].TestAccuracy != 0.85 || st.Metrics[1].Step != 10 {
		t.Fatalf("final: %v", st)
	}
	evs := mustEvents(t, q, "j")
	if countEvents(evs, pb.JobEvent_EVAL_REPORTED) != 2 || countEvents(evs, pb.JobEvent_PASS_ENDED) != 2 {
		t.Errorf("events = %v", eventTypes(evs))
	}
	for _, e := range evs {
		// No checkpoint of step 11 existed when it reported: version 0.
		if e.Type == pb.JobEvent_EVAL_REPORTED && e.Pass == 0 && (e.Accuracy != 0.81 || e.Version != 0 || e.TaskId != -1) {
			t.Errorf("EVAL_REPORTED = %v", e)
		}
	}
}

func TestEvalGivesUp(t *testing.T) {
	q := New()
	spec := testSpec("j", 1, 1)
	spec.Passes = 2
	spec.EvalEachPass = true
	spec.MaxTaskTimeouts = 1
	mustSubmit(t, q, t0, spec)
	task := mustTask(t, q, t0, "j", "a")
	mustFinish(t, q, t0, "j", task.Id, task.Epoch, &pb.TaskMetrics{Loss: 1})
	for range 2 {
		ev := mustTask(t, q, t0, "j", "a")
		mustFail(t, q, t0, "j", ev.Id, ev.Epoch)
	}
	st := mustStatus(t, q, "j")
	if st.Pass != 1 || len(st.Metrics) != 1 || st.Metrics[0].TestAccuracy != 0 || st.Metrics[0].TrainLoss != 1 {
		t.Fatalf("after the eval gave up: %v", st)
	}
}

func TestMaxSteps(t *testing.T) {
	q := New()
	spec := testSpec("j", 10, 1)
	spec.Passes = 5
	spec.MaxSteps = 30
	spec.EvalEachPass = true
	mustSubmit(t, q, t0, spec)
	a := mustTask(t, q, t0, "j", "a")
	b := mustTask(t, q, t0, "j", "b")
	mustFinish(t, q, t0, "j", a.Id, a.Epoch, &pb.TaskMetrics{Step: 30})
	if r := mustGet(t, q, t0, "j", "c"); r.Task.GetKind() != pb.TaskKind_TASK_KIND_EVAL {
		t.Fatalf("after max_steps: %v, want the final eval", r)
	}
	if mustFinish(t, q, t0, "j", b.Id, b.Epoch, nil) {
		t.Error("a cut task's finish was accepted")
	}
	mustFinish(t, q, t0, "j", -1, q.jobs["j"].eval.run.epoch, &pb.TaskMetrics{Accuracy: 0.5})
	st := mustStatus(t, q, "j")
	if st.State != pb.JobState_JOB_SUCCEEDED || !strings.Contains(st.Message, "max_steps") || len(st.Metrics) != 1 || st.Metrics[0].Step != 30 {
		t.Fatalf("status = %v", st)
	}
}

func TestCancel(t *testing.T) {
	q := New()
	mustSubmit(t, q, t0, testSpec("j", 10, 1))
	task := mustTask(t, q, t0, "j", "a")
	r, err := q.Cancel(t0+sec, &pb.CancelJobRequest{Name: "j"})
	if err != nil || r.Status.State != pb.JobState_JOB_CANCELLED || r.Status.FinishedUnixNano != t0+sec {
		t.Fatalf("Cancel = %v, %v", r, err)
	}
	mustCheck(t, q)
	if _, err := q.Cancel(t0+2*sec, &pb.CancelJobRequest{Name: "j"}); err != nil {
		t.Errorf("second Cancel: %v", err)
	}
	if got := countEvents(mustEvents(t, q, "j"), pb.JobEvent_JOB_ENDED); got != 1 {
		t.Errorf("%d JOB_ENDED events", got)
	}
	if r := mustGet(t, q, t0, "j", "a"); r.Result != pb.GetTaskResponse_JOB_OVER {
		t.Errorf("GetTask = %v", r.Result)
	}
	if mustFinish(t, q, t0, "j", task.Id, task.Epoch, nil) {
		t.Error("finish after cancel accepted")
	}
	if _, err := q.Cancel(t0, &pb.CancelJobRequest{Name: "nope"}); !errors.Is(err, errs.ErrNotFound) {
		t.Errorf("unknown job: %v", err)
	}
	mustSubmit(t, q, t0, testSpec("k", 1, 1))
	task = mustTask(t, q, t0, "k", "a")
	mustFinish(t, q, t0, "k", task.Id, task.Epoch, nil)
	if _, err := q.Cancel(t0, &pb.CancelJobRequest{Name: "k"}); !errors.Is(err, errs.ErrFailedPrecondition) {
		t.Errorf("cancel of a succeeded job: %v", err)
	}
}

func TestGetTaskErrors(t *testing.T) {
	q := New()
	mustSubmit(t, q, t0, testSpec("j", 10, 1))
	if _, err := q.GetTask(t0, &pb.GetTaskRequest{Job: "nope", Trainer: "a"}); !errors.Is(err, errs.ErrNotFound) {
		t.Errorf("unknown job: %v", err)
	}
	if _, err := q.GetTask(t0, &pb.GetTaskRequest{Job: "j"}); !errors.Is(err, errs.ErrInvalid) || !strings.Contains(err.Error(), "trainer") {
		t.Errorf("empty trainer: %v", err)
	}
	if _, err := q.ExpireTasks(t0, &pb.ExpireTasksRequest{Job: "nope"}); !errors.Is(err, errs.ErrNotFound) {
		t.Errorf("ExpireTasks of an unknown job: %v", err)
	}
}

func TestEvents(t *testing.T) {
	q := New()
	q.eventCap = 10
	mustSubmit(t, q, t0, testSpec("j", 100, 1))
	for i := range 20 {
		task := mustTask(t, q, t0+int64(i), "j", "a")
		mustFinish(t, q, t0+int64(i), "j", task.Id, task.Epoch, nil)
	}
	if s := q.EventSeq("j"); s != 21 {
		t.Fatalf("EventSeq = %d, want 21", s)
	}
	for _, tc := range []struct {
		name      string
		from      int64
		limit     int
		wantFirst int64
		wantN     int
		wantErr   error
	}{
		{"all kept", 12, 0, 12, 10, nil},
		{"limit", 15, 3, 15, 3, nil},
		{"newest", 21, 0, 21, 1, nil},
		{"future", 22, 0, 0, 0, nil},
		{"dropped", 11, 0, 0, 0, errs.ErrCompacted}, // OutOfRange, as a compacted watch
		{"zero", 0, 0, 0, 0, errs.ErrCompacted},
	} {
		t.Run(tc.name, func(t *testing.T) {
			evs, err := q.Events("j", tc.from, tc.limit)
			if !errors.Is(err, tc.wantErr) || (err == nil) != (tc.wantErr == nil) {
				t.Fatalf("err = %v, want %v", err, tc.wantErr)
			}
			if err != nil {
				if !strings.Contains(err.Error(), "12") {
					t.Errorf("error %q does not name the oldest seq 12", err)
				}
				return
			}
			if len(evs) != tc.wantN || (tc.wantN > 0 && evs[0].Seq != tc.wantFirst) {
				t.Errorf("got %d events from %v", len(evs), evs)
			}
		})
	}
	if _, err := q.Events("nope", 0, 0); !errors.Is(err, errs.ErrNotFound) {
		t.Errorf("unknown job: %v", err)
	}
	// Snapshot keeps the ring.
	q2 := New()
	q2.eventCap = 10
	if err := q2.UnmarshalBinary(mustMarshal(t, q)); err != nil {
		t.Fatal(err)
	}
	if evs, err := q2.Events("j", 12, 0); err != nil || len(evs) != 10 || evs[9].Seq != 21 {
		t.Errorf("restored events: %v, %v", len(evs), err)
	}
	// Into a smaller ring: the newest are kept.
	q3 := New()
	q3.eventCap = 4
	if err := q3.UnmarshalBinary(mustMarshal(t, q)); err != nil {
		t.Fatal(err)
	}
	if evs, err := q3.Events("j", 18, 0); err != nil || len(evs) != 4 || evs[0].Seq != 18 {
		t.Errorf("restored into a smaller ring: %v, %v", len(evs), err)
	}
}

func TestRecordEvent(t *testing.T) {
	q := New()
	mustSubmit(t, q, t0, testSpec("j", 10, 1))
	for _, tc := range []struct {
		name    string
		ev      *pb.JobEvent
		wantErr error
	}{
		{"checkpoint", &pb.JobEvent{Job: "j", Type: pb.JobEvent_CHECKPOINT_COMMITTED, Version: 3, Message: "slot 0"}, nil},
		{"trainer joined", &pb.JobEvent{Job: "j", Type: pb.JobEvent_TRAINER_JOINED, Trainer: "n1/t0"}, nil},
		{"pserver restored", &pb.JobEvent{Job: "j", Type: pb.JobEvent_PSERVER_RESTORED, Version: 3}, nil},
		{"pserver promoted", &pb.JobEvent{Job: "j", Type: pb.JobEvent_PSERVER_PROMOTED, Version: 3, Message: "slot 0 on n2"}, nil},
		{"internal type", &pb.JobEvent{Job: "j", Type: pb.JobEvent_TASK_DONE}, errs.ErrInvalid},
		{"unknown job", &pb.JobEvent{Job: "x", Type: pb.JobEvent_TRAINER_JOINED}, errs.ErrNotFound},
		{"nil", nil, errs.ErrInvalid},
	} {
		t.Run(tc.name, func(t *testing.T) {
			seq := q.EventSeq("j")
			got, err := q.RecordEvent(t0+5, tc.ev)
			if !errors.Is(err, tc.wantErr) || (err == nil) != (tc.wantErr == nil) {
				t.Fatalf("err = %v, want %v", err, tc.wantErr)
			}
			if err != nil {
				if q.EventSeq("j") != seq {
					t.Error("a rejected event was stored")
				}
				return
			}
			if got.Seq != seq+1 || got.UnixNano != t0+5 || got.Type != tc.ev.Type || got.Message != tc.ev.Message {
				t.Errorf("stored %v", got)
			}
		})
	}
	if q.jobs["j"].ckptVersion != 3 {
		t.Errorf("checkpoint version = %d", q.jobs["j"].ckptVersion)
	}
}

func TestUnmarshalRejectsCorruptSnapshots(t *testing.T) {
	src := New()
	mustSubmit(t, src, t0, testSpec("j", 50, 1))
	task := mustTask(t, src, t0, "j", "a")
	mustFinish(t, src, t0, "j", task.Id, task.Epoch, nil)
	mustTask(t, src, t0, "j", "a")
	good := mustMarshal(t, src)

	dst := New()
	mustSubmit(t, dst, t0, testSpec("other", 5, 1))
	before := mustMarshal(t, dst)
	bad := map[string][]byte{
		"empty":     nil,
		"magic":     append([]byte("XXXX"), good[4:]...),
		"truncated": good[:len(good)-3],
		"trailing":  append(append([]byte{}, good...), 0),
	}
	// Flip each byte in turn: every result must decode to a valid state or fail.
	for i := 4; i < len(good); i++ {
		b := append([]byte{}, good...)
		b[i] ^= 0x5a
		q := New()
		if err := q.UnmarshalBinary(b); err == nil {
			mustCheck(t, q)
		} else if !errors.Is(err, errs.ErrMalformed) {
			t.Fatalf("flip at %d: error %v does not wrap ErrMalformed", i, err)
		}
	}
	for name, b := range bad {
		t.Run(name, func(t *testing.T) {
			if err := dst.UnmarshalBinary(b); !errors.Is(err, errs.ErrMalformed) {
				t.Fatalf("err = %v, want ErrMalformed", err)
			}
			if !bytes.Equal(before, mustMarshal(t, dst)) {
				t.Fatal("a failed UnmarshalBinary changed the queue")
			}
		})
	}
	if err := dst.UnmarshalBinary(good); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(good, mustMarshal(t, dst)) {
		t.Error("restore then marshal differs from the snapshot")
	}
}

func TestJobsSorted(t *testing.T) {
	q := New()
	for _, name := range []string{"c", "a", "b-2", "b.1"} {
		mustSubmit(t, q, t0, testSpec(name, 10, 1))
	}
	var got []string
	for _, st := range q.Jobs() {
		got = append(got, st.Name)
	}
	if want := []string{"a", "b-2", "b.1", "c"}; !slicesEqual(got, want) {
		t.Errorf("Jobs() = %v, want %v", got, want)
	}
	if _, ok := q.Job("nope"); ok {
		t.Error("Job of an unknown name found")
	}
	if q.Tasks("nope") != nil || q.EventSeq("nope") != 0 {
		t.Error("Tasks/EventSeq of an unknown job")
	}
	// Job returns a deep copy.
	st, _ := q.Job("a")
	st.Spec.Name = "changed"
	if st2, _ := q.Job("a"); st2.Spec.Name != "a" {
		t.Error("Job shares the spec")
	}
}

// TestPendingIncludesEval: Pending lists the running eval task (with its
// trainer and deadline) beside the training tasks, so the master's sweep
// sees an eval whose trainer died.
func TestPendingIncludesEval(t *testing.T) {
	q := New()
	spec := testSpec("pe", 2, 1)
	spec.EvalEachPass = true
	spec.Passes = 2
	mustSubmit(t, q, 1, spec)
	a := mustTask(t, q, 10, "pe", "a")
	b := mustTask(t, q, 10, "pe", "b")
	if got := q.Pending("pe"); len(got) != 2 {
		t.Fatalf("pending %v, want the 2 training tasks", got)
	}
	mustFinish(t, q, 20, "pe", a.Id, a.Epoch, &pb.TaskMetrics{Examples: 1})
	mustFinish(t, q, 20, "pe", b.Id, b.Epoch, &pb.TaskMetrics{Examples: 1})
	ev := mustTask(t, q, 30, "pe", "c")
	if ev.Kind != pb.TaskKind_TASK_KIND_EVAL {
		t.Fatalf("after the pass got %v, want the eval task", ev)
	}
	got := q.Pending("pe")
	if len(got) != 1 || got[0].Kind != pb.TaskKind_TASK_KIND_EVAL || got[0].Trainer != "c" || got[0].DeadlineUnixNano <= 30 {
		t.Fatalf("pending %v, want the eval task held by c with a deadline", got)
	}
	// Past its deadline, ExpireTasks takes it back.
	if n := mustExpire(t, q, got[0].DeadlineUnixNano+1, "pe"); n != 1 {
		t.Fatalf("expired %d, want the eval task", n)
	}
	if got := q.Pending("pe"); len(got) != 0 {
		t.Fatalf("pending after expiry %v, want none", got)
	}
}
