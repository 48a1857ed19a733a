package pserver

import (
	"bytes"
	"context"
	"math"
	"math/rand/v2"
	"slices"
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

// TestMomentumCommitExact: momentum's commit32 (passes of gonum's BLAS
// over blocks) stores bit for bit what its sequence gives per element in
// float32 (every product and sum rounded), classical and Nesterov, with
// and without weight decay, over a length that is not a multiple of the
// block; with the maximum it returns the largest stored |value| or |state|
// exactly, without it -1, and both store the same bits. The result stays
// within float32 rounding of the float64 formula.
func TestMomentumCommitExact(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	for _, nesterov := range []bool{false, true} {
		for _, wd := range []float64{0, 0.01} {
			m := momentum{mu: 0.9, nesterov: nesterov}
			n := 3*commitBlock + 7
			v, w, g := make([]float32, n), make([]float32, n), make([]float32, n)
			for i := range g {
				v[i] = float32(r.NormFloat64() * math.Pow(10, float64(r.IntN(12)-8)))
				w[i] = float32(r.NormFloat64())
				g[i] = float32(r.NormFloat64() * math.Pow(10, float64(r.IntN(12)-8)))
			}
			const lr = 0.05
			mu, wd32, lr32 := float32(m.mu), float32(wd), float32(lr)
			wantV, wantW := make([]float32, n), make([]float32, n)
			var wantMax float32
			for i, gi := range g {
				// The explicit conversions round each product (no fused
				// multiply-add), as the BLAS passes do.
				tt, wi := gi, w[i]
				if wd != 0 {
					tt += float32(wd32 * wi)
				}
				if nesterov {
					wi += float32(-lr32 * tt)
				}
				vi := tt + float32(mu*v[i])
				if nesterov {
					wi += float32(-lr32 * mu * vi)
				} else {
					wi += float32(-lr32 * vi)
				}
				wantV[i], wantW[i] = vi, wi
				wantMax = max(wantMax, float32(math.Abs(float64(vi))), float32(math.Abs(float64(wi))))
				// float64 formula: within a few roundings of the terms
				w64, g64 := float64(w[i]), float64(gi)+wd*float64(w[i])
				v64 := m.mu*float64(v[i]) + g64
				n64 := w64 - lr*v64
				if nesterov {
					n64 = w64 - lr*(g64+m.mu*v64)
				}
				scale := math.Abs(w64) + lr*(math.Abs(g64)+2*math.Abs(v64)) + math.Abs(float64(v[i])) + math.Abs(float64(gi))
				if math.Abs(float64(vi)-v64) > 3e-7*scale || math.Abs(float64(wi)-n64) > 3e-7*scale {
					t.Fatalf("nesterov=%v wd=%v element %d: v=%g w=%g, float64 formula v=%g w=%g", nesterov, wd, i, vi, wi, v64, n64)
				}
			}
			v2, w2 := slices.Clone(v), slices.Clone(w)
			if got := m.commit32(v2, w2, g, wd, lr, false); got != -1 {
				t.Fatalf("commit32 without the maximum returned %g, want -1", got)
			}
			got := m.commit32(v, w, g, wd, lr, true)
			for i := range g {
				if math.Float32bits(v[i]) != math.Float32bits(wantV[i]) || math.Float32bits(w[i]) != math.Float32bits(wantW[i]) {
					t.Fatalf("nesterov=%v wd=%v element %d: stored v=%g w=%g, sequence v=%g w=%g", nesterov, wd, i, v[i], w[i], wantV[i], wantW[i])
				}
			}
			if !slices.Equal(v, v2) || !slices.Equal(w, w2) {
				t.Fatalf("nesterov=%v wd=%v: commit32 stores different values with and without the maximum", nesterov, wd)
			}
			if got != float64(wantMax) {
				t.Fatalf("nesterov=%v wd=%v: commit32 returned max %g, stored max %g", nesterov, wd, got, wantMax)
			}
		}
	}
}
