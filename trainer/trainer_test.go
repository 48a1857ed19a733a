package trainer_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	pb "github.com/raftps/raftps/api/raftpspb"
	"github.com/raftps/raftps/internal/testing/testutil"
	"github.com/raftps/raftps/trainer"
	"github.com/raftps/raftps/trainer/trainertest"
)

// testLogger sends the trainer's logs to t.Log.
func testLogger(tb testing.TB) *slog.Logger { return testutil.LoggerLevel(tb, slog.LevelDebug) }

// synthDir returns a synthetic dataset (2000 train, 500 test records),
// written once per test binary and removed by TestMain.
func synthDir(tb testing.TB) string {
	tb.Helper()
	synth.once.Do(func() {
		if synth.dir, synth.err = os.MkdirTemp("", "trainer-synth"); synth.err == nil {
			synth.err = trainertest.WriteSynthetic(synth.dir, 2000, 500, 1)
		}
	})
	if synth.err != nil {
		tb.Fatal(synth.err)
	}
	return synth.dir
}

var synth struct {
	once sync.Once
	dir  string
	err  error
}

func TestMain(m *testing.M) {
	code := m.Run()
	if synth.dir != "" {
		os.RemoveAll(synth.dir)
	}
	os.Exit(code)
}

func smallSpec(dir string, m *pb.ModelSpec) *pb.JobSpec {
	return &pb.JobSpec{
		Name: "job", Model: m, Dataset: &pb.DatasetSpec{Path: dir, Format: "fashion-mnist", Records: 2000},
		RecordsPerTask: 250, Passes: 2, BatchSize: 50, Seed: 3, EvalEachPass: true,
		Optimizer: &pb.OptimizerSpec{Name: "momentum", LearningRate: 0.05, Momentum: 0.9},
	}
}

type fixture struct {
	master *trainertest.Master
	ps     *trainertest.PS
	tr     *trainer.Trainer
}

func mustFixture(tb testing.TB, spec *pb.JobSpec, cfg trainer.Config) fixture {
	tb.Helper()
	ps, err := trainertest.NewPS(spec, 784, 10)
	if err != nil {
		tb.Fatal(err)
	}
	f := fixture{master: trainertest.NewMaster(spec), ps: ps}
	if cfg.ID == "" {
		cfg.ID = "t1"
	}
	cfg.Job = spec.GetName()
	cfg.Logger = testLogger(tb)
	if cfg.MinBackoff == 0 {
		cfg.MinBackoff, cfg.MaxBackoff = time.Millisecond, 5*time.Millisecond
	}
	if f.tr, err = trainer.New(cfg, f.master, f.ps); err != nil {
		tb.Fatal(err)
	}
	return f
}

func mustRun(tb testing.TB, f fixture) {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := f.tr.Run(ctx); err != nil {
		tb.Fatalf("Run: %v", err)
	}
	if !f.master.Over() {
		tb.Fatal("Run returned before JOB_OVER")
	}
}

