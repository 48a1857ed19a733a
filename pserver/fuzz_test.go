package pserver

import (
	"bytes"
	"context"
	"slices"
	"testing"

	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/proto"

	pb "github.com/raftps/raftps/api/raftpspb"
)

// wireOf splits b into 7-byte buffers, as gRPC frames would split it.
func wireOf(b []byte) mem.BufferSlice {
	var s mem.BufferSlice
	for i := 0; i < len(b); i += 7 {
		s = append(s, mem.SliceBuffer(b[i:min(i+7, len(b))]))
	}
	return s
}

func sameTensors(a, b []*pb.Tensor) bool {
	return slices.EqualFunc(a, b, func(x, y *pb.Tensor) bool {
		return x.GetName() == y.GetName() && x.GetBlock() == y.GetBlock() && slices.Equal(x.GetRows(), y.GetRows()) && bytes.Equal(x.GetData(), y.GetData())
	})
}

// FuzzTensorCodec decodes arbitrary bytes as PushRequest, PullResponse and
// into a Client's pull sink. The codec must never panic; whatever it
// accepts, the protobuf codec reads the same way (when it accepts the bytes
// too), what it writes back is read by protobuf as the same message, and
// the sink never writes outside its slot's blocks or resizes an array.
func FuzzTensorCodec(f *testing.F) {
	c := tensorCodec{}
	for _, m := range []proto.Message{
		&pb.PushRequest{Job: "j", Slot: 1, Trainer: "t", Version: 5, Step: 5, Examples: 3, PushId: 9, Grads: []*pb.Tensor{
			{Name: "w", Block: 1, Data: packed(1, 2)}, {Name: "e", Rows: []int64{4, 1 << 40}, Data: packed(1, 2)}}},
		&pb.PullResponse{Version: 7, Incarnation: 2, Tensors: []*pb.Tensor{{Name: "w", Block: 0, Data: packed(1, 2, 3, 4)}, {Name: "w", Block: 2, Data: packed(1, 2)}}},
	} {
		bs, err := c.Marshal(m)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(bs.Materialize())
	}
	spec := &pb.JobSpec{Name: "j", DenseBlockSize: 4, NumVirtualShards: 4, NumPservers: 2,
		Params: []*pb.ParamSpec{{Name: "w", Shape: []int64{10}}, {Name: "e", Shape: []int64{8, 2}, Embedding: true}}}
	l, err := NewLayout(spec, 2)
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		var push pb.PushRequest
		if err := c.Unmarshal(wireOf(b), &push); err == nil {
			var ref pb.PushRequest
			if proto.Unmarshal(b, &ref) == nil {
				if push.Job != ref.Job || push.Slot != ref.Slot || push.Trainer != ref.Trainer || push.Version != ref.Version ||
					push.Step != ref.Step || push.Examples != ref.Examples || push.PushId != ref.PushId || !sameTensors(push.Grads, ref.Grads) {
					t.Fatalf("push decoded differently:\ntensor codec %v\nprotobuf     %v", &push, &ref)
				}
			}
			out, err := c.Marshal(&push)
			if err != nil {
				t.Fatal(err)
			}
			var back pb.PushRequest
			if err := proto.Unmarshal(out.Materialize(), &back); err == nil && !proto.Equal(&back, &push) {
				t.Fatalf("push round trip:\n%v\n%v", &push, &back)
			}
			releaseTensors(push.Grads)
		}
		var pull pb.PullResponse
		if err := c.Unmarshal(wireOf(b), &pull); err == nil {
			var ref pb.PullResponse
			if proto.Unmarshal(b, &ref) == nil && (pull.Version != ref.Version || pull.Incarnation != ref.Incarnation || !sameTensors(pull.Tensors, ref.Tensors)) {
				t.Fatalf("pull decoded differently:\ntensor codec %v\nprotobuf     %v", &pull, &ref)
			}
		}
		sink := &pullSink{layout: l, slot: 0, dst: map[string][]float32{"w": make([]float32, 10)}}
		before := slices.Clone(sink.dst["w"])
		_ = c.Unmarshal(wireOf(b), sink)
		w := sink.dst["w"]
		if len(w) != 10 {
			t.Fatalf("sink resized w to %d", len(w))
		}
		p, _ := l.Param("w")
		for b := range p.Blocks {
			if l.SlotOfBlock(p, b) == 0 {
				continue
			}
			lo, hi := l.BlockRange(p, b)
			if !slices.Equal(w[lo:hi], before[lo:hi]) {
				t.Fatalf("sink of slot 0 wrote block %d of slot %d", b, l.SlotOfBlock(p, b))
			}
		}
	})
}

// FuzzPushPull decodes arbitrary push and pull requests with the tensor
// codec and hands them to async (Adam, large learning rate) and sync (SGD)
// slots, with the finite-result check on. Whatever happens: no panic, every
// value and optimizer state stays finite, a refused push leaves the slot
// byte-identical, and a pull either fails or returns exactly the bytes it
// asked for.
func FuzzPushPull(f *testing.F) {
	c := tensorCodec{}
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
			if c.Unmarshal(wireOf(pushBytes), &req) != nil {
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
					if err := s.opt.checkEntry(e); err != nil {
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
