package pserver

import (
	"bytes"
	"context"
	"math"
	"math/rand/v2"
	"testing"

	pb "github.com/raftps/raftps/api/raftpspb"
)

// TestSyncSoloStepIsTheGradient: a sync step with one trainer applies that
// trainer's gradient as it is (syncStep.solo, no float64 weighted mean),
// which must be what the weighted mean gives: for every optimizer, a sync
// slot fed by one trainer ends byte-identical (values and optimizer state)
// to an async slot fed the same pushes, whatever the examples count. And
// the identity the shortcut rests on, float32(float64(g)·n·(1/n)) == g, holds
// bit for bit over gradients of every magnitude up to MaxGradient
// (subnormals and -0 included) and n up to MaxExamples.
func TestSyncSoloStepIsTheGradient(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	grad := func(n int) []float32 {
		g := make([]float32, n)
		for i := range g {
			switch i % 5 {
			case 0:
				g[i] = math.Float32frombits(r.Uint32N(1 << 23)) // subnormal
			case 1:
				g[i] = float32(math.Copysign(0, -1))
			default:
				g[i] = float32(r.NormFloat64() * math.Pow(10, float64(r.IntN(24)-12)))
			}
		}
		return g
	}
	ns := []int64{0, 1, 3, 7, 64, 1000, 12345, MaxExamples - 5, MaxExamples}
	for i := 0; i < 20000; i++ {
		g := grad(1)[0]
		n := ns[i%len(ns)]
		if n == 0 {
			n = 1
		}
		if got := float32(float64(g) * float64(n) * (1 / float64(n))); math.Float32bits(got) != math.Float32bits(g) {
			t.Fatalf("g=%g n=%d: the weighted mean is %g", g, n, got)
		}
	}
	for _, opt := range []string{"sgd", "momentum", "adam", "adagrad"} {
		t.Run(opt, func(t *testing.T) {
			spec := func(mode pb.UpdateMode) *pb.JobSpec {
				return &pb.JobSpec{Name: "job", Mode: mode, Seed: 1, DenseBlockSize: 16, NumVirtualShards: 4,
					Optimizer: &pb.OptimizerSpec{Name: opt, LearningRate: 0.01, Momentum: 0.9},
					Params:    []*pb.ParamSpec{{Name: "w", Shape: []int64{50}, Init: pb.Initializer_INIT_NORMAL}}}
			}
			sync, async := mustSlot(t, spec(pb.UpdateMode_UPDATE_MODE_SYNC), 0, 1), mustSlot(t, spec(pb.UpdateMode_UPDATE_MODE_ASYNC), 0, 1)
			sync.SetTrainers([]string{"t"})
			ctx := context.Background()
			for step, n := range ns {
				g := grad(50)
				if _, err := pushW(ctx, sync, "t", int64(step), g, n); err != nil {
					t.Fatalf("sync push %d: %v", step, err)
				}
				if _, err := pushW(ctx, async, "t", int64(step), g, n); err != nil {
					t.Fatalf("async push %d: %v", step, err)
				}
			}
			if a, b := snapshotBytes(t, sync), snapshotBytes(t, async); !bytes.Equal(a, b) {
				t.Fatalf("sync (one trainer) and async slots differ after the same pushes")
			}
		})
	}
}
