package trainertest

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/raftps/raftps/api/errs"
	pb "github.com/raftps/raftps/api/raftpspb"
	"github.com/raftps/raftps/api/rpctypes"
	"github.com/raftps/raftps/trainer"
	"github.com/raftps/raftps/trainer/model"
)

// Compile-time checks that the fakes implement the trainer's interfaces.
var (
	_ trainer.Master = (*Master)(nil)
	_ trainer.PS     = (*PS)(nil)
)

// Master is a fake job master: one job, tasks of spec.records_per_task
// records over [0, spec.dataset.records), spec.passes passes, an EVAL task at
// the end of each pass if spec.eval_each_pass. A pending task stays pending
// until finished, failed, Requeue'd, or (if TaskTimeout is set) past its
// deadline at the next GetTask.
type Master struct {
	// TaskTimeout, if set before use, gives each task handed out a deadline
	// (Task.deadline_unix_nano) after which GetTask requeues it.
	TaskTimeout time.Duration

	mu   sync.Mutex
	spec *pb.JobSpec
	// todo, pending and done hold task ids of the current pass.
	tasks   []*pb.Task
	todo    []int
	pending map[int64]bool
	done    int
	pass    int32
	evalDue bool
	over    bool

	// Finished and Failed record accepted reports in arrival order.
	Finished []*pb.TaskFinishedRequest
	Failed   []*pb.TaskFailedRequest
	// Stale counts TaskFinished calls with a wrong epoch; Timeouts tasks
	// requeued past their deadline.
	Stale, Timeouts int

	// GetTaskHook, if set, is called on each GetTask (n counts calls from
	// 1); a non-nil error is returned instead of a task.
	GetTaskHook func(n int) error
	// FinishHook, likewise, for TaskFinished.
	FinishHook func(n int) error
	getTasks   int
	finishes   int
}

// NewMaster returns a Master for spec; spec.dataset.records must be set.
func NewMaster(spec *pb.JobSpec) *Master {
	m := &Master{spec: spec, pending: map[int64]bool{}}
	per := spec.GetRecordsPerTask()
	records := spec.GetDataset().GetRecords()
	if per <= 0 {
		per = records
	}
	for b, id := int64(0), int64(1); b < records; b, id = b+per, id+1 {
		m.tasks = append(m.tasks, &pb.Task{Id: id, Begin: b, End: min(b+per, records)})
	}
	m.resetPass()
	return m
}

func (m *Master) resetPass() {
	m.todo = m.todo[:0]
	for i := range m.tasks {
		m.todo = append(m.todo, i)
	}
	m.done = 0
	m.evalDue = m.spec.GetEvalEachPass()
}

