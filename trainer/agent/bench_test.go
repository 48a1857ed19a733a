package agent

import (
	"context"
	"net"
	"path/filepath"
	"runtime"
	"sync"
	"testing"

	"google.golang.org/grpc"

	pb "github.com/raftps/raftps/api/raftpspb"
	"github.com/raftps/raftps/pserver"
	"github.com/raftps/raftps/trainer"
	"github.com/raftps/raftps/trainer/dataset"
	"github.com/raftps/raftps/trainer/model"
)

func fashionDir() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..", "datasets", "fashion-mnist")
}

// queueMaster hands out the tasks of one pass, then JOB_OVER.
type queueMaster struct {
	spec *pb.JobSpec
	mu   sync.Mutex
	next int64
}

func (m *queueMaster) GetTask(_ context.Context, req *pb.GetTaskRequest) (*pb.GetTaskResponse, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	rpt := m.spec.RecordsPerTask
	if m.next*rpt >= m.spec.Dataset.Records {
		return &pb.GetTaskResponse{Result: pb.GetTaskResponse_JOB_OVER}, nil
	}
	t := &pb.Task{Id: m.next, Begin: m.next * rpt, End: min((m.next+1)*rpt, m.spec.Dataset.Records), Epoch: m.next + 1}
	m.next++
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
	slot, err := pserver.NewSlot(spec, 0, 1)
	if err != nil {
		tb.Fatal(err)
	}
	slot.SetTrainers([]string{"t1"})
	srv := pserver.NewServer()
	srv.Host(spec.Name, 0, slot)
	g := grpc.NewServer(pserver.ServerOptions()...)
	pb.RegisterPServerServer(g, srv)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	go g.Serve(lis)
	defer g.Stop()
	c, err := pserver.NewClient(spec, "t1", pserver.StaticResolver{0: lis.Addr().String()})
	if err != nil {
		tb.Fatal(err)
	}
	defer c.Close()
	tr, err := trainer.New(trainer.Config{ID: "t1", Job: spec.Name}, newMasterAdapter(&queueMaster{spec: spec}), &psAdapter{c: c})
	if err != nil {
		tb.Fatal(err)
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
// process without RPC (trainer.TrainLocal), in the same run, and reports
// the ratio rpc/local.
func BenchmarkTrainerRPCvsLocal(b *testing.B) {
	train, err := dataset.LoadFashionMNIST(fashionDir(), "train")
	if err != nil {
		b.Skip("dataset:", err)
	}
	test, err := dataset.LoadFashionMNIST(fashionDir(), "test")
	if err != nil {
		b.Skip("dataset:", err)
	}
	spec := benchSpec(b, 10000)
	var rpc, local float64
	for i := 0; i < b.N; i++ {
		rpc += rpcRun(b, spec)
		res, err := trainer.TrainLocal(context.Background(), spec, train, test)
		if err != nil {
			b.Fatal(err)
		}
		local += res.ExamplesPerSec
	}
	n := float64(b.N)
	b.ReportMetric(rpc/n, "rpc-examples/s")
	b.ReportMetric(local/n, "local-examples/s")
	b.ReportMetric(rpc/local, "rpc/local")
}

// TestTrainerOverRPC trains a small pass through the real pserver gRPC path
// and checks every example was trained.
func TestTrainerOverRPC(t *testing.T) {
	if _, err := dataset.LoadFashionMNIST(fashionDir(), "train"); err != nil {
		t.Skip("dataset:", err)
	}
	eps := rpcRun(t, benchSpec(t, 2000))
	if eps <= 0 {
		t.Fatalf("examples/s = %v", eps)
	}
}
