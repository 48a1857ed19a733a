package agent

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/raftps/raftps/api/errs"
	pb "github.com/raftps/raftps/api/raftpspb"
	"github.com/raftps/raftps/api/rpctypes"
)

// idMaster records the request id of every call and answers with the
// queued errors (nil: success).
type idMaster struct {
	ids  []rpctypes.RequestID
	errs []error
}

func (m *idMaster) answer(ctx context.Context) error {
	id, _ := rpctypes.RequestIDFrom(ctx)
	m.ids = append(m.ids, id)
	if len(m.errs) == 0 {
		return nil
	}
	err := m.errs[0]
	m.errs = m.errs[1:]
	return err
}

func (m *idMaster) GetTask(ctx context.Context, _ *pb.GetTaskRequest) (*pb.GetTaskResponse, error) {
	return &pb.GetTaskResponse{}, m.answer(ctx)
}
func (m *idMaster) TaskFinished(ctx context.Context, _ *pb.TaskFinishedRequest) (*pb.TaskFinishedResponse, error) {
	return &pb.TaskFinishedResponse{}, m.answer(ctx)
}
func (m *idMaster) TaskFailed(ctx context.Context, _ *pb.TaskFailedRequest) (*pb.TaskFailedResponse, error) {
	return &pb.TaskFailedResponse{}, m.answer(ctx)
}
func (m *idMaster) GetJob(context.Context, *pb.GetJobRequest) (*pb.GetJobResponse, error) {
	return &pb.GetJobResponse{}, nil
}

// TestMasterAdapterRetriesKeepTheirID (issue 12 item 6, in-process
// trainers): a call whose outcome is unknown keeps its request id, and the
// next equal call (the trainer's retry) reuses it, so the FSM answers it
// with the first result; a definite answer or success settles the id; a
// different request is a new one.
func TestMasterAdapterRetriesKeepTheirID(t *testing.T) {
	unknown := status.Error(codes.Unavailable, "leadership lost")
	definite := rpctypes.ToStatus(fmt.Errorf("%w: job j", errs.ErrNotFound))
	m := &idMaster{errs: []error{unknown, nil, nil, unknown, nil, definite, nil}}
	a := newMasterAdapter(m)
	ctx := context.Background()
	get := &pb.GetTaskRequest{Job: "j", Trainer: "t1"}
	fin := func(task int64) *pb.TaskFinishedRequest {
		return &pb.TaskFinishedRequest{Job: "j", Trainer: "t1", TaskId: task}
	}

	_, _ = a.GetTask(ctx, get)         // 1: unknown
	_, _ = a.GetTask(ctx, get)         // 2: the retry: same id; ok
	_, _ = a.GetTask(ctx, get)         // 3: a new request
	_, _ = a.TaskFinished(ctx, fin(1)) // 4: unknown
	_, _ = a.TaskFinished(ctx, fin(2)) // 5: another task: a new request
	_, _ = a.TaskFinished(ctx, fin(1)) // 6: the retry of 4: same id; definite answer
	_, _ = a.TaskFinished(ctx, fin(1)) // 7: settled: a new request

	if len(m.ids) != 7 {
		t.Fatalf("%d calls recorded", len(m.ids))
	}
	for i, id := range m.ids {
		if id.Client == "" || id.Client != m.ids[0].Client || id.Seq == 0 {
			t.Fatalf("call %d: request id %+v", i+1, id)
		}
	}
	seq := func(i int) uint64 { return m.ids[i-1].Seq }
	if seq(2) != seq(1) || seq(6) != seq(4) {
		t.Fatalf("retries did not reuse their ids: %v", m.ids)
	}
	distinct := map[uint64]bool{seq(1): true, seq(3): true, seq(4): true, seq(5): true, seq(7): true}
	if len(distinct) != 5 {
		t.Fatalf("new requests share ids: %v", m.ids)
	}
	if acked := m.ids[4].Acked; acked != seq(4) {
		t.Fatalf("acked %d while call 4's outcome is unknown, want %d", acked, seq(4))
	}
	if acked := m.ids[6].Acked; acked != seq(7) {
		t.Fatalf("acked %d after every earlier call settled, want %d", acked, seq(7))
	}
	if !errors.Is(rpctypes.FromStatus(definite), errs.ErrNotFound) {
		t.Fatal("setup: definite error")
	}
	if b := newMasterAdapter(m); b.ids.client == a.ids.client {
		t.Fatal("two adapters share a client id")
	}
}