// GetJob returns the spec in a running JobStatus.
func (m *Master) GetJob(_ context.Context, name string) (*pb.JobStatus, error) {
	if name != m.spec.GetName() {
		return nil, rpctypes.ToStatus(fmt.Errorf("%w: job %q", errs.ErrNotFound, name))
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	return &pb.JobStatus{Name: name, State: pb.JobState_JOB_RUNNING, Pass: m.pass, Spec: m.spec}, nil
}

// GetTask hands out the next todo task, WAIT while tasks are pending, the
// eval task when a pass's training tasks are done, PASS_OVER once when a
// pass ends, and JOB_OVER after the last pass.
func (m *Master) GetTask(_ context.Context, req *pb.GetTaskRequest) (*pb.GetTaskResponse, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.getTasks++
	if m.GetTaskHook != nil {
		if err := m.GetTaskHook(m.getTasks); err != nil {
			return nil, err
		}
	}
	if m.over {
		return &pb.GetTaskResponse{Result: pb.GetTaskResponse_JOB_OVER, Pass: m.pass}, nil
	}
	now := time.Now()
	for _, t := range m.tasks {
		if m.pending[t.Id] && t.DeadlineUnixNano > 0 && now.UnixNano() > t.DeadlineUnixNano {
			m.Timeouts++
			m.requeueLocked(t.Id)
		}
	}
	if len(m.todo) > 0 {
		t := m.tasks[m.todo[0]]
		m.todo = m.todo[1:]
		t.Epoch++
		if m.TaskTimeout > 0 {
			t.DeadlineUnixNano = now.Add(m.TaskTimeout).UnixNano()
		}
		t.Pass, t.Trainer, t.State, t.Kind = m.pass, req.GetTrainer(), pb.TaskState_TASK_PENDING, pb.TaskKind_TASK_KIND_TRAIN
		m.pending[t.Id] = true
		return &pb.GetTaskResponse{Result: pb.GetTaskResponse_TASK, Task: cloneTask(t), Pass: m.pass}, nil
	}
	if len(m.pending) > 0 {
		return &pb.GetTaskResponse{Result: pb.GetTaskResponse_WAIT, Pass: m.pass, RetryAfterMs: 5}, nil
	}
	if m.evalDue {
		m.evalDue = false
		id := int64(-1 - m.pass)
		m.pending[id] = true
		t := &pb.Task{Id: id, Epoch: 1, Pass: m.pass, Kind: pb.TaskKind_TASK_KIND_EVAL, Trainer: req.GetTrainer(), State: pb.TaskState_TASK_PENDING}
		return &pb.GetTaskResponse{Result: pb.GetTaskResponse_TASK, Task: t, Pass: m.pass}, nil
	}
	// The pass is over.
	m.pass++
	if passes := max(m.spec.GetPasses(), 1); m.pass >= passes {
		m.over = true
		return &pb.GetTaskResponse{Result: pb.GetTaskResponse_JOB_OVER, Pass: m.pass}, nil
	}
	m.resetPass()
	return &pb.GetTaskResponse{Result: pb.GetTaskResponse_PASS_OVER, Pass: m.pass, RetryAfterMs: 1}, nil
}

func (m *Master) find(id int64) *pb.Task {
	for _, t := range m.tasks {
		if t.Id == id {
			return t
		}
	}
	return nil
}

// TaskFinished moves a pending task to done if the epoch matches.
func (m *Master) TaskFinished(_ context.Context, req *pb.TaskFinishedRequest) (*pb.TaskFinishedResponse, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.finishes++
	if m.FinishHook != nil {
		if err := m.FinishHook(m.finishes); err != nil {
			return nil, err
		}
	}
	if !m.pending[req.GetTaskId()] {
		m.Stale++
		return &pb.TaskFinishedResponse{}, nil
	}
	if t := m.find(req.GetTaskId()); t != nil && t.Epoch != req.GetEpoch() {
		m.Stale++
		return &pb.TaskFinishedResponse{}, nil
	}
	delete(m.pending, req.GetTaskId())
	m.done++
	m.Finished = append(m.Finished, req)
	return &pb.TaskFinishedResponse{Accepted: true}, nil
}

// TaskFailed records the failure and requeues the task.
func (m *Master) TaskFailed(_ context.Context, req *pb.TaskFailedRequest) (*pb.TaskFailedResponse, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if !m.pending[req.GetTaskId()] {
		return &pb.TaskFailedResponse{}, nil
	}
	m.Failed = append(m.Failed, req)
	m.requeueLocked(req.GetTaskId())
	return &pb.TaskFailedResponse{Accepted: true}, nil
}

// Requeue moves a pending task back to todo (as a master timeout would).
func (m *Master) Requeue(id int64) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.requeueLocked(id)
}

func (m *Master) requeueLocked(id int64) {
	if !m.pending[id] {
		return
	}
	delete(m.pending, id)
	if id < 0 {
		m.evalDue = true
		return
	}
	for i, t := range m.tasks {
		if t.Id == id {
			t.State = pb.TaskState_TASK_TODO
			m.todo = append(m.todo, i)
		}
	}
}

