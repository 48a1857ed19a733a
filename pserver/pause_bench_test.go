package pserver

import (
	"context"
	"flag"
	"testing"
	"time"

	pb "github.com/raftps/raftps/api/raftpspb"
)

var pauseParams = flag.Int64("pause.params", 100_000_000, "parameters of BenchmarkCheckpointPause")

// BenchmarkCheckpointPause measures, on a slot of -pause.params float32
// parameters with Adam (values + 2 moments = 3 x 4 bytes per parameter),
// the longest time a checkpoint stops updates (the memory copy Snapshot
// makes under the slot lock; pulls are not stopped at all) against the time of one sync step's update of the same slot
// (Push of a full gradient by the only trainer), and reports their ratio.
func BenchmarkCheckpointPause(b *testing.B) {
	n := *pauseParams
	spec := &pb.JobSpec{Name: "pause", NumPservers: 1, NumVirtualShards: 64, DenseBlockSize: 1 << 20,
		Mode:      pb.UpdateMode_UPDATE_MODE_SYNC,
		Optimizer: &pb.OptimizerSpec{Name: "adam", LearningRate: 0.001, Beta1: 0.9, Beta2: 0.999, Epsilon: 1e-8},
		Params:    []*pb.ParamSpec{{Name: "w", Shape: []int64{n}, Init: pb.Initializer_INIT_ZEROS}}}
	s, err := NewSlot(spec, 0, 1)
	if err != nil {
		b.Fatal(err)
	}
	s.SetTrainers([]string{"t"})
	l := s.Layout()
	p, _ := l.Param("w")
	grads := make([]*pb.Tensor, 0, p.Blocks)
	for blk := int64(0); blk < p.Blocks; blk++ {
		lo, hi := l.BlockRange(p, blk)
		g := make([]float32, hi-lo)
		for i := range g {
			g[i] = 0.01
		}
		grads = append(grads, &pb.Tensor{Name: "w", Block: blk, Data: float32Bytes(g)})
	}
	push := func(step int64) time.Duration {
		t0 := time.Now()
		if _, err := s.Push(context.Background(), &pb.PushRequest{Job: "pause", Trainer: "t", Version: s.Version(), Step: step, Grads: grads, Examples: 1}); err != nil {
			b.Fatal(err)
		}
		return time.Since(t0)
	}
	push(0) // allocate optimizer state
	b.ResetTimer()
	var maxPause, sumStep time.Duration
	for i := 0; i < b.N; i++ {
		sumStep += push(int64(i + 1))
		// The pause is exactly what Snapshot holds the lock for: the copy.
		snap := s.newSnapshot()
		s.mu.RLock()
		t0 := time.Now()
		s.copyLocked(snap)
		d := time.Since(t0)
		s.mu.RUnlock()
		s.finishSnapshot(snap)
		if d > maxPause {
			maxPause = d
		}
		if len(snap.VShards) == 0 {
			b.Fatal("empty snapshot")
		}
	}
	step := sumStep / time.Duration(b.N)
	b.ReportMetric(maxPause.Seconds()*1000, "max-pause-ms")
	b.ReportMetric(step.Seconds()*1000, "step-ms")
	b.ReportMetric(maxPause.Seconds()/step.Seconds(), "pause/step")
}
