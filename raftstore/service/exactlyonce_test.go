package service

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	pb "github.com/raftps/raftps/api/raftpspb"
	"github.com/raftps/raftps/raftstore/client"
)

// lossy drops the answers of the next n calls that succeeded: the call was
// applied, the client sees Unavailable (an outcome it cannot know).
type lossy struct{ n atomic.Int32 }

func (l *lossy) intercept(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
	err := invoker(ctx, method, req, reply, cc, opts...)
	if err == nil && l.n.Add(-1) >= 0 {
		return status.Error(codes.Unavailable, "test: answer lost after the call was applied")
	}
	return err
}

// TestRetryIsExactlyOnce (issue 12, item 6): a write whose answer is lost
// after it was applied, retried with client.Retry through a follower, is
// not applied again: one lease for one grant, SubmitJob answers as the
// first time (not "already exists"), GetTask hands out the same task, not
// a second one. Calls outside Retry are separate requests.
func TestRetryIsExactlyOnce(t *testing.T) {
	c := startGRPCCluster(t, 3)
	ctx := ctxT(t, 60*time.Second)
	l, f := c.leader(t, ctx), c.follower(t, ctx)
	loss := &lossy{}
	cl, err := client.New([]string{c.addr(f)}, grpc.WithChainUnaryInterceptor(loss.intercept))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	retry := func(fn func(ctx context.Context) error) {
		t.Helper()
		loss.n.Store(1)
		if err := client.Retry(ctx, fn); err != nil {
			t.Fatalf("retry: %v", err)
		}
		if loss.n.Load() >= 0 {
			t.Fatal("no answer was lost: the test did not retry")
		}
	}

	leases := len(l.FSM().Leases())
	var grant *pb.LeaseGrantResponse
	retry(func(ctx context.Context) error {
		var err error
		grant, err = cl.Lease.LeaseGrant(ctx, &pb.LeaseGrantRequest{Ttl: 60})
		return err
	})
	if err := l.LinearizableRead(ctx); err != nil {
		t.Fatal(err)
	}
	if got := len(l.FSM().Leases()); got != leases+1 {
		t.Fatalf("%d leases after one retried grant, want %d", got, leases+1)
	}
	if _, ok := l.FSM().Lease(grant.Id); !ok {
		t.Fatalf("the retry answered lease %d, which does not exist", grant.Id)
	}

	spec := &pb.JobSpec{Name: "j", Model: &pb.ModelSpec{Name: "softmax"},
		Dataset: &pb.DatasetSpec{Path: "/data/fmnist", Records: 1000}, RecordsPerTask: 100, Passes: 1,
		BatchSize: 10, NumPservers: 1, Optimizer: &pb.OptimizerSpec{Name: "sgd", LearningRate: 0.1}}
	retry(func(ctx context.Context) error {
		_, err := cl.Master.SubmitJob(ctx, &pb.SubmitJobRequest{Spec: spec})
		return err
	})

	var task *pb.GetTaskResponse
	retry(func(ctx context.Context) error {
		var err error
		task, err = cl.Master.GetTask(ctx, &pb.GetTaskRequest{Job: "j", Trainer: "t1"})
		return err
	})
	if task.Result != pb.GetTaskResponse_TASK {
		t.Fatalf("GetTask: %v", task)
	}
	if err := l.LinearizableRead(ctx); err != nil {
		t.Fatal(err)
	}
	var held []int64
	for _, p := range l.FSM().Jobs().Pending("j") {
		if p.Trainer == "t1" {
			held = append(held, p.Id)
		}
	}
	if len(held) != 1 || held[0] != task.Task.Id {
		t.Fatalf("trainer t1 holds tasks %v after one retried GetTask, want [%d]", held, task.Task.Id)
	}

	// Outside Retry every call is a request of its own.
	for range 2 {
		if _, err := cl.Lease.LeaseGrant(ctx, &pb.LeaseGrantRequest{Ttl: 60}); err != nil {
			t.Fatal(err)
		}
	}
	if err := l.LinearizableRead(ctx); err != nil {
		t.Fatal(err)
	}
	if got := len(l.FSM().Leases()); got != leases+3 {
		t.Fatalf("%d leases after two more grants, want %d", got, leases+3)
	}
}
