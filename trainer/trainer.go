package trainer

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	pb "github.com/raftps/raftps/api/raftpspb"
	"github.com/raftps/raftps/trainer/dataset"
	"github.com/raftps/raftps/trainer/model"
)

// Master is what the trainer needs from the job master (the Master gRPC
// service on the Raft leader). Errors with gRPC code Unavailable (and the
// other codes IsRetryable accepts) are retried with backoff.
type Master interface {
	GetTask(ctx context.Context, req *pb.GetTaskRequest) (*pb.GetTaskResponse, error)
	TaskFinished(ctx context.Context, req *pb.TaskFinishedRequest) (*pb.TaskFinishedResponse, error)
	TaskFailed(ctx context.Context, req *pb.TaskFailedRequest) (*pb.TaskFailedResponse, error)
	// GetJob returns the job's status; the trainer reads status.spec.
	GetJob(ctx context.Context, name string) (*pb.JobStatus, error)
}

// RowGrad is the gradient of some rows of an embedding table: row IDs[i]
// is Values[i*dim:(i+1)*dim].
type RowGrad = model.Rows

// PS is what the trainer needs from the job's parameter servers, seen as one
// store: the implementation fans requests out to the slots and hides which
// pserver holds which shard (and re-resolves slots after a move).
type PS interface {
	// Pull returns every dense parameter (full tensors, by ParamSpec name)
	// and the model version they were read at.
	Pull(ctx context.Context) (params map[string][]float32, version int64, err error)
	// PullRows returns rows (len(rows) x dim values) of embedding table name.
	PullRows(ctx context.Context, name string, rows []int64) ([]float32, error)
	// Push sends the gradients of one mini-batch of examples computed at
	// version. step is the sync step they belong to, which is the pulled
	// version. In sync mode Push blocks until the step completes. It returns
	// the version after the update. Push must not keep grads or rowGrads
	// after it returns: the trainer reuses their memory for the next step.
	Push(ctx context.Context, grads map[string][]float32, rowGrads map[string]RowGrad, version, step, examples int64) (newVersion int64, err error)
	// LeaveStep tells sync-mode pservers that this trainer will not push
	// until further notice, so that steps complete without it.
	LeaveStep(ctx context.Context) error
}

// PushPuller is an optional PS extension: PushPull pushes as Push does and
// returns what a Pull right after the push would (the parameters and their
// version), in one round trip instead of two (psclient.Client.PushPull asks
// for them in the push's reply). The trainer uses it for every step but a
// task's last, and trains the next step on what it returned. params must
// stay valid until the next call on the PS.
type PushPuller interface {
	PushPull(ctx context.Context, grads map[string][]float32, rowGrads map[string]RowGrad, version, step, examples int64) (params map[string][]float32, newVersion int64, err error)
}

// CheckpointPuller is an optional PS extension: PullCheckpoint pulls as
// Pull does and asks the pservers to checkpoint the parameters it reads
// (psclient.Client.PullCheckpoint), so the version an eval measures is a
// checkpoint version and the pass's metric names it. The trainer uses it
// for eval tasks.
type CheckpointPuller interface {
	PullCheckpoint(ctx context.Context) (params map[string][]float32, version int64, err error)
}

// ErrRetryable marks an error as transient for IsRetryable (for PS or
// Master implementations that do not speak gRPC status codes).
var ErrRetryable = errors.New("trainer: transient error")

// IsRetryable reports whether err is transient: a gRPC status Unavailable,
// DeadlineExceeded (a per-call timeout), Aborted or ResourceExhausted, or an
// error wrapping ErrRetryable or context.DeadlineExceeded. The caller checks
// its own context separately: a cancelled Run never retries.
func IsRetryable(err error) bool {
	if err == nil {
		return false
	}
	if errors.Is(err, ErrRetryable) || errors.Is(err, context.DeadlineExceeded) {
		return true
	}
	switch status.Code(err) {
	case codes.Unavailable, codes.DeadlineExceeded, codes.Aborted, codes.ResourceExhausted:
		return true
	}
	return false
}

