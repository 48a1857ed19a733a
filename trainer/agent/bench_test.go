package agent

import (
	"context"
	"path/filepath"
	"runtime"
	"slices"
	"sync"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"

	pb "github.com/raftps/raftps/api/raftpspb"
	"github.com/raftps/raftps/pserver"
	"github.com/raftps/raftps/pserver/psclient"
	"github.com/raftps/raftps/pserver/wire"
	"github.com/raftps/raftps/trainer"
	"github.com/raftps/raftps/trainer/dataset"
	"github.com/raftps/raftps/trainer/model"
)

func fashionDir() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..", "datasets", "fashion-mnist")
}

// queueMaster hands out the tasks of one pass, then JOB_OVER. before, if
// set, runs before each task is handed out and before JOB_OVER (with the
// task, nil for JOB_OVER).
type queueMaster struct {
	spec   *pb.JobSpec
	before func(*pb.Task)
	mu     sync.Mutex
	next   int64
}

func (m *queueMaster) GetTask(_ context.Context, req *pb.GetTaskRequest) (*pb.GetTaskResponse, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	rpt := m.spec.RecordsPerTask
	if m.next*rpt >= m.spec.Dataset.Records {
		if m.before != nil {
			m.before(nil)
		}
		return &pb.GetTaskResponse{Result: pb.GetTaskResponse_JOB_OVER}, nil
	}
	t := &pb.Task{Id: m.next, Begin: m.next * rpt, End: min((m.next+1)*rpt, m.spec.Dataset.Records), Epoch: m.next + 1}
	m.next++
	if m.before != nil {
		m.before(t)
	}
	return &pb.GetTaskResponse{Result: pb.GetTaskResponse_TASK, Task: t}, nil
}
func (m *queueMaster) TaskFinished(context.Context, *pb.TaskFinishedRequest) (*pb.TaskFinishedResponse, error) {
	return &pb.TaskFinishedResponse{Accepted: true}, nil
}
func (m *queueMaster) TaskFailed(context.Context, *pb.TaskFailedRequest) (*pb.TaskFailedResponse, error) {
	return &pb.TaskFailedResponse{Accepted: true}, nil
}
func (m *queueMaster) GetJob(context.Context, *pb.GetJobRequest) (*pb.GetJobResponse, error) {
	return &pb.GetJobResponse{Status: &pb.JobStatus{Name: m.spec.Name, State: pb.JobState_JOB_RUNNING, Spec: m.spec}}, nil
}

func benchSpec(tb testing.TB, records int64) *pb.JobSpec {
	spec := &pb.JobSpec{Name: "bench", Model: &pb.ModelSpec{Name: "mlp", Hidden: []int32{128}},
		Dataset:        &pb.DatasetSpec{Path: fashionDir(), Format: "fashion-mnist", Records: records},
		RecordsPerTask: 1000, Passes: 1, BatchSize: 64, NumPservers: 1, Mode: pb.UpdateMode_UPDATE_MODE_SYNC,
		Optimizer: &pb.OptimizerSpec{Name: "momentum", LearningRate: 0.05, Momentum: 0.9}, Seed: 1}
	m, err := model.Build(spec.Model, 784, 10)
	if err != nil {
		tb.Fatal(err)
	}
	spec.Params = m.Params()
	return spec
}

// rpcRun trains one pass of spec with one trainer against one pserver slot
// served over loopback gRPC; it returns examples per second of training.
func rpcRun(tb testing.TB, spec *pb.JobSpec) float64 {
	tb.Helper()
	return rpcRunHook(tb, spec, nil)
}