// runTrainer runs a trainer of cfg on m and ps until it returns (a minute
// at most) and fails tb on an error.
func runTrainer(tb testing.TB, cfg trainer.Config, m trainer.Master, ps trainer.PS) *trainer.Trainer {
	tb.Helper()
	tr, err := trainer.New(cfg, m, ps)
	if err != nil {
		tb.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := tr.Run(ctx); err != nil {
		tb.Fatalf("Run: %v", err)
	}
	return tr
}

// checkJob verifies that every task of every pass finished once, that the
// pservers saw every record once per pass, and that the last eval is good.
func checkJob(t *testing.T, f fixture, spec *pb.JobSpec, minAcc float64) {
	t.Helper()
	tasks := int(spec.Dataset.Records / spec.RecordsPerTask)
	var train, eval int
	var lastAcc float64
	for _, fin := range f.master.FinishedCopy() {
		if fin.TaskId < 0 {
			eval++
			lastAcc = fin.Metrics.Accuracy
			continue
		}
		train++
		if fin.Metrics.Examples != spec.RecordsPerTask || fin.Metrics.Loss <= 0 || fin.Metrics.Step <= 0 {
			t.Errorf("task %d metrics %v", fin.TaskId, fin.Metrics)
		}
	}
	if want := tasks * int(spec.Passes); train != want || eval != int(spec.Passes) {
		t.Errorf("finished %d train and %d eval tasks, want %d and %d", train, eval, want, spec.Passes)
	}
	if want := spec.Dataset.Records * int64(spec.Passes); f.ps.Examples != want {
		t.Errorf("pservers got %d examples, want %d", f.ps.Examples, want)
	}
	if lastAcc < minAcc {
		t.Errorf("final eval accuracy %.3f < %.2f", lastAcc, minAcc)
	}
	st := f.tr.Stats()
	t.Logf("stats %+v, %.0f examples/s, final accuracy %.3f", st, st.ExamplesPerSec(), lastAcc)
}

func TestRunCompletesJob(t *testing.T) {
	dir := synthDir(t)
	for _, m := range []*pb.ModelSpec{
		{Name: "softmax"},
		{Name: "mlp", Hidden: []int32{32}},
		{Name: "hashed_lr", EmbeddingDim: 8, HashBuckets: 4096},
	} {
		t.Run(m.Name, func(t *testing.T) {
			spec := smallSpec(dir, m)
			f := mustFixture(t, spec, trainer.Config{})
			mustRun(t, f)
			checkJob(t, f, spec, 0.9)
			if f.ps.Leaves < 2 { // at least PASS_OVER and JOB_OVER
				t.Errorf("LeaveStep called %d times", f.ps.Leaves)
			}
		})
	}
}

func TestPushUnavailableIsRetried(t *testing.T) {
	spec := smallSpec(synthDir(t), &pb.ModelSpec{Name: "softmax"})
	f := mustFixture(t, spec, trainer.Config{})
	f.ps.PushHook = func(n int) error {
		if n == 3 || n == 4 || n == 40 {
			return status.Error(codes.Unavailable, "pserver slot moved")
		}
		return nil
	}
	f.ps.PullHook = func(n int) error {
		if n == 10 {
			return status.Error(codes.Unavailable, "pserver restarting")
		}
		return nil
	}
	mustRun(t, f)
	checkJob(t, f, spec, 0.9)
	if st := f.tr.Stats(); st.Retries != 4 || st.FailedTasks != 0 || st.DroppedTasks != 0 {
		t.Errorf("stats %+v, want 4 retries and no failed or dropped task", st)
	}
	if len(f.master.Failed) != 0 {
		t.Errorf("TaskFailed called: %v", f.master.Failed)
	}
}

// TestPushPullTrainsAsPushThenPull: with a PS that is a PushPuller the
// trainer trains every step but the first on what the last push brought
// back: it pulls once per task in async mode, once per job (and after
// leaving the step) in sync mode, where the last push of a task brings
// back the next task's parameters; either way it ends with the very
// parameters of Push then Pull. A failed PushPull is retried after a
// fresh Pull.
func TestPushPullTrainsAsPushThenPull(t *testing.T) {
	for _, mode := range []pb.UpdateMode{pb.UpdateMode_UPDATE_MODE_SYNC, pb.UpdateMode_UPDATE_MODE_ASYNC} {
		t.Run(mode.String(), func(t *testing.T) { testPushPullTrains(t, mode) })
	}
}

func testPushPullTrains(t *testing.T, mode pb.UpdateMode) {
	spec := smallSpec(synthDir(t), &pb.ModelSpec{Name: "mlp", Hidden: []int32{16}})
	spec.Passes, spec.EvalEachPass, spec.Mode = 1, false, mode
	plain := mustFixture(t, spec, trainer.Config{})
	mustRun(t, plain)
	steps := int(spec.Dataset.Records) / int(spec.BatchSize)
	tasks := int(spec.Dataset.Records / spec.RecordsPerTask)
	if n := plain.ps.Pulls(); n != steps {
		t.Fatalf("plain PS: %d pulls, want one per step (%d)", n, steps)
	}
	// Pulls and push-pulls without failure: async pulls at every task's
	// start and pushes without pull at its end; sync pulls once.
	pulls, pushPulls := tasks, steps-tasks
	if mode == pb.UpdateMode_UPDATE_MODE_SYNC {
		pulls, pushPulls = 1, steps
	}
	for _, failAt := range []int{0, 3} { // 0: no failure; 3: the third push
		pp := mustFixture(t, spec, trainer.Config{})
		pps := &trainertest.PushPullPS{PS: pp.ps}
		pps.PushHook = func(n int) error {
			if n == failAt {
				return status.Error(codes.Unavailable, "pserver slot moved")
			}
			return nil
		}
		var err error
		if pp.tr, err = trainer.New(trainer.Config{ID: "t1", Job: spec.GetName(), Logger: testLogger(t),
			MinBackoff: time.Millisecond, MaxBackoff: 5 * time.Millisecond}, pp.master, pps); err != nil {
			t.Fatal(err)
		}
		mustRun(t, pp)
		retried := 0
		if failAt > 0 {
			retried = 1
		}
		if n, m := pp.ps.Pulls(), pps.PushPulls; n != pulls+retried || m != pushPulls {
			t.Fatalf("fail at push %d: %d pulls and %d push-pulls, want %d and %d", failAt, n, m, pulls+retried, pushPulls)
		}
		want, got := plain.ps.Dense(), pp.ps.Dense()
		for name, w := range want {
			for i := range w {
				if got[name][i] != w[i] {
					t.Fatalf("fail at push %d: %s[%d] = %v, want %v (Push then Pull)", failAt, name, i, got[name][i], w[i])
				}
			}
		}
	}
}

// A push refused as stale (the pservers' FailedPrecondition "re-pull") is
// redone from a fresh pull, at once and without TaskFailed.
func TestStalePushIsRedone(t *testing.T) {
	spec := smallSpec(synthDir(t), &pb.ModelSpec{Name: "hashed_lr", EmbeddingDim: 8, HashBuckets: 4096})
	f := mustFixture(t, spec, trainer.Config{MinBackoff: time.Hour, MaxBackoff: time.Hour})
	f.ps.PushHook = func(n int) error {
		if n == 2 || n == 3 || n == 30 {
			return status.Error(codes.FailedPrecondition, "pserver: stale push; re-pull")
		}
		return nil
	}
	mustRun(t, f)
	checkJob(t, f, spec, 0.9)
	if st := f.tr.Stats(); st.StalePushes != 3 || st.FailedTasks != 0 {
		t.Errorf("stats %+v, want 3 stale pushes and no failed task", st)
	}
}

func TestMasterFailoverIsRidden(t *testing.T) {
	spec := smallSpec(synthDir(t), &pb.ModelSpec{Name: "softmax"})
	f := mustFixture(t, spec, trainer.Config{})
	unavailable := status.Error(codes.Unavailable, "no leader")
	f.master.GetTaskHook = func(n int) error {
		if n >= 2 && n <= 5 {
			return unavailable
		}
		return nil
	}
	f.master.FinishHook = func(n int) error {
		if n == 3 {
			return unavailable
		}
		return nil
	}
	mustRun(t, f)
	checkJob(t, f, spec, 0.9)
}

func TestNonRetryableErrorFailsTask(t *testing.T) {
	spec := smallSpec(synthDir(t), &pb.ModelSpec{Name: "softmax"})
	f := mustFixture(t, spec, trainer.Config{})
	f.ps.PushHook = func(n int) error {
		if n == 7 {
			return status.Error(codes.InvalidArgument, "bad gradient")
		}
		return nil
	}
	mustRun(t, f)
	if len(f.master.Failed) != 1 || f.tr.Stats().FailedTasks != 1 {
		t.Fatalf("failed reports %v, stats %+v", f.master.Failed, f.tr.Stats())
	}
	t.Logf("reason: %s", f.master.Failed[0].Reason)
	// The failed task was requeued and finished later: the job still completes.
	if got, want := len(f.master.FinishedCopy()), 2*8+2; got != want {
		t.Errorf("%d finished tasks, want %d", got, want)
	}
}

func TestJobOverEndsLoop(t *testing.T) {
	spec := smallSpec(synthDir(t), &pb.ModelSpec{Name: "softmax"})
	spec.Passes = 1
	f := mustFixture(t, spec, trainer.Config{})
	mustRun(t, f) // the job runs out
	// A second trainer joining a finished job returns at once.
	tr2, err := trainer.New(trainer.Config{ID: "t2", Job: "job"}, f.master, f.ps)
	if err != nil {
		t.Fatal(err)
	}
	leaves := f.ps.Leaves
	if err := tr2.Run(context.Background()); err != nil {
		t.Fatal(err)
	}
	if st := tr2.Stats(); st.Tasks != 0 || f.ps.Leaves != leaves+1 {
		t.Errorf("late trainer: stats %+v, leaves %d -> %d", st, leaves, f.ps.Leaves)
	}
	if err := tr2.Run(context.Background()); !errors.Is(err, trainer.ErrRunTwice) {
		t.Errorf("second Run: %v, want ErrRunTwice", err)
	}
}

// waitMaster always answers WAIT with a long retry_after.
type waitMaster struct{ *trainertest.Master }

func (waitMaster) GetTask(context.Context, *pb.GetTaskRequest) (*pb.GetTaskResponse, error) {
	return &pb.GetTaskResponse{Result: pb.GetTaskResponse_WAIT, RetryAfterMs: 60_000}, nil
}

func TestCancelStopsPromptly(t *testing.T) {
	spec := smallSpec(synthDir(t), &pb.ModelSpec{Name: "softmax"})
	cases := []struct {
		name  string
		setup func(f *fixture) (trainer.Master, trainer.PS)
	}{
		{"waiting", func(f *fixture) (trainer.Master, trainer.PS) { return waitMaster{f.master}, f.ps }},
		{"retrying push", func(f *fixture) (trainer.Master, trainer.PS) {
			f.ps.PushHook = func(int) error { return status.Error(codes.Unavailable, "down") }
			return f.master, f.ps
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			f := mustFixture(t, spec, trainer.Config{})
			m, ps := tc.setup(&f)
			tr, err := trainer.New(trainer.Config{ID: "t1", Job: "job", Logger: testLogger(t),
				MaxWait: time.Minute, MinBackoff: 10 * time.Second, MaxBackoff: time.Minute}, m, ps)
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan error, 1)
			go func() { done <- tr.Run(ctx) }()
			time.Sleep(300 * time.Millisecond)
			t0 := time.Now()
			cancel()
			select {
			case err := <-done:
				if !errors.Is(err, context.Canceled) {
					t.Errorf("Run = %v, want context.Canceled", err)
				}
				t.Logf("stopped %v after cancel", time.Since(t0))
			case <-time.After(2 * time.Second):
				t.Fatal("Run did not stop within 2s of cancel")
			}
		})
	}
}