// Config configures a Trainer. Zero durations take the defaults of
// DefaultConfig.
type Config struct {
	// ID names this trainer to the master (GetTaskRequest.trainer); required.
	ID string
	// Job is the job to work on; required.
	Job string
	// DataDir, if set, replaces the job's dataset.path (the dataset lives on
	// each node's local disk, possibly at a different path).
	DataDir string
	// Logger receives structured logs; nil discards them.
	Logger *slog.Logger
	// MinBackoff and MaxBackoff bound the exponential backoff (with jitter)
	// between retries of transient errors. Defaults 50ms and 2s.
	MinBackoff, MaxBackoff time.Duration
	// MaxWait caps a sleep asked for by retry_after_ms (WAIT, PASS_OVER);
	// DefaultWait is used when the master asks for none. Defaults 5s, 200ms.
	MaxWait, DefaultWait time.Duration
	// TaskRetryBudget is how long one task keeps retrying transient errors
	// when the task carries no deadline; past the deadline (or budget) the
	// trainer drops the task, which the master requeues. Default 1m.
	TaskRetryBudget time.Duration
	// Retryable classifies errors as transient; default IsRetryable.
	Retryable func(error) bool
	// WarnEvery is how often a call that keeps failing, or one call that
	// has not returned (a sync push whose step waits for another trainer),
	// is logged at warn level. Default 5s.
	WarnEvery time.Duration
}

// DefaultConfig returns a Config with every default filled in.
func DefaultConfig() Config {
	return Config{
		MinBackoff: 50 * time.Millisecond, MaxBackoff: 2 * time.Second,
		MaxWait: 5 * time.Second, DefaultWait: 200 * time.Millisecond,
		TaskRetryBudget: time.Minute, Retryable: IsRetryable, WarnEvery: 5 * time.Second,
	}
}

// Validate reports a missing ID or Job.
func (c Config) Validate() error {
	if c.ID == "" || c.Job == "" {
		return fmt.Errorf("%w: trainer config needs ID and Job (got %q, %q)", ErrBadJob, c.ID, c.Job)
	}
	return nil
}