// Over reports whether the job ended.
func (m *Master) Over() bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.over
}

// FinishedCopy returns a snapshot of the accepted finishes.
func (m *Master) FinishedCopy() []*pb.TaskFinishedRequest {
	m.mu.Lock()
	defer m.mu.Unlock()
	return append([]*pb.TaskFinishedRequest(nil), m.Finished...)
}

func cloneTask(t *pb.Task) *pb.Task {
	return &pb.Task{Id: t.Id, Begin: t.Begin, End: t.End, Epoch: t.Epoch, Pass: t.Pass, Kind: t.Kind,
		Trainer: t.Trainer, State: t.State, DeadlineUnixNano: t.DeadlineUnixNano}
}

// PS is a fake parameter server holding the whole model in memory and
// applying each push at once with trainer.Optimizer (async, no staleness
// bound); with one trainer that equals sync mode.
type PS struct {
	mu      sync.Mutex
	params  model.Params
	dims    map[string]int
	opt     *trainer.Optimizer
	version int64

	// PullHook and PushHook, if set, are called on each Pull / Push (n counts
	// calls from 1); a non-nil error fails the call without effect.
	PullHook func(n int) error
	PushHook func(n int) error
	pulls    int
	pushes   int
	// Leaves counts LeaveStep calls; Examples counts pushed examples.
	Leaves   int
	Examples int64
}

// NewPS builds spec.model for inputDim x classes and initializes it as
// model.InitParams(m, spec.seed).
func NewPS(spec *pb.JobSpec, inputDim, classes int) (*PS, error) {
	m, err := model.Build(spec.GetModel(), inputDim, classes)
	if err != nil {
		return nil, err
	}
	opt, err := trainer.NewOptimizer(spec.GetOptimizer())
	if err != nil {
		return nil, err
	}
	ps := &PS{params: model.InitParams(m, spec.GetSeed()), opt: opt, dims: map[string]int{}}
	for _, p := range m.Params() {
		if p.GetEmbedding() {
			ps.dims[p.GetName()] = int(p.GetShape()[1])
		}
	}
	return ps, nil
}

// Pull returns copies of the dense parameters.
func (p *PS) Pull(context.Context) (map[string][]float32, int64, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.pulls++
	if p.PullHook != nil {
		if err := p.PullHook(p.pulls); err != nil {
			return nil, 0, err
		}
	}
	out := make(map[string][]float32, len(p.params.Dense))
	for k, v := range p.params.Dense {
		out[k] = append([]float32(nil), v...)
	}
	return out, p.version, nil
}

// PullRows returns copies of rows of embedding table name.
func (p *PS) PullRows(_ context.Context, name string, rows []int64) ([]float32, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	t, ok := p.params.Sparse[name]
	if !ok {
		return nil, rpctypes.ToStatus(fmt.Errorf("%w: no embedding %q", errs.ErrNotFound, name))
	}
	dim := p.dims[name]
	out := make([]float32, 0, len(rows)*dim)
	for _, r := range rows {
		if r < 0 || int(r) >= len(t.IDs) {
			return nil, rpctypes.ToStatus(fmt.Errorf("%w: row %d of %q out of range", errs.ErrInvalid, r, name))
		}
		out = append(out, t.Values[int(r)*dim:(int(r)+1)*dim]...)
	}
	return out, nil
}

// Push applies the gradients and returns the new version.
func (p *PS) Push(_ context.Context, grads map[string][]float32, rowGrads map[string]trainer.RowGrad, version, step, examples int64) (int64, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.pushes++
	if p.PushHook != nil {
		if err := p.PushHook(p.pushes); err != nil {
			return 0, err
		}
	}
	if err := p.opt.Update(p.params, model.Params{Dense: grads, Sparse: rowGrads}); err != nil {
		return 0, rpctypes.ToStatus(fmt.Errorf("%w: %w", errs.ErrInvalid, err))
	}
	p.version++
	p.Examples += examples
	return p.version, nil
}