func TestTaskDroppedAtDeadline(t *testing.T) {
	spec := smallSpec(synthDir(t), &pb.ModelSpec{Name: "softmax"})
	f := mustFixture(t, spec, trainer.Config{MinBackoff: 5 * time.Millisecond, MaxBackoff: 20 * time.Millisecond})
	f.master.TaskTimeout = 100 * time.Millisecond
	f.ps.PushHook = func(n int) error {
		// The pservers are down until the trainer gives up on a task.
		if f.tr.Stats().DroppedTasks == 0 {
			return status.Error(codes.Unavailable, "down")
		}
		return nil
	}
	mustRun(t, f)
	if len(f.master.Failed) != 0 {
		t.Errorf("a transient failure was reported as TaskFailed: %v", f.master.Failed)
	}
	st := f.tr.Stats()
	if st.DroppedTasks == 0 || f.master.Timeouts == 0 {
		t.Errorf("dropped %d, master timeouts %d; want both > 0", st.DroppedTasks, f.master.Timeouts)
	}
	checkJob(t, f, spec, 0.9)
}

func TestNewValidates(t *testing.T) {
	m := trainertest.NewMaster(&pb.JobSpec{Name: "j"})
	if _, err := trainer.New(trainer.Config{Job: "j"}, m, &trainertest.PS{}); !errors.Is(err, trainer.ErrBadJob) {
		t.Errorf("missing ID: %v", err)
	}
	if _, err := trainer.New(trainer.Config{ID: "t", Job: "j"}, nil, nil); !errors.Is(err, trainer.ErrBadJob) {
		t.Errorf("nil deps: %v", err)
	}
}