func (c Config) withDefaults() Config {
	d := DefaultConfig()
	if c.MinBackoff <= 0 {
		c.MinBackoff = d.MinBackoff
	}
	if c.MaxBackoff <= 0 {
		c.MaxBackoff = d.MaxBackoff
	}
	if c.WarnEvery <= 0 {
		c.WarnEvery = d.WarnEvery
	}
	if c.MaxWait <= 0 {
		c.MaxWait = d.MaxWait
	}
	if c.DefaultWait <= 0 {
		c.DefaultWait = d.DefaultWait
	}
	if c.TaskRetryBudget <= 0 {
		c.TaskRetryBudget = d.TaskRetryBudget
	}
	if c.Retryable == nil {
		c.Retryable = d.Retryable
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	return c
}

// Stats are a trainer's counters since New.
type Stats struct {
	// Tasks and EvalTasks count tasks reported finished (accepted or not).
	Tasks, EvalTasks int64
	// FailedTasks counts TaskFailed reports, DroppedTasks tasks abandoned
	// after their deadline or retry budget.
	FailedTasks, DroppedTasks int64
	// Examples and Steps count trained records and pushed mini-batches.
	Examples, Steps int64
	// Retries counts retried transient errors; StalePushes the pushes
	// refused as stale (gRPC FailedPrecondition) and redone from a new pull.
	Retries, StalePushes int64
	// TrainTime is the time spent in training tasks (pull, compute, push).
	TrainTime time.Duration
	// PSTime is the part of TrainTime spent in pserver calls (pulls, row
	// pulls, pushes; in sync mode a push also waits for the step's other
	// trainers): TrainTime - PSTime is the trainer's own work.
	PSTime time.Duration
}

// ExamplesPerSec is Examples / TrainTime.
func (s Stats) ExamplesPerSec() float64 {
	if s.TrainTime <= 0 {
		return 0
	}
	return float64(s.Examples) / s.TrainTime.Seconds()
}

// Trainer runs the task loop of one job. Create it with New, call Run once.
type Trainer struct {
	cfg    Config
	master Master
	ps     PS
	log    *slog.Logger

	// Set up by Run from the job spec.
	spec     *pb.JobSpec
	model    model.Model
	train    *dataset.Dataset
	test     *dataset.Dataset
	dataDir  string
	records  int
	evalRows map[string][]int64 // SparseRows of the test split, computed once
	perm     []int
	permPass int32
	joined   bool // may be expected in a sync step: set up, or pushed since the last LeaveStep
	x        []float32
	y        []uint8
	grads    model.Params // the gradient buffers, reused step after step
	// next holds the parameters (at nextVersion) a PushPull returned with
	// the last step's push, for the next step: of the same task, or in
	// sync mode of the next training task too (the step cannot move on
	// without this trainer until it leaves, and leaveStep drops next);
	// nil: pull.
	next        map[string][]float32
	nextVersion int64

	running atomic.Bool
	mu      sync.Mutex
	stats   Stats
}

// ErrRunTwice: Run was called a second time on the same Trainer.
var ErrRunTwice = errors.New("trainer: Run called twice; create a new Trainer")

// New returns a Trainer for cfg.Job talking to master and ps.
func New(cfg Config, master Master, ps PS) (*Trainer, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if master == nil || ps == nil {
		return nil, fmt.Errorf("%w: nil Master or PS", ErrBadJob)
	}
	cfg = cfg.withDefaults()
	return &Trainer{cfg: cfg, master: master, ps: ps, permPass: -1,
		log: cfg.Logger.With("component", "trainer", "trainer", cfg.ID, "job", cfg.Job)}, nil
}

// Stats returns a copy of the counters; safe to call while Run runs.
func (t *Trainer) Stats() Stats {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.stats
}

func (t *Trainer) count(f func(*Stats)) {
	t.mu.Lock()
	f(&t.stats)
	t.mu.Unlock()
}

// Run fetches the job spec, loads the data and builds the model, then loops:
//
//   - TASK (train): for each mini-batch of the task's records in the pass's
//     shuffled order, pull parameters (only the needed embedding rows), compute
//     the gradient of the mean loss, push it; then TaskFinished with the mean
//     loss, examples, duration and last version. A transient error
//     (IsRetryable) retries the mini-batch from the pull, with backoff, until
//     the task's deadline; then the task is dropped (the master requeues it).
//     A push refused as stale (gRPC FailedPrecondition, the pservers'
//     "re-pull": the sync step moved on, or the async staleness bound) is
//     redone at once from a fresh pull. Any other error is reported with
//     TaskFailed.
//   - TASK (eval): pull parameters (asking the pservers to checkpoint them,
//     if the PS is a CheckpointPuller), evaluate on the test split,
//     TaskFinished with accuracy, loss and the version evaluated.
//   - WAIT: leave the sync step, at every WAIT (also before the first push:
//     a registered trainer is expected in sync steps, and a slot restored
//     or rolled back expects it again), sleep retry_after_ms (at most
//     MaxWait).
//   - PASS_OVER: leave the sync step, sleep retry_after_ms, ask again.
//   - JOB_OVER: leave the sync step and return nil.
//
// Master calls are retried on transient errors as long as ctx lives, so the
// trainer rides through master failover. Run returns ctx.Err() when ctx is
// cancelled (after a best-effort LeaveStep), and an error if the job spec,
// model or data cannot be set up.
func (t *Trainer) Run(ctx context.Context) error {
	if !t.running.CompareAndSwap(false, true) {
		return ErrRunTwice
	}
	defer func() {
		if t.joined {
			lctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
			defer cancel()
			t.leaveStep(lctx)
		}
	}()
	if err := t.setup(ctx); err != nil {
		return err
	}
	t.log.Info("trainer started", "model", t.model.Name(), "records", t.records, "batch_size", t.spec.GetBatchSize())
	// Registered means expected: the pservers count a trainer in a sync
	// step from the moment it is in /jobs/<job>/trainers/, pushed or not.
	// A trainer whose first answer is WAIT (it registered near the end of
	// a pass) must leave, or the step waits for a push that never comes.
	t.joined = true
	for {
		if err := ctx.Err(); err != nil {
			return err
		}
		var resp *pb.GetTaskResponse
		err := t.retry(ctx, time.Time{}, "get task", func(ctx context.Context) (err error) {
			resp, err = t.master.GetTask(ctx, &pb.GetTaskRequest{Job: t.cfg.Job, Trainer: t.cfg.ID})
			return err
		})
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			return fmt.Errorf("trainer: get task: %w", err)
		}
		switch resp.GetResult() {
		case pb.GetTaskResponse_TASK:
			task := resp.GetTask()
			if task == nil {
				t.log.Warn("master answered TASK without a task; asking again")
				if err := t.sleep(ctx, 0); err != nil {
					return err
				}
				continue
			}
			if task.GetKind() == pb.TaskKind_TASK_KIND_EVAL {
				if t.joined {
					t.leaveStep(ctx)
				}
				err = t.runEval(ctx, task)
			} else {
				err = t.runTrain(ctx, task)
			}
			if ctx.Err() != nil {
				return ctx.Err()
			}
			if err != nil {
				return err
			}
		case pb.GetTaskResponse_WAIT:
			// Every WAIT tells the pservers again, as PASS_OVER does: a
			// slot restored on another node or rolled back is a new Slot
			// that expects every registered trainer until it pushes or
			// leaves, and its step would otherwise wait for this one
			// until a pending task timed out.
			t.leaveStep(ctx)
			if err := t.sleep(ctx, resp.GetRetryAfterMs()); err != nil {
				return err
			}
		case pb.GetTaskResponse_PASS_OVER:
			t.leaveStep(ctx) // always tell the pservers at a pass boundary
			t.log.Info("pass over", "pass", resp.GetPass())
			if err := t.sleep(ctx, resp.GetRetryAfterMs()); err != nil {
				return err
			}
		case pb.GetTaskResponse_JOB_OVER:
			t.leaveStep(ctx)
			st := t.Stats()
			t.log.Info("job over", "tasks", st.Tasks, "examples", st.Examples, "examples_per_sec", st.ExamplesPerSec())
			return nil
		default:
			return fmt.Errorf("trainer: unknown GetTask result %v", resp.GetResult())
		}
	}
}