// LeaveStep counts the call.
func (p *PS) LeaveStep(context.Context) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.Leaves++
	return nil
}

// Pulls returns the number of Pull calls so far.
func (p *PS) Pulls() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.pulls
}

// Dense returns copies of the dense parameters (not counted as a Pull).
func (p *PS) Dense() map[string][]float32 {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := make(map[string][]float32, len(p.params.Dense))
	for k, v := range p.params.Dense {
		out[k] = append([]float32(nil), v...)
	}
	return out
}

// PushPullPS is a PS that is also a trainer.PushPuller, as the agent's
// pserver client is: PushPull is Push (PushHook included) and then a copy
// of the parameters, not counted as a Pull. PushPulls counts its calls.
type PushPullPS struct {
	*PS
	PushPulls int
}

// PushPull implements trainer.PushPuller.
func (p *PushPullPS) PushPull(ctx context.Context, grads map[string][]float32, rowGrads map[string]trainer.RowGrad, version, step, examples int64) (map[string][]float32, int64, error) {
	v, err := p.Push(ctx, grads, rowGrads, version, step, examples)
	if err != nil {
		return nil, 0, err
	}
	p.mu.Lock()
	p.PushPulls++
	p.mu.Unlock()
	return p.Dense(), v, nil
}

// Version returns the number of pushes applied.
func (p *PS) Version() int64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.version
}

// WriteSynthetic writes a learnable 28x28, 10-class dataset in Fashion-MNIST
// layout (gzip IDX, train and t10k files) into dir: class c lights a 7x7
// block at a class-specific place, plus noise. nTrain and nTest records.
func WriteSynthetic(dir string, nTrain, nTest int, seed uint64) error {
	r := rand.New(rand.NewPCG(seed, 99))
	for _, s := range []struct {
		prefix string
		n      int
	}{{"train", nTrain}, {"t10k", nTest}} {
		img := make([]byte, s.n*784)
		lbl := make([]byte, s.n)
		for i := 0; i < s.n; i++ {
			c := r.IntN(10)
			lbl[i] = byte(c)
			x := img[i*784 : (i+1)*784]
			var bits uint64
			for j := range x {
				if j%8 == 0 {
					bits = r.Uint64()
				}
				if b := byte(bits); b&3 == 0 { // a quarter of the pixels get noise in [0, 128)
					x[j] = b &^ 3 >> 1
				}
				bits >>= 8
			}
			r0, c0 := (c/4)*7+r.IntN(3), (c%4)*7
			for dr := 0; dr < 7; dr++ {
				for dc := 0; dc < 7; dc++ {
					x[(r0+dr)*28+c0+dc] = byte(160 + r.IntN(96))
				}
			}
		}
		if err := writeIDX(filepath.Join(dir, s.prefix+"-images-idx3-ubyte.gz"), 0x803, []uint32{uint32(s.n), 28, 28}, img); err != nil {
			return err
		}
		if err := writeIDX(filepath.Join(dir, s.prefix+"-labels-idx1-ubyte.gz"), 0x801, []uint32{uint32(s.n)}, lbl); err != nil {
			return err
		}
	}
	return nil
}

func writeIDX(path string, magic uint32, dims []uint32, data []byte) error {
	var b bytes.Buffer
	zw, _ := gzip.NewWriterLevel(&b, gzip.BestSpeed)
	hdr := binary.BigEndian.AppendUint32(nil, magic)
	for _, d := range dims {
		hdr = binary.BigEndian.AppendUint32(hdr, d)
	}
	zw.Write(hdr)
	zw.Write(data)
	if err := zw.Close(); err != nil {
		return fmt.Errorf("trainertest: %w", err)
	}
	if err := os.WriteFile(path, b.Bytes(), 0o644); err != nil {
		return fmt.Errorf("trainertest: %w", err)
	}
	return nil
}
