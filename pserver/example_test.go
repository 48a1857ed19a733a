package pserver_test

import (
	"context"
	"encoding/binary"
	"fmt"
	"math"

	pb "github.com/raftps/raftps/api/raftpspb"
	"github.com/raftps/raftps/pserver"
)

func f32(b []byte) []float32 {
	out := make([]float32, len(b)/4)
	for i := range out {
		out[i] = math.Float32frombits(binary.LittleEndian.Uint32(b[4*i:]))
	}
	return out
}

func packed(f ...float32) []byte {
	b := make([]byte, 4*len(f))
	for i, v := range f {
		binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(v))
	}
	return b
}

// Two trainers, one sync step: the update uses the example-weighted average
// gradient, (1·2 + 3·6)/4 = 5, times the learning rate 0.1.
func ExampleSlot_Push() {
	spec := &pb.JobSpec{
		Name:      "demo",
		Mode:      pb.UpdateMode_UPDATE_MODE_SYNC,
		Optimizer: &pb.OptimizerSpec{Name: "sgd", LearningRate: 0.1},
		Params:    []*pb.ParamSpec{{Name: "w", Shape: []int64{2}}},
	}
	s, err := pserver.NewSlot(spec, 0, 1)
	if err != nil {
		panic(err)
	}
	s.SetTrainers([]string{"a", "b"})
	ctx := context.Background()
	done := make(chan struct{})
	go func() {
		defer close(done)
		s.Push(ctx, &pb.PushRequest{Trainer: "a", Step: 0, Examples: 1,
			Grads: []*pb.Tensor{{Name: "w", Block: 0, Data: packed(2, 2)}}})
	}()
	resp, err := s.Push(ctx, &pb.PushRequest{Trainer: "b", Step: 0, Examples: 3,
		Grads: []*pb.Tensor{{Name: "w", Block: 0, Data: packed(6, 6)}}})
	if err != nil {
		panic(err)
	}
	<-done
	pull, _ := s.Pull(ctx, &pb.PullRequest{})
	fmt.Println("version", resp.Version, "w", f32(pull.Tensors[0].Data))
	// Output: version 1 w [-0.5 -0.5]
}