func TestIsRetryable(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want bool
	}{
		{nil, false},
		{status.Error(codes.Unavailable, "x"), true},
		{status.Error(codes.Aborted, "x"), true},
		{status.Error(codes.InvalidArgument, "x"), false},
		{context.Canceled, false},
		{context.DeadlineExceeded, true},
		{errors.Join(errors.New("wrapped"), trainer.ErrRetryable), true},
		{errors.New("plain"), false},
	} {
		if got := trainer.IsRetryable(tc.err); got != tc.want {
			t.Errorf("IsRetryable(%v) = %v, want %v", tc.err, got, tc.want)
		}
	}
}

// waitFirstMaster answers the first `waits` GetTasks (default 1) with WAIT
// and records what the PS had seen when the trainer asked again.
type waitFirstMaster struct {
	*trainertest.Master
	ps                        *trainertest.PS
	waits                     int
	calls                     int
	leavesAfter, examplesThen int64
}

func (m *waitFirstMaster) GetTask(ctx context.Context, req *pb.GetTaskRequest) (*pb.GetTaskResponse, error) {
	m.calls++
	switch waits := max(1, m.waits); {
	case m.calls <= waits:
		return &pb.GetTaskResponse{Result: pb.GetTaskResponse_WAIT, RetryAfterMs: 1}, nil
	case m.calls == waits+1:
		m.leavesAfter, m.examplesThen = int64(m.ps.Leaves), m.ps.Examples
	}
	return m.Master.GetTask(ctx, req)
}

