package jobq

import (
	"fmt"
	"slices"

	"google.golang.org/protobuf/proto"

	"github.com/raftps/raftps/api/errs"
	pb "github.com/raftps/raftps/api/raftpspb"
	"github.com/raftps/raftps/jobspec"
)

// Retry, blacklist and timeout constants of the queue (the spec's bounds
// and defaults are package jobspec's).
const (
	// WaitRetryMs is the retry_after_ms of a WAIT for pending tasks and of a
	// PASS_OVER while the end-of-pass evaluation runs.
	WaitRetryMs = 200

	// BlacklistAfter (Horovod Elastic's blacklist): BlacklistAfter consecutive TaskFailed
	// reports from one trainer blacklist it for BlacklistBase, doubling with
	// each blacklisting up to BlacklistMax.
	BlacklistAfter = 3
	BlacklistBase  = int64(1e9)       // 1 s in ns
	BlacklistMax   = int64(3600e9)    // 1 h in ns
	timeoutFactor  = 3                // ElasticDL: deadline = max(floor, 3 x slowest)
	backupFactor   = 2                // speculative copy when running > 2 x median
	backupMinRuns  = 3                // finished durations needed for a median
	durationWindow = 64               // finished durations kept for the median
	msNs           = int64(1_000_000) // ns per ms
)

// Task states as stored in task.slot: a value >= 0 is the index of the
// task's entry in job.pending.
const (
	slotTodo   int32 = -1
	slotDone   int32 = -2
	slotFailed int32 = -3
)

// task is the compact per-task record (16 bytes). begin/end are computed
// from the id; the pending-only fields (trainer, deadline, copies) live in
// job.pending.
type task struct {
	epoch    int64 // epoch of the newest hand-out (the primary copy while pending)
	slot     int32 // slotTodo, slotDone, slotFailed, or index into job.pending
	timeouts uint16
	failures uint16
}

// run is one handed-out copy of a task.
type run struct {
	epoch    int64 // 0 = no copy
	started  int64
	deadline int64
	trainer  string
}

// pendingTask is a pending task: its primary copy and an optional
// speculative backup copy (backup.epoch == 0 if none).
type pendingTask struct {
	id      int32
	primary run
	backup  run
}

// Eval task states.
const (
	evalNone    uint8 = 0
	evalTodo    uint8 = 1
	evalPending uint8 = 2
)

// evalTask is the end-of-pass evaluation (at most one per job).
type evalTask struct {
	state    uint8
	pass     int32
	run      run
	timeouts uint16
	failures uint16
}

// trainerStat is the per-job failure record of one trainer (blacklist).
type trainerStat struct {
	consecutive int32 // TaskFailed reports since the last accepted finish
	strikes     int32 // times blacklisted
	until       int64 // blacklisted while now < until (Unix ns)
}

// passAcc accumulates the train metrics of the current pass.
type passAcc struct {
	lossSum  float64 // sum of loss * weight
	weight   float64 // sum of weights (examples, or 1 when examples == 0)
	examples int64
	finished int64
	maxStep  int64
}

// job is the state of one job.
type job struct {
	name      string
	spec      *pb.JobSpec
	state     pb.JobState
	message   string
	pass      int32
	submitted int64 // the proposer's wall clock (shown, never compared: entryStamp)
	finished  int64 // cluster time (retention compares it with now)
	// finishedWall is the proposer's wall clock when the job ended (shown
	// as JobStatus.finished_unix_nano).
	finishedWall int64
	// stamp is the Queue's: the entry being applied.
	stamp *entryStamp

	nTasks  int32
	tasks   []task
	todo    deque
	pending []pendingTask
	nDone   int32
	nFailed int32

	epoch       int64 // last epoch handed out (strictly increasing)
	final       bool  // max_steps reached: the job ends after this pass's eval
	slowest     int64 // slowest finished train duration (ns)
	slowestEval int64 // slowest finished eval duration (ns)
	durations   ring  // newest finished train durations (ns) for the median
	acc         passAcc
	metrics     []*pb.PassMetric
	eval        evalTask
	trainers    map[string]*trainerStat
	ckptVersion int64 // newest version from a CHECKPOINT_COMMITTED event

	requeued int64
	timeouts int64

	events   eventRing
	eventSeq int64
}

// Queue holds the jobs and their task queues. It is pure deterministic state:
// no clocks, no I/O, no goroutines and no locks; the caller (the FSM)
// serializes access. Every mutating method takes now, the Raft entry's
// cluster time in nanoseconds (the FSM's replicated clock: it never goes
// backwards; the methods work for any int64 all the same): deadlines,
// durations, blacklists and retention are measured in it. What users read
// (JobEvent.unix_nano, JobStatus.submitted_unix_nano and
// finished_unix_nano) is stamped instead with the wall clock of the
// entry's proposer (SetEntryWall), which the cluster time lags by every
// leaderless period; without one (0: an entry of an older proposer, or a
// caller that never sets it) they take now.
type Queue struct {
	jobs     map[string]*job
	eventCap int // jobspec.MaxEvents; smaller in tests
	stamp    *entryStamp
}

