package pserver

import (
	"context"
	"fmt"
	"sync"
	"testing"

	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/proto"

	pb "github.com/raftps/raftps/api/raftpspb"
)

// TestTensorCodecIsProtobuf: the tensor codec and the protobuf codec read
// each other's bytes.
func TestTensorCodecIsProtobuf(t *testing.T) {
	big := make([]byte, 3*inlineBytes)
	for i := range big {
		big[i] = byte(i)
	}
	msgs := []proto.Message{
		&pb.PullResponse{Version: 7, Incarnation: 99, Tensors: []*pb.Tensor{
			{Name: "w", Block: 3, Data: big}, {Name: "e", Rows: []int64{1, 300, 0}, Data: packed(1, 2, 3)}, {Name: "z"}}},
		&pb.PushRequest{Job: "j", Slot: 2, Trainer: "t", Version: 5, Step: 5, Examples: 32, Grads: []*pb.Tensor{
			{Name: "w", Block: 1, Data: big}, {Name: "e", Rows: []int64{4}, Data: packed(1)}}},
		&pb.PushRequest{Slot: -1, Pull: true, PushId: 1 << 63},
		&pb.PushResponse{Version: 8, Incarnation: 2, Tensors: []*pb.Tensor{{Name: "w", Block: 3, Data: big}, {Name: "z"}}},
		&pb.PushResponse{Version: 1},
		&pb.PullRequest{Job: "j", Slot: 1, Tensors: []*pb.Tensor{{Name: "w", Block: 2}}},
	}
	c := tensorCodec{}
	for _, m := range msgs {
		bs, err := c.Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		got := m.ProtoReflect().New().Interface()
		if err := proto.Unmarshal(bs.Materialize(), got); err != nil || !proto.Equal(got, m) {
			t.Fatalf("tensor->proto %T: %v\n%v\n%v", m, err, got, m)
		}
		wire, _ := proto.Marshal(m)
		// Split the wire bytes into small buffers, as gRPC frames would be.
		var slice mem.BufferSlice
		for i := 0; i < len(wire); i += 1000 {
			slice = append(slice, mem.SliceBuffer(wire[i:min(i+1000, len(wire))]))
		}
		got = m.ProtoReflect().New().Interface()
		if err := c.Unmarshal(slice, got); err != nil || !proto.Equal(got, m) {
			t.Fatalf("proto->tensor %T: %v", m, err)
		}
		// Truncations fail cleanly.
		for n := 1; n < len(wire); n += 97 {
			_ = c.Unmarshal(mem.BufferSlice{mem.SliceBuffer(wire[:n])}, m.ProtoReflect().New().Interface())
		}
	}
}

// TestLentReplyBuffers: whole-slot replies reuse pooled buffers, and a
// buffer goes back to the pool only after its reply is on the wire. Four
// trainers push and pull concurrently (async SGD, lr 2^-10, every gradient
// 1, zero init), so every reply of version v must hold exactly -v/1024 in
// every element: a buffer returned early and refilled for another reply
// would show another version's values. No lent entry may be left behind.
func TestLentReplyBuffers(t *testing.T) {
	const n = 3 * minPooled / 4 // float32s: a 192 KiB reply
	spec := &pb.JobSpec{Name: "j", Mode: pb.UpdateMode_UPDATE_MODE_ASYNC, NumPservers: 1,
		Optimizer: &pb.OptimizerSpec{Name: "sgd", LearningRate: 1.0 / 1024},
		Params:    []*pb.ParamSpec{{Name: "w", Shape: []int64{n}}}}
	addrs, _, _ := startServers(t, spec, 1)
	before := lentReturned.Load()
	const trainers, steps = 4, 50
	var wg sync.WaitGroup
	for i := range trainers {
		c, err := NewClient(spec, fmt.Sprint("t", i), resolverOf(addrs))
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		wg.Add(1)
		go func() {
			defer wg.Done()
			ones := make([]float32, n)
			for j := range ones {
				ones[j] = 1
			}
			dst := c.NewParams()
			for range steps {
				if err := c.PushPull(context.Background(), &Grads{Dense: map[string][]float32{"w": ones}, Examples: 1}, dst); err != nil {
					t.Error(err)
					return
				}
				want := -float32(c.Versions()[0]) / 1024
				for j, x := range dst["w"] {
					if x != want {
						t.Errorf("version %d: w[%d] = %g, want %g", c.Versions()[0], j, x, want)
						return
					}
				}
			}
		}()
	}
	wg.Wait()
	if got := lentReturned.Load() - before; got < trainers*steps/2 {
		t.Errorf("%d reply buffers returned to the pool after %d pushes with pull, want most of them", got, trainers*steps)
	}
	left := 0
	lent.Range(func(any, any) bool { left++; return true })
	if left != 0 {
		t.Errorf("%d lent buffers never taken back", left)
	}
}
