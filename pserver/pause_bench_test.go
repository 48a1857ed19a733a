package pserver

import (
	"context"
	"flag"
	"slices"
	"testing"
	"time"

	pb "github.com/raftps/raftps/api/raftpspb"
	"github.com/raftps/raftps/pserver/wire"
)

var pauseParams = flag.Int64("pause.params", 100_000_000, "parameters of BenchmarkCheckpointPause")

// BenchmarkCheckpointPause measures, on a slot of -pause.params float32
// parameters with Adam (values + 2 moments = 3 x 4 bytes per parameter),
// how long a step-exact checkpoint (SnapshotEvery) stops updates, against
// the time of one sync step's update of the same slot (Push of a full
// gradient by the only trainer).
//
// Each iteration runs, interleaved: a plain step (no checkpoint); a step
// whose completion takes a checkpoint; and the step right after it, which
// races the copier. The pause is what updates wait for because of the
// checkpoint: the time the hook held the slot lock (the freeze) plus the
// time the next step spent copying entries the copier had not reached
// (ownLocked). Metrics: pause/step (largest pause over the median plain
// step), pause/step-median, and next/plain (the step after a checkpoint
// over the plain step before it, median: what the copier's CPU and memory
// traffic cost training on this machine).
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
		grads = append(grads, &pb.Tensor{Name: "w", Block: blk, Data: wire.Float32Bytes(g)})
	}
	step := int64(0)
	push := func() time.Duration {
		t0 := time.Now()
		if _, err := s.Push(context.Background(), &pb.PushRequest{Job: "pause", Trainer: "t", Version: s.Version(), Step: step, Grads: grads, Examples: 1}); err != nil {
			b.Fatal(err)
		}
		step++
		return time.Since(t0)
	}
	push() // allocate optimizer state
	snaps := make(chan *SlotSnapshot, 1)
	b.ResetTimer()
	var plain, pauses, next []time.Duration
	for i := 0; i < b.N; i++ {
		s.SnapshotEvery(0, nil)
		plain = append(plain, push())
		s.SnapshotEvery(1, func(snap *SlotSnapshot) { snaps <- snap })
		f0, c0 := s.freezeNanos.Load(), s.cowNanos.Load()
		push() // its completion freezes the slot
		s.SnapshotEvery(0, nil)
		tn := push() // races the copier
		snap := <-snaps
		if snap.Step != step-1 || len(snap.VShards) == 0 {
			b.Fatalf("snapshot of step %d, want %d", snap.Step, step-1)
		}
		snap.Release()
		pauses = append(pauses, time.Duration(s.freezeNanos.Load()-f0+s.cowNanos.Load()-c0))
		next = append(next, tn)
	}
	b.StopTimer()
	med := func(d []time.Duration) time.Duration { d = slices.Clone(d); slices.Sort(d); return d[len(d)/2] }
	ratios := make([]time.Duration, len(next))
	for i := range next {
		ratios[i] = next[i] * 1000 / plain[i]
	}
	stepT := med(plain)
	b.ReportMetric(float64(slices.Max(pauses).Microseconds())/1000, "max-pause-ms")
	b.ReportMetric(stepT.Seconds()*1000, "step-ms")
	b.ReportMetric(slices.Max(pauses).Seconds()/stepT.Seconds(), "pause/step")
	b.ReportMetric(med(pauses).Seconds()/stepT.Seconds(), "pause/step-median")
	b.ReportMetric(float64(med(ratios))/1000, "next/plain")
}