// TestWaitLeavesStep: a trainer that registered near the end of a pass
// and got WAIT is in the pservers' expected set for the sync step though it
// never pushed; it must leave the step at that WAIT (before, its leaveStep
// was a no-op until it had pushed, and the step stalled). One that keeps
// getting WAIT tells the pservers at every one, not only the first: a slot
// restored on another node or rolled back is a new Slot that expects every
// registered trainer; if a waiting trainer stayed silent, that slot's step
// would wait for it until a pending task timed out (the trainers holding
// the tasks wait in the step, the waiting trainer for their tasks).
func TestWaitLeavesStep(t *testing.T) {
	for _, waits := range []int{1, 3} {
		t.Run(fmt.Sprintf("waits=%d", waits), func(t *testing.T) {
			spec := smallSpec(synthDir(t), &pb.ModelSpec{Name: "softmax"})
			spec.Passes = 1
			f := mustFixture(t, spec, trainer.Config{})
			m := &waitFirstMaster{Master: f.master, ps: f.ps, waits: waits}
			runTrainer(t, trainer.Config{ID: "late", Job: "job", Logger: testLogger(t), MinBackoff: time.Millisecond, MaxBackoff: 5 * time.Millisecond}, m, f.ps)
			if m.examplesThen != 0 || m.leavesAfter != int64(waits) {
				t.Fatalf("after %d WAITs: %d LeaveStep calls (want %d) with %d examples pushed (want 0)", waits, m.leavesAfter, waits, m.examplesThen)
			}
		})
	}
}