// setup reads the job spec (retrying through master failover), builds the
// model and loads the training split.
func (t *Trainer) setup(ctx context.Context) error {
	var st *pb.JobStatus
	err := t.retry(ctx, time.Time{}, "get job", func(ctx context.Context) (err error) {
		st, err = t.master.GetJob(ctx, t.cfg.Job)
		return err
	})
	if err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		return fmt.Errorf("trainer: get job %q: %w", t.cfg.Job, err)
	}
	spec := st.GetSpec()
	if spec == nil {
		return fmt.Errorf("%w: job %q has no spec", ErrBadJob, t.cfg.Job)
	}
	if spec.GetBatchSize() <= 0 {
		return fmt.Errorf("%w: job %q: batch_size %d", ErrBadJob, t.cfg.Job, spec.GetBatchSize())
	}
	if f := spec.GetDataset().GetFormat(); f != "" && f != "fashion-mnist" {
		return fmt.Errorf("%w: job %q: dataset format %q (want fashion-mnist)", ErrBadJob, t.cfg.Job, f)
	}
	t.spec = spec
	t.dataDir = t.cfg.DataDir
	if t.dataDir == "" {
		t.dataDir = spec.GetDataset().GetPath()
	}
	if t.dataDir == "" {
		return fmt.Errorf("%w: job %q has no dataset.path and no DataDir is configured", ErrBadJob, t.cfg.Job)
	}
	t.dataDir = filepath.Clean(t.dataDir)
	if t.train, err = dataset.LoadFashionMNIST(t.dataDir, "train"); err != nil {
		return fmt.Errorf("trainer: %w", err)
	}
	if t.records, err = recordCount(spec, t.train); err != nil {
		return err
	}
	if t.model, err = model.Build(spec.GetModel(), t.train.Dim, t.train.Classes); err != nil {
		return fmt.Errorf("trainer: job %q: %w", t.cfg.Job, err)
	}
	return nil
}

var (
	// errDropped: the task ran out of deadline or retry budget.
	errDropped = errors.New("trainer: task dropped")
	// errStale: a push was refused as stale; re-pull and redo at once.
	errStale = fmt.Errorf("stale push: %w", ErrRetryable)
)

