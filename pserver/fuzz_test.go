package pserver

import (
	"bytes"
	"context"
	"testing"

	"google.golang.org/grpc/encoding"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/proto"

	pb "github.com/raftps/raftps/api/raftpspb"
	"github.com/raftps/raftps/pserver/wire"
)

// framesOf cuts b into buffers of at most 7 bytes, as gRPC frames would.
func framesOf(b []byte) (s mem.BufferSlice) {
	for ; len(b) > 7; b = b[7:] {
		s = append(s, mem.SliceBuffer(b[:7]))
	}
	return append(s, mem.SliceBuffer(b))
}

// FuzzPushPull decodes arbitrary push and pull requests with the tensor
// codec and hands them to async (Adam, large learning rate) and sync (SGD)
// slots, with the finite-result check on. Whatever happens: no panic, every
// value and optimizer state stays finite, a refused push leaves the slot
// byte-identical, and a pull either fails or returns exactly the bytes it
// asked for.
func FuzzPushPull(f *testing.F) {
	c := encoding.GetCodecV2(wire.TensorCodecName)
	add := func(push *pb.PushRequest, pull *pb.PullRequest) {
		a, err := c.Marshal(push)
		if err != nil {
			f.Fatal(err)
		}
		b, err := proto.Marshal(pull)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(a.Materialize(), b)
	}
	add(&pb.PushRequest{Trainer: "t", Examples: 2, Grads: []*pb.Tensor{{Name: "w", Block: 0, Data: packed(1, 2, 3, 4)}, {Name: "e", Rows: []int64{3}, Data: packed(5, 6)}}},
		&pb.PullRequest{Tensors: []*pb.Tensor{{Name: "w", Block: 1}, {Name: "e", Rows: []int64{3, 4}}}})
	add(&pb.PushRequest{Trainer: "t", Grads: []*pb.Tensor{{Name: "w", Block: 2, Data: packed(1e12, -1e12)}}},
		&pb.PullRequest{Tensors: []*pb.Tensor{{Name: "e", Rows: []int64{7, 7}}}})
	add(&pb.PushRequest{Trainer: "t", Examples: 1 << 40, Grads: []*pb.Tensor{{Name: "w", Block: 1, Data: packed(3e38, 3e38, 3e38, 3e38)}}},
		&pb.PullRequest{})
	specs := []*pb.JobSpec{
		{Name: "j", Mode: pb.UpdateMode_UPDATE_MODE_ASYNC, Seed: 1, DenseBlockSize: 4, NumVirtualShards: 2,
			Optimizer: &pb.OptimizerSpec{Name: "adam", LearningRate: 1e36},
			Params:    []*pb.ParamSpec{{Name: "w", Shape: []int64{10}, Init: pb.Initializer_INIT_NORMAL, Scale: 1e30}, {Name: "e", Shape: []int64{8, 2}, Embedding: true}}},
		{Name: "j", Mode: pb.UpdateMode_UPDATE_MODE_SYNC, Seed: 1, DenseBlockSize: 4, NumVirtualShards: 2,
			Optimizer: &pb.OptimizerSpec{Name: "sgd", LearningRate: 1e27, WeightDecay: 1},
			Params:    []*pb.ParamSpec{{Name: "w", Shape: []int64{10}, Init: pb.Initializer_INIT_UNIFORM, Scale: 1e38}, {Name: "e", Shape: []int64{8, 2}, Embedding: true}}},
		// Sizes at the layout's bound (jobspec.MaxJobBytes): rows of 2^32
		// elements, 16 GiB each.
		{Name: "j", Mode: pb.UpdateMode_UPDATE_MODE_ASYNC, Seed: 1, DenseBlockSize: 1 << 40, NumVirtualShards: 1,
			Optimizer: &pb.OptimizerSpec{Name: "adagrad"},
			Params:    []*pb.ParamSpec{{Name: "w", Shape: []int64{3}}, {Name: "e", Shape: []int64{1, 1 << 32}, Embedding: true}}},
	}
	f.Fuzz(func(t *testing.T, pushBytes, pullBytes []byte) {
		for _, spec := range specs {
			s, err := NewSlot(spec, 0, 1)
			if err != nil {
				t.Fatal(err)
			}
			var req pb.PushRequest
			if c.Unmarshal(framesOf(pushBytes), &req) != nil {
				return
			}
			s.SetTrainers([]string{req.GetTrainer()})
			before := snapshotBytes(t, s)
			for range 2 { // twice: the second is a duplicate or a second step
				req.Step = s.Step()
				if _, err := s.Push(context.Background(), &req); err != nil {
					if !bytes.Equal(before, snapshotBytes(t, s)) {
						t.Fatalf("refused push (%v) changed the slot", err)
					}
				}
				before = snapshotBytes(t, s)
			}
			for _, vs := range s.Snapshot().VShards {
				for _, e := range vs.Entries {
					if err := s.opt.CheckState(e.Values, e.State, e.T); err != nil {
						t.Fatalf("slot state after pushes: %v", err)
					}
				}
			}
			var pull pb.PullRequest
			if proto.Unmarshal(pullBytes, &pull) != nil {
				continue
			}
			resp, err := s.Pull(context.Background(), &pull)
			if err != nil || len(pull.Tensors) == 0 {
				continue
			}
			if len(resp.Tensors) != len(pull.Tensors) {
				t.Fatalf("%d tensors for %d asked", len(resp.Tensors), len(pull.Tensors))
			}
			for i, rt := range resp.Tensors {
				p, _ := s.layout.Param(pull.Tensors[i].GetName())
				want := 4 * p.Dim * int64(len(pull.Tensors[i].GetRows()))
				if !p.Embedding {
					lo, hi := s.layout.BlockRange(p, pull.Tensors[i].GetBlock())
					want = 4 * (hi - lo)
				}
				if int64(len(rt.Data)) != want {
					t.Fatalf("tensor %d: %d bytes, want %d", i, len(rt.Data), want)
				}
			}
		}
	})
}