// slowPushPS is a PS whose first push blocks for `block`.
type slowPushPS struct {
	*trainertest.PS
	block time.Duration
	once  sync.Once
}

func (p *slowPushPS) Push(ctx context.Context, grads map[string][]float32, rowGrads map[string]trainer.RowGrad, version, step, examples int64) (int64, error) {
	p.once.Do(func() { time.Sleep(p.block) })
	return p.PS.Push(ctx, grads, rowGrads, version, step, examples)
}

// runSlowPush trains one pass of a small job whose first push blocks for
// block, logging at level into the returned buffer (warnEvery 0: the
// default).
func runSlowPush(t *testing.T, block time.Duration, level slog.Level, warnEvery time.Duration) (*trainer.Trainer, *testutil.LockedBuffer) {
	spec := smallSpec(synthDir(t), &pb.ModelSpec{Name: "softmax"})
	spec.Passes = 1
	f := mustFixture(t, spec, trainer.Config{})
	buf := &testutil.LockedBuffer{}
	log := slog.New(slog.NewTextHandler(buf, &slog.HandlerOptions{Level: level}))
	tr := runTrainer(t, trainer.Config{ID: "slow", Job: "job", Logger: log, WarnEvery: warnEvery}, f.master, &slowPushPS{PS: f.ps, block: block})
	return tr, buf
}

// TestCallInProgressIsLogged: one call that has not returned (a sync push
// whose step waits for another trainer) is logged at warn level every
// WarnEvery while it lasts, naming the operation, and no more once it
// returns.
func TestCallInProgressIsLogged(t *testing.T) {
	_, buf := runSlowPush(t, 250*time.Millisecond, slog.LevelWarn, 40*time.Millisecond)
	count := func() (n int) {
		for _, line := range strings.Split(buf.String(), "\n") {
			if strings.Contains(line, `msg="call in progress"`) && strings.Contains(line, `op="train step"`) {
				n++
			}
		}
		return n
	}
	n := count()
	// 250 ms / 40 ms: 6 warnings on an idle machine, fewer when timers
	// fire late on a loaded one.
	if n < 2 {
		t.Fatalf("%d \"call in progress\" warnings for one push blocked 250ms with WarnEvery 40ms, want at least 2; log:\n%s", n, buf.String())
	}
	// Every call's timer stopped with its call: nothing more is logged.
	time.Sleep(200 * time.Millisecond)
	if m := count(); m != n {
		t.Fatalf("%d \"call in progress\" warnings after Run returned, %d when it did", m, n)
	}
}

// TestPSTimeCountsPserverCalls: Stats.PSTime counts the time in pserver
// calls, a part of TrainTime, and each task's "task trained" line gives
// its own share (ps_time): one push blocked 200 ms shows in both.
func TestPSTimeCountsPserverCalls(t *testing.T) {
	const block = 200 * time.Millisecond
	tr, buf := runSlowPush(t, block, slog.LevelInfo, 0)
	st := tr.Stats()
	if st.PSTime < block || st.PSTime > st.TrainTime {
		t.Fatalf("PSTime %v, TrainTime %v: want PSTime in [%v, TrainTime]", st.PSTime, st.TrainTime, block)
	}
	var tasks int
	var maxTask time.Duration
	for _, line := range strings.Split(buf.String(), "\n") {
		if !strings.Contains(line, `msg="task trained"`) {
			continue
		}
		tasks++
		_, v, ok := strings.Cut(line, "ps_time=")
		if !ok {
			t.Fatalf("no ps_time in %q", line)
		}
		d, err := time.ParseDuration(strings.Fields(v)[0])
		if err != nil {
			t.Fatalf("ps_time in %q: %v", line, err)
		}
		maxTask = max(maxTask, d)
	}
	if tasks == 0 || maxTask < block {
		t.Fatalf("%d task lines, largest ps_time %v: want one at least %v; log:\n%s", tasks, maxTask, block, buf.String())
	}
}
