package optim

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"
)

// maxGradient is pserver.MaxGradient, the bound on every pushed gradient
// element (this package does not import the server).
const maxGradient = 1e12

// TestMomentumCheck32Sound: wherever momentum's dry run (check32) lets an
// update through, commit32 stores only finite values, for values, state
// and gradients near float32's limit and huge learning rates; and it does
// let through the updates whose every term is far inside the range.
func TestMomentumCheck32Sound(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 8))
	passed := 0
	for trial := range 2000 {
		m := momentum{mu: 0.5 + 0.49*r.Float64(), nesterov: trial%2 == 1}
		wd, lr := 0.0, math.Pow(10, r.Float64()*40-10)
		if trial%3 == 0 {
			wd = r.Float64()
		}
		const n = 8
		v, w, g := make([]float32, n), make([]float32, n), make([]float32, n)
		scale := math.Pow(10, r.Float64()*38)
		for i := range n {
			v[i] = float32((2*r.Float64() - 1) * scale)
			w[i] = float32((2*r.Float64() - 1) * scale)
			g[i] = float32((2*r.Float64() - 1) * min(scale, maxGradient))
		}
		if !m.float32OK(wd, lr) {
			continue
		}
		if !m.check32(v, w, g, wd, lr) {
			continue
		}
		passed++
		m.commit32(v, w, g, wd, lr, false)
		if !AllFinite(v) || !AllFinite(w) {
			t.Fatalf("trial %d (mu %g nesterov %v wd %g lr %g scale %g): check32 passed, commit32 stored v=%v w=%v", trial, m.mu, m.nesterov, wd, lr, scale, v, w)
		}
	}
	if passed < 200 {
		t.Fatalf("only %d of 2000 trials passed check32; the test checked too little", passed)
	}
	m := momentum{mu: 0.9}
	if !m.check32([]float32{1e30}, []float32{-1e30}, []float32{1e12}, 0.1, 1) {
		t.Fatal("check32 refused an update far inside float32's range")
	}
}

// TestMomentumBeyondFloat32Coefficients: a learning rate past float32's
// range (finite in float64, so the spec is valid) takes momentum's float64
// loop (step64), not the float32 passes. The slot's side (updates that fit
// are applied, one that would leave float32 is refused whole) is
// pserver's test of the same name.
func TestMomentumBeyondFloat32Coefficients(t *testing.T) {
	if (momentum{mu: 0.9}).float32OK(0, 1e39) {
		t.Fatal("float32OK accepts a learning rate of 1e39")
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