// entryStamp is the wall clock of the entry being applied, shared by a
// Queue and its jobs.
type entryStamp struct{ wall int64 }

// shown is the time to show for an entry applied at cluster time now: the
// proposer's wall clock, or now if the entry carries none.
func (s *entryStamp) shown(now int64) int64 {
	if s == nil || s.wall <= 0 {
		return now
	}
	return s.wall
}

// New returns an empty Queue.
func New() *Queue {
	return &Queue{jobs: map[string]*job{}, eventCap: jobspec.MaxEvents, stamp: &entryStamp{}}
}

// SetEntryWall sets the wall clock (Unix ns) of the proposer of the entry
// about to be applied (pb.Entry.now_unix_nano; 0 if it carries none): the
// time stamped on the events, submissions and endings that entry makes.
// The FSM calls it before each entry, so every replica stamps alike.
func (q *Queue) SetEntryWall(wallUnixNano int64) { q.entryStamp().wall = wallUnixNano }

func (q *Queue) entryStamp() *entryStamp {
	if q.stamp == nil {
		q.stamp = &entryStamp{}
	}
	return q.stamp
}

// adopt makes q's state the jobs of a decoded snapshot, sharing q's stamp.
func (q *Queue) adopt(jobs map[string]*job, eventCap int) {
	st := q.entryStamp()
	for _, j := range jobs {
		j.stamp = st
	}
	q.jobs, q.eventCap = jobs, eventCap
}

// ---------------------------------------------------------------- Submit

// Submit validates req.Spec, fills its defaults and creates the job in
// JOB_RUNNING with pass 0 and all tasks in todo (task i covers records
// [i*records_per_task, min((i+1)*records_per_task, records))). Errors wrap
// errs.ErrInvalid (naming the field, see jobspec.ValidateSpec) or errs.ErrExists;
// with MaxJobs jobs kept it first deletes the oldest finished ones, and
// refuses with errs.ErrFailedPrecondition if all are running. On error
// nothing changes. Emits JOB_SUBMITTED.
func (q *Queue) Submit(now int64, req *pb.SubmitJobRequest) (*pb.SubmitJobResponse, error) {
	spec, err := jobspec.ValidateSpec(req.GetSpec())
	if err != nil {
		return nil, err
	}
	if _, ok := q.jobs[spec.Name]; ok {
		return nil, fmt.Errorf("%w: job %q", errs.ErrExists, spec.Name)
	}
	if err := q.makeRoom(); err != nil {
		return nil, err
	}
	n := int32(jobspec.NumTasks(spec.Dataset.Records, spec.RecordsPerTask)) // <= jobspec.MaxTasks
	j := &job{
		name:      spec.Name,
		spec:      spec,
		state:     pb.JobState_JOB_RUNNING,
		submitted: q.entryStamp().shown(now),
		stamp:     q.entryStamp(),
		nTasks:    n,
		tasks:     make([]task, n),
		trainers:  map[string]*trainerStat{},
		events:    eventRing{cap: q.eventCap},
	}
	j.todo.init(int(n))
	for i := int32(0); i < n; i++ {
		j.tasks[i].slot = slotTodo
		j.todo.push(i)
	}
	q.jobs[j.name] = j
	j.emit(now, event{typ: pb.JobEvent_JOB_SUBMITTED, message: fmt.Sprintf("%d tasks, %d passes", n, spec.Passes)})
	return &pb.SubmitJobResponse{Status: j.status()}, nil
}

func invalid(field, format string, args ...any) error {
	return fmt.Errorf("%w: %s %s", errs.ErrInvalid, field, fmt.Sprintf(format, args...))
}

// ---------------------------------------------------------------- Cancel

// Cancel ends a running job as JOB_CANCELLED and emits JOB_ENDED. Cancelling
// a cancelled job returns its status again (idempotent); cancelling a job
// that succeeded or failed returns an error wrapping
// errs.ErrFailedPrecondition; an unknown job errs.ErrNotFound. Pending tasks
// stay where they are; their finishes are no longer accepted.
func (q *Queue) Cancel(now int64, req *pb.CancelJobRequest) (*pb.CancelJobResponse, error) {
	j, err := q.job(req.GetName())
	if err != nil {
		return nil, err
	}
	switch j.state {
	case pb.JobState_JOB_CANCELLED:
		return &pb.CancelJobResponse{Status: j.status()}, nil
	case pb.JobState_JOB_RUNNING:
		j.end(now, pb.JobState_JOB_CANCELLED, "cancelled")
		return &pb.CancelJobResponse{Status: j.status()}, nil
	default:
		return nil, fmt.Errorf("%w: job %q already ended as %v", errs.ErrFailedPrecondition, j.name, j.state)
	}
}

func (q *Queue) job(name string) (*job, error) {
	j, ok := q.jobs[name]
	if !ok {
		return nil, fmt.Errorf("%w: job %q", errs.ErrNotFound, name)
	}
	return j, nil
}

// ---------------------------------------------------------------- reads