// rpcRunHook is rpcRun calling before(task, stats) ahead of handing out each
// task (task nil: the pass is over) with the trainer's stats so far.
func rpcRunHook(tb testing.TB, spec *pb.JobSpec, before func(*pb.Task, trainer.Stats)) float64 {
	tb.Helper()
	slot, err := pserver.NewSlot(spec, 0, 1)
	if err != nil {
		tb.Fatal(err)
	}
	slot.SetTrainers([]string{"t1"})
	srv := pserver.NewServer()
	srv.Host(spec.Name, 0, slot)
	g := grpc.NewServer(wire.ServerOptions()...)
	pb.RegisterPServerServer(g, srv)
	lis, err := wire.Listen("127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	go g.Serve(lis)
	defer g.Stop()
	c, err := psclient.NewClient(spec, "t1", psclient.StaticResolver{0: lis.Addr().String()})
	if err != nil {
		tb.Fatal(err)
	}
	defer c.Close()
	qm := &queueMaster{spec: spec}
	tr, err := trainer.New(trainer.Config{ID: "t1", Job: spec.Name}, newMasterAdapter(qm), &psAdapter{c: c})
	if err != nil {
		tb.Fatal(err)
	}
	if before != nil {
		qm.before = func(t *pb.Task) { before(t, tr.Stats()) }
	}
	if err := tr.Run(context.Background()); err != nil {
		tb.Fatal(err)
	}
	st := tr.Stats()
	if st.Examples != spec.Dataset.Records {
		tb.Fatalf("trained %d examples, want %d", st.Examples, spec.Dataset.Records)
	}
	return st.ExamplesPerSec()
}

// BenchmarkTrainerRPCvsLocal measures examples/s of 1 trainer + 1 pserver
// over loopback gRPC next to the same model and optimizer trained in one
// process without RPC (trainer.TrainLocal), interleaved task by task: before
// the RPC trainer gets each task (1000 records), the same number of records
// is trained in process, so the two sides of a pair see the same moment of a
// shared machine's load (run one after the other, a pass each, they did
// not: the ratio swung from 0.44x to 1.03x between runs). Each (in-process
// chunk, RPC task) is a pair; the first pair is warm-up (the first dial,
// first allocations) and is left out. Reported: rpc-examples/s and
// local-examples/s over the other pairs, rpc/local (their ratio), the
// median, min and max of the per-pair ratios (pairs: their count), and the
// same per CPU-second of the process (rpc/local-cpu: the cost of a step,
// trainer and pserver together, next to the in-process one), and where a
// step's time goes: rpc-ms/step, of it rpc-ps-ms/step in pserver calls
// (trainer.Stats.PSTime), and local-ms/step.
func BenchmarkTrainerRPCvsLocal(b *testing.B) {
	train, err := dataset.LoadFashionMNIST(fashionDir(), "train")
	if err != nil {
		b.Fatal("dataset:", err)
	}
	test, err := dataset.LoadFashionMNIST(fashionDir(), "test")
	if err != nil {
		b.Fatal("dataset:", err)
	}
	evalSet := test.Head(1) // TrainLocal's closing evaluation is not timed; keep it short
	spec := benchSpec(b, 10000)
	type side struct {
		examples int64
		time     time.Duration
		cpu      time.Duration // the process's CPU time (both ends of the RPC side live in it)
		steps    int64
		ps       time.Duration // RPC side: in pserver calls (trainer.Stats.PSTime)
	}
	var rpc, local side
	var ratios []float64
	for i := 0; i < b.N; i++ {
		var prev trainer.Stats
		var chunk side // the in-process half of the pair whose RPC task runs now
		var cpuMark time.Duration
		pair := 0
		rpcRunHook(b, spec, func(t *pb.Task, st trainer.Stats) {
			now := cpuTime()
			if pair > 0 { // close the pair of the task just trained
				r := side{st.Examples - prev.Examples, st.TrainTime - prev.TrainTime, now - cpuMark, st.Steps - prev.Steps, st.PSTime - prev.PSTime}
				if pair > 1 {
					rpc.examples, rpc.time, rpc.cpu = rpc.examples+r.examples, rpc.time+r.time, rpc.cpu+r.cpu
					rpc.steps, rpc.ps = rpc.steps+r.steps, rpc.ps+r.ps
					local.examples, local.time, local.cpu = local.examples+chunk.examples, local.time+chunk.time, local.cpu+chunk.cpu
					local.steps += chunk.steps
					ratios = append(ratios, (float64(r.examples)/r.time.Seconds())/(float64(chunk.examples)/chunk.time.Seconds()))
				}
			}
			prev = st
			if t == nil {
				return
			}
			ls := proto.Clone(spec).(*pb.JobSpec)
			ls.Dataset.Records, ls.RecordsPerTask = t.End-t.Begin, t.End-t.Begin
			res, err := trainer.TrainLocal(context.Background(), ls, train, evalSet)
			if err != nil {
				b.Fatal(err)
			}
			cpuMark = cpuTime()
			chunk = side{examples: res.Examples, time: res.TrainTime, cpu: cpuMark - now, steps: res.Steps}
			pair++
		})
	}
	if len(ratios) == 0 || rpc.time <= 0 || local.time <= 0 {
		b.Fatal("no pairs measured")
	}
	re, le := float64(rpc.examples)/rpc.time.Seconds(), float64(local.examples)/local.time.Seconds()
	slices.Sort(ratios)
	b.ReportMetric(re, "rpc-examples/s")
	b.ReportMetric(le, "local-examples/s")
	b.ReportMetric(re/le, "rpc/local")
	b.ReportMetric(ratios[len(ratios)/2], "rpc/local-median")
	b.ReportMetric(ratios[0], "rpc/local-min")
	b.ReportMetric(ratios[len(ratios)-1], "rpc/local-max")
	b.ReportMetric(float64(len(ratios)), "pairs")
	// Where a step's time goes: the RPC side's step is its own work (the
	// forward and backward pass) plus the time in pserver calls (push,
	// the update, the parameters back); the in-process step is the
	// forward and backward pass plus the update.
	perStep := func(d time.Duration, steps int64) float64 { return d.Seconds() * 1e3 / float64(steps) }
	b.ReportMetric(perStep(rpc.time, rpc.steps), "rpc-ms/step")
	b.ReportMetric(perStep(rpc.ps, rpc.steps), "rpc-ps-ms/step")
	b.ReportMetric(perStep(local.time, local.steps), "local-ms/step")
	// Examples per CPU-second: what a step costs, which other load on the
	// machine distorts far less than examples per wall-second.
	rc, lc := float64(rpc.examples)/rpc.cpu.Seconds(), float64(local.examples)/local.cpu.Seconds()
	b.ReportMetric(rc, "rpc-examples/cpu-s")
	b.ReportMetric(lc, "local-examples/cpu-s")
	b.ReportMetric(rc/lc, "rpc/local-cpu")
}

// cpuTime is the process's user+system CPU time.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// TestTrainerOverRPC trains a small pass through the real pserver gRPC path
// and checks every example was trained.
func TestTrainerOverRPC(t *testing.T) {
	if _, err := dataset.LoadFashionMNIST(fashionDir(), "train"); err != nil {
		t.Fatal("dataset:", err)
	}
	eps := rpcRun(t, benchSpec(t, 2000))
	if eps <= 0 {
		t.Fatalf("examples/s = %v", eps)
	}
}