func (t *Trainer) runTrain(ctx context.Context, task *pb.Task) error {
	start := time.Now()
	log := t.log.With("task", task.GetId(), "epoch", task.GetEpoch(), "pass", task.GetPass())
	deadline := t.taskDeadline(task, start)
	if t.perm == nil || t.permPass != task.GetPass() {
		t.perm, t.permPass = dataset.Permutation(t.records, t.spec.GetSeed(), task.GetPass()), task.GetPass()
	}
	ps0 := t.Stats().PSTime
	recs, err := dataset.TaskRecords(t.perm, task.GetBegin(), task.GetEnd())
	if err != nil {
		return t.fail(ctx, task, deadline, err)
	}
	var lossSum float64
	var version int64
	batches := dataset.Batches(recs, int(t.spec.GetBatchSize()))
	for i, batch := range batches {
		if err := ctx.Err(); err != nil {
			return err // the task stays pending; the master requeues it
		}
		t.x, t.y = t.train.Gather(batch, t.x, t.y)
		var loss float64
		// Sync mode keeps the parameters of the task's last push for the
		// next task's first step: one round trip per task fewer.
		more := i < len(batches)-1 || t.spec.GetMode() == pb.UpdateMode_UPDATE_MODE_SYNC
		err := t.retry(ctx, deadline, "train step", func(ctx context.Context) (err error) {
			loss, version, err = t.step(ctx, more)
			return err
		})
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			if errors.Is(err, errDropped) {
				log.Warn("dropping task; the master will requeue it", "err", err)
				t.count(func(s *Stats) { s.DroppedTasks++; s.TrainTime += time.Since(start) })
				return nil
			}
			t.count(func(s *Stats) { s.TrainTime += time.Since(start) })
			return t.fail(ctx, task, deadline, err)
		}
		lossSum += loss * float64(len(batch))
		t.count(func(s *Stats) { s.Examples += int64(len(batch)); s.Steps++ })
	}
	dur := time.Since(start)
	t.count(func(s *Stats) { s.TrainTime += dur })
	n := int64(len(recs))
	m := &pb.TaskMetrics{Examples: n, DurationMs: dur.Milliseconds(), Step: version}
	if n > 0 {
		m.Loss = lossSum / float64(n)
	}
	log.Info("task trained", "loss", m.Loss, "examples", n, "duration", dur, "examples_per_sec", float64(n)/dur.Seconds(), "version", version,
		"ps_time", (t.Stats().PSTime - ps0).Round(time.Microsecond))
	return t.finish(ctx, task, deadline, m)
}

// step pulls (or takes t.next), computes and pushes one mini-batch held in
// t.x, t.y; with more (another step follows: in this task, or in sync mode
// the next task's) and a PushPuller PS, the push brings back the next
// step's parameters into t.next.
func (t *Trainer) step(ctx context.Context, more bool) (loss float64, version int64, err error) {
	dense, version := t.next, t.nextVersion
	t.next = nil         // used once; a failed step pulls again
	var ps time.Duration // in pserver calls
	defer func() { t.count(func(s *Stats) { s.PSTime += ps }) }()
	call := time.Now()
	if dense == nil {
		if dense, version, err = t.ps.Pull(ctx); err != nil {
			return 0, 0, fmt.Errorf("pull: %w", err)
		}
	}
	p := model.Params{Dense: dense}
	if p.Sparse, err = t.pullRows(ctx, t.model.SparseRows(t.x)); err != nil {
		return 0, 0, err
	}
	ps = time.Since(call)
	// Loss reuses the dense gradient buffers (PS.Push does not keep them);
	// the rows are this batch's alone.
	g := &t.grads
	g.Sparse = nil
	loss, _, err = t.model.Loss(p, t.x, t.y, g)
	if err != nil {
		return 0, 0, err
	}
	t.joined = true
	call = time.Now()
	if pp, ok := t.ps.(PushPuller); ok && more {
		t.next, t.nextVersion, err = pp.PushPull(ctx, g.Dense, g.Sparse, version, version, int64(len(t.y)))
	} else {
		_, err = t.ps.Push(ctx, g.Dense, g.Sparse, version, version, int64(len(t.y)))
	}
	ps += time.Since(call)
	if err != nil {
		t.next = nil
		if status.Code(err) == codes.FailedPrecondition {
			// The pservers' "stale push; re-pull": the step or version moved
			// on (sync step ended, async staleness bound). Redo the batch.
			t.count(func(s *Stats) { s.StalePushes++ })
			return 0, 0, fmt.Errorf("push: %w: %w", errStale, err)
		}
		return 0, 0, fmt.Errorf("push: %w", err)
	}
	return loss, version, nil
}