// Job returns a deep copy of the job's status: state, pass, queue counts
// (train tasks; the eval task is not counted), metrics, spec, events_seq,
// requeued and timeouts. Trainers, pservers, checkpoints and restores are
// not known here; the master fills them from the key/value store.
func (q *Queue) Job(name string) (*pb.JobStatus, bool) {
	j, ok := q.jobs[name]
	if !ok {
		return nil, false
	}
	return j.status(), true
}

// Jobs returns the status of every job, sorted by name.
func (q *Queue) Jobs() []*pb.JobStatus {
	out := make([]*pb.JobStatus, 0, len(q.jobs))
	for _, name := range q.names() {
		out = append(out, q.jobs[name].status())
	}
	return out
}

func (q *Queue) names() []string {
	names := make([]string, 0, len(q.jobs))
	for name := range q.jobs {
		names = append(names, name)
	}
	slices.Sort(names)
	return names
}

func (j *job) status() *pb.JobStatus {
	st := &pb.JobStatus{
		Name:              j.name,
		State:             j.state,
		Pass:              j.pass,
		Todo:              int64(j.todo.len()),
		Pending:           int64(len(j.pending)),
		Done:              int64(j.nDone),
		Failed:            int64(j.nFailed),
		TotalTasks:        int64(j.nTasks),
		Message:           j.message,
		SubmittedUnixNano: j.submitted,
		FinishedUnixNano:  j.finishedWall,
		Spec:              proto.Clone(j.spec).(*pb.JobSpec),
		Requeued:          j.requeued,
		Timeouts:          j.timeouts,
		EventsSeq:         j.eventSeq,
	}
	for _, m := range j.metrics {
		st.Metrics = append(st.Metrics, proto.Clone(m).(*pb.PassMetric))
	}
	return st
}

// Tasks returns copies of the job's tasks ordered by id: the end-of-pass
// eval task first (negative id) while it is todo or pending, then every
// train task. Nil for an unknown job. O(tasks): for inspection, not for the
// hot path.
func (q *Queue) Tasks(name string) []*pb.Task {
	j, ok := q.jobs[name]
	if !ok {
		return nil
	}
	out := make([]*pb.Task, 0, int(j.nTasks)+1)
	if j.eval.state != evalNone {
		e := j.eval
		t := &pb.Task{
			Id: evalID(e.pass), Kind: pb.TaskKind_TASK_KIND_EVAL, Pass: e.pass,
			Timeouts: int32(e.timeouts), Failures: int32(e.failures), State: pb.TaskState_TASK_TODO,
		}
		if e.state == evalPending {
			t.State = pb.TaskState_TASK_PENDING
			t.Epoch, t.Trainer, t.StartedUnixNano, t.DeadlineUnixNano = e.run.epoch, e.run.trainer, e.run.started, e.run.deadline
		}
		out = append(out, t)
	}
	for id := range j.nTasks {
		out = append(out, j.taskProto(id))
	}
	return out
}

// Pending returns copies of the job's pending tasks: the end-of-pass eval
// task first if one is running, then the training tasks by id. O(pending),
// not O(tasks), so it is cheap on a job of a million tasks.
func (q *Queue) Pending(name string) []*pb.Task {
	j, ok := q.jobs[name]
	if !ok {
		return nil
	}
	ids := j.pendingIDs()
	out := make([]*pb.Task, 0, len(ids)+1)
	if e := j.eval; e.state == evalPending {
		out = append(out, &pb.Task{Id: evalID(e.pass), Kind: pb.TaskKind_TASK_KIND_EVAL, Pass: e.pass,
			Timeouts: int32(e.timeouts), Failures: int32(e.failures), State: pb.TaskState_TASK_PENDING,
			Epoch: e.run.epoch, Trainer: e.run.trainer, StartedUnixNano: e.run.started, DeadlineUnixNano: e.run.deadline})
	}
	for _, id := range ids {
		out = append(out, j.taskProto(id))
	}
	return out
}

// evalID is the task id of the eval task of pass p.
func evalID(pass int32) int64 { return -1 - int64(pass) }

func (j *job) taskProto(id int32) *pb.Task {
	t := &j.tasks[id]
	rpt := j.spec.RecordsPerTask
	begin := int64(id) * rpt
	out := &pb.Task{
		Id:       int64(id),
		Begin:    begin,
		End:      min(begin+rpt, j.spec.Dataset.Records),
		Epoch:    t.epoch,
		Timeouts: int32(t.timeouts),
		Failures: int32(t.failures),
		Pass:     j.pass,
		Kind:     pb.TaskKind_TASK_KIND_TRAIN,
	}
	switch t.slot {
	case slotTodo:
		out.State = pb.TaskState_TASK_TODO
	case slotDone:
		out.State = pb.TaskState_TASK_DONE
	case slotFailed:
		out.State = pb.TaskState_TASK_FAILED
	default:
		p := &j.pending[t.slot]
		out.State = pb.TaskState_TASK_PENDING
		out.Trainer, out.StartedUnixNano, out.DeadlineUnixNano = p.primary.trainer, p.primary.started, p.primary.deadline
		out.BackupEpoch, out.BackupTrainer = p.backup.epoch, p.backup.trainer
	}
	return out
}