func (t *Trainer) pullRows(ctx context.Context, need map[string][]int64) (map[string]model.Rows, error) {
	if len(need) == 0 {
		return nil, nil
	}
	out := make(map[string]model.Rows, len(need))
	for name, ids := range need {
		v, err := t.ps.PullRows(ctx, name, ids)
		if err != nil {
			return nil, fmt.Errorf("pull rows of %q: %w", name, err)
		}
		out[name] = model.Rows{IDs: ids, Values: v}
	}
	return out, nil
}

func (t *Trainer) runEval(ctx context.Context, task *pb.Task) error {
	start := time.Now()
	deadline := t.taskDeadline(task, start)
	if t.test == nil {
		test, err := dataset.LoadFashionMNIST(t.dataDir, "test")
		if err != nil {
			return t.fail(ctx, task, deadline, err)
		}
		t.test = test
		t.evalRows = t.model.SparseRows(test.Images)
	}
	var m *pb.TaskMetrics
	err := t.retry(ctx, deadline, "eval", func(ctx context.Context) error {
		pull := t.ps.Pull
		if cp, ok := t.ps.(CheckpointPuller); ok {
			pull = cp.PullCheckpoint
		}
		dense, version, err := pull(ctx)
		if err != nil {
			return fmt.Errorf("pull: %w", err)
		}
		p := model.Params{Dense: dense}
		if p.Sparse, err = t.pullRows(ctx, t.evalRows); err != nil {
			return err
		}
		loss, acc, err := model.Evaluate(t.model, p, t.test)
		if err != nil {
			return err
		}
		m = &pb.TaskMetrics{Loss: loss, Accuracy: acc, Examples: int64(t.test.N), Step: version}
		return nil
	})
	if err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if errors.Is(err, errDropped) {
			t.log.Warn("dropping eval task", "task", task.GetId(), "err", err)
			t.count(func(s *Stats) { s.DroppedTasks++ })
			return nil
		}
		return t.fail(ctx, task, deadline, err)
	}
	m.DurationMs = time.Since(start).Milliseconds()
	t.log.Info("evaluated", "task", task.GetId(), "pass", task.GetPass(), "accuracy", m.Accuracy, "loss", m.Loss, "version", m.Step)
	return t.finish(ctx, task, deadline, m)
}

// finish reports a finished task. A stale finish (accepted=false) is
// normal after a requeue or a backup copy and is only logged.
func (t *Trainer) finish(ctx context.Context, task *pb.Task, deadline time.Time, m *pb.TaskMetrics) error {
	var resp *pb.TaskFinishedResponse
	err := t.retry(ctx, deadline, "task finished", func(ctx context.Context) (err error) {
		resp, err = t.master.TaskFinished(ctx, &pb.TaskFinishedRequest{
			Job: t.cfg.Job, TaskId: task.GetId(), Epoch: task.GetEpoch(), Trainer: t.cfg.ID, Metrics: m})
		return err
	})
	if err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		t.log.Warn("could not report task; the master will requeue it", "task", task.GetId(), "err", err)
		t.count(func(s *Stats) { s.DroppedTasks++ })
		return nil
	}
	if !resp.GetAccepted() {
		t.log.Info("stale task finish ignored by the master", "task", task.GetId(), "epoch", task.GetEpoch())
	}
	t.count(func(s *Stats) {
		if task.GetKind() == pb.TaskKind_TASK_KIND_EVAL {
			s.EvalTasks++
		} else {
			s.Tasks++
		}
	})
	return nil
}

// fail reports a non-transient task error with TaskFailed and carries on.
func (t *Trainer) fail(ctx context.Context, task *pb.Task, deadline time.Time, cause error) error {
	t.log.Error("task failed", "task", task.GetId(), "epoch", task.GetEpoch(), "err", cause)
	t.count(func(s *Stats) { s.FailedTasks++ })
	err := t.retry(ctx, deadline, "task failed", func(ctx context.Context) error {
		_, err := t.master.TaskFailed(ctx, &pb.TaskFailedRequest{
			Job: t.cfg.Job, TaskId: task.GetId(), Epoch: task.GetEpoch(), Trainer: t.cfg.ID, Reason: cause.Error()})
		return err
	})
	if err != nil && ctx.Err() != nil {
		return ctx.Err()
	}
	if err != nil {
		t.log.Warn("could not report task failure", "task", task.GetId(), "err", err)
	}
	return nil
}

// leaveStep tells the pservers this trainer leaves the sync steps until it
// pushes again (PS.LeaveStep, retried up to MaxWait); callers that only
// need it after a push check t.joined first.
func (t *Trainer) leaveStep(ctx context.Context) {
	t.next = nil // the steps go on without this trainer: pull on return
	err := t.retry(ctx, time.Now().Add(t.cfg.MaxWait), "leave step", t.ps.LeaveStep)
	if err != nil {
		t.log.Warn("leave step failed", "err", err)
		return
	}
	t.joined = false
}

func (t *Trainer) taskDeadline(task *pb.Task, start time.Time) time.Time {
	// Task times are the cluster's replicated clock, not this node's wall
	// clock (fsm/clock.go): only their difference, the timeout, applies here.
	if d, s := task.GetDeadlineUnixNano(), task.GetStartedUnixNano(); d > 0 && s > 0 && d > s {
		return start.Add(time.Duration(d - s))
	}
	if d := task.GetDeadlineUnixNano(); d > 0 {
		return time.Unix(0, d)
	}
	return start.Add(t.cfg.TaskRetryBudget)
}

// retry calls fn until it succeeds, returns a non-transient error, ctx ends,
// or deadline (if non-zero) passes, in which case it returns an error
// wrapping errDropped and the last error. Backoff doubles from MinBackoff to
// MaxBackoff with ±50% jitter.
//
// A call that keeps failing is logged at warn level every Config.WarnEvery
// (the single retries are debug), and so is one call that has not returned
// (watched), so a trainer that cannot make progress says why.
func (t *Trainer) retry(ctx context.Context, deadline time.Time, what string, fn func(context.Context) error) error {
	backoff := t.cfg.MinBackoff
	start := time.Now()
	warned := start
	for attempt := 1; ; attempt++ {
		err := t.watched(what, func() error { return fn(ctx) })
		if err == nil || ctx.Err() != nil || !t.cfg.Retryable(err) {
			return err
		}
		if time.Since(warned) >= t.cfg.WarnEvery {
			warned = time.Now()
			t.log.Warn("still retrying", "op", what, "attempts", attempt, "for", time.Since(start).Round(time.Millisecond), "err", err)
		}
		wait := backoff/2 + rand.N(backoff)
		if errors.Is(err, errStale) {
			wait = 0 // not a fault: the step moved on; re-pull now
		}
		if !deadline.IsZero() && time.Now().Add(wait).After(deadline) {
			return fmt.Errorf("%w: %s still failing after %d attempts: %w", errDropped, what, attempt, err)
		}
		t.count(func(s *Stats) { s.Retries++ })
		t.log.Debug("retrying", "op", what, "attempt", attempt, "backoff", wait, "err", err)
		if wait == 0 {
			continue
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(wait):
		}
		backoff = min(2*backoff, t.cfg.MaxBackoff)
	}
}

// watched runs call and, for as long as it has not returned, logs a
// warning every Config.WarnEvery: one call that neither returns nor fails (a
// sync push whose step waits for another trainer, a call the cluster does
// not answer) would otherwise leave no trace in the trainer's log.
func (t *Trainer) watched(what string, call func() error) error {
	start := time.Now()
	var mu sync.Mutex
	done := false
	var timer *time.Timer
	mu.Lock()
	timer = time.AfterFunc(t.cfg.WarnEvery, func() {
		mu.Lock()
		defer mu.Unlock()
		if done {
			return
		}
		t.log.Warn("call in progress", "op", what, "for", time.Since(start).Round(time.Millisecond))
		timer.Reset(t.cfg.WarnEvery)
	})
	mu.Unlock()
	err := call()
	mu.Lock()
	done = true
	timer.Stop()
	mu.Unlock()
	return err
}

// sleep waits ms milliseconds (DefaultWait if 0, at most MaxWait) or until
// ctx ends.
func (t *Trainer) sleep(ctx context.Context, ms int64) error {
	d := time.Duration(ms) * time.Millisecond
	if d <= 0 {
		d = t.cfg.DefaultWait
	}
	d = min(d, t.cfg.MaxWait)
	tm := time.NewTimer(d)
	defer tm.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-tm.C:
		return nil
	}
}
