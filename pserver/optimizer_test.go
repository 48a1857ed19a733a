package pserver

import (
	"context"
	"errors"
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"google.golang.org/protobuf/proto"

	pb "github.com/raftps/raftps/api/raftpspb"
	"github.com/raftps/raftps/pserver/optim"
	"github.com/raftps/raftps/pserver/wire"
)

// refOpt is a float64 reference of one optimizer, hand-coded from the papers.
type refOpt struct {
	opt       *pb.OptimizerSpec
	m, v      []float64
	t         int
	lr, decay float64
}

func (r *refOpt) step(w, g []float64) {
	o := r.opt
	if r.m == nil {
		r.m, r.v = make([]float64, len(w)), make([]float64, len(w))
	}
	lr := o.LearningRate / (1 + o.LrDecay*float64(r.t))
	r.t++
	for i := range w {
		gi := g[i] + o.WeightDecay*w[i]
		switch o.Name {
		case "sgd":
			w[i] -= lr * gi
		case "momentum":
			r.m[i] = o.Momentum*r.m[i] + gi
			if o.Nesterov {
				w[i] -= lr * (gi + o.Momentum*r.m[i])
			} else {
				w[i] -= lr * r.m[i]
			}
		case "adam":
			r.m[i] = o.Beta1*r.m[i] + (1-o.Beta1)*gi
			r.v[i] = o.Beta2*r.v[i] + (1-o.Beta2)*gi*gi
			mh := r.m[i] / (1 - math.Pow(o.Beta1, float64(r.t)))
			vh := r.v[i] / (1 - math.Pow(o.Beta2, float64(r.t)))
			w[i] -= lr * mh / (math.Sqrt(vh) + o.Epsilon)
		case "adagrad":
			r.v[i] += gi * gi
			w[i] -= lr * gi / (math.Sqrt(r.v[i]) + o.Epsilon)
		}
	}
}

func TestOptimizersMatchReference(t *testing.T) {
	cases := []*pb.OptimizerSpec{
		{Name: "sgd", LearningRate: 0.1},
		{Name: "sgd", LearningRate: 0.1, WeightDecay: 0.01, LrDecay: 0.5},
		{Name: "momentum", LearningRate: 0.05, Momentum: 0.9},
		{Name: "momentum", LearningRate: 0.05, Momentum: 0.8, Nesterov: true, WeightDecay: 0.1},
		{Name: "adam", LearningRate: 0.01, Beta1: 0.9, Beta2: 0.999, Epsilon: 1e-8},
		{Name: "adam", LearningRate: 0.01, Beta1: 0.8, Beta2: 0.99, Epsilon: 1e-6, WeightDecay: 0.01, LrDecay: 0.1},
		{Name: "adagrad", LearningRate: 0.1, Epsilon: 1e-10},
	}
	for _, oc := range cases {
		t.Run(oc.Name, func(t *testing.T) {
			spec := &pb.JobSpec{Name: "j", Mode: pb.UpdateMode_UPDATE_MODE_ASYNC, Optimizer: oc, Seed: 7, DenseBlockSize: 3,
				Params: []*pb.ParamSpec{{Name: "w", Shape: []int64{7}, Init: pb.Initializer_INIT_UNIFORM, Scale: 0.5}}}
			s := mustSlot(t, spec, 0, 1)
			w32 := pullAll(t, s)["w"]
			w := make([]float64, len(w32))
			for i, v := range w32 {
				w[i] = float64(v)
			}
			ref := &refOpt{opt: oc}
			for k := range 6 {
				g := make([]float32, 7)
				g64 := make([]float64, 7)
				for i := range g {
					g[i] = float32(math.Sin(float64(3*k+i))) * 0.7
					g64[i] = float64(g[i])
				}
				if _, err := s.Push(context.Background(), &pb.PushRequest{Version: s.Version(), Grads: denseTensors(s.Layout(), 0, map[string][]float32{"w": g})}); err != nil {
					t.Fatal(err)
				}
				ref.step(w, g64)
			}
			got := pullAll(t, s)["w"]
			for i := range w {
				if d := math.Abs(float64(got[i]) - w[i]); d > 1e-5 {
					t.Errorf("w[%d] = %v, reference %v (|d| = %g)", i, got[i], w[i], d)
				}
			}
		})
	}
}

// TestOptimizerBoundsHold: the magnitude bound that lets an update skip
// its dry run is never below what the update actually produces (random
// values, state, gradients and learning rates over many magnitudes).
func TestOptimizerBoundsHold(t *testing.T) {
	specs := []*pb.OptimizerSpec{
		{Name: "sgd", WeightDecay: 0.5},
		{Name: "momentum", Momentum: 0.99, WeightDecay: 0.1},
		{Name: "momentum", Momentum: 0.5, Nesterov: true},
		{Name: "adam", WeightDecay: 0.01},
		{Name: "adam", Beta1: 0.5, Beta2: 0.5, Epsilon: 1e-3},
		{Name: "adagrad", WeightDecay: 1},
	}
	r := rand.New(rand.NewPCG(1, 2))
	for _, os := range specs {
		for trial := range 500 {
			o := proto.Clone(os).(*pb.OptimizerSpec)
			o.LearningRate = math.Pow(10, r.Float64()*12-9)
			c, err := optim.New(o)
			if err != nil {
				t.Fatal(err)
			}
			const n = 16
			scale := math.Pow(10, r.Float64()*20-5)
			gscale := math.Pow(10, r.Float64()*12)
			e := newEntry(n, len(c.StateSlots()))
			e.t = int64(r.IntN(1000))
			g := make([]float32, n)
			for i := range n {
				e.values[i] = float32((2*r.Float64() - 1) * scale)
				g[i] = float32((2*r.Float64() - 1) * gscale)
				for j, name := range c.StateSlots() {
					v := (2*r.Float64() - 1) * scale
					if name == "v" || name == "accumulator" {
						v = math.Abs(v)
					}
					e.state[j][i] = float32(v)
				}
			}
			gmax := 0.0
			for _, x := range g {
				gmax = max(gmax, math.Abs(float64(x)))
			}
			h := c.Schedule(e.t, 1)
			b := c.Bound(e.magnitude(), gmax, h)
			if b < optim.SafeBound && !(c.UpdateBound(e.magnitude(), g, -1, MaxGradient, h) < optim.SafeBound) {
				t.Fatalf("%s trial %d: bound %g < optim.SafeBound with max|g|, refused with max|g| not given", o.Name, trial, b)
			}
			ok, amax := c.Apply(e.values, e.state, 0, g, h, optim.Store)
			if !ok {
				continue // out of float32 range: refused, nothing to bound
			}
			e.committed(amax)
			got := optim.MaxAbs(e.values)
			for _, st := range e.state {
				got = max(got, optim.MaxAbs(st))
			}
			// Stored values are rounded to float32: allow its rounding
			// (the production margin, optim.SafeBound, is 2^64).
			if got > b*(1+1e-6) || got > e.amax || e.amax > b*(1+2e-6) {
				t.Fatalf("%s trial %d: produced %g, tracked %g, bound %g", o.Name, trial, got, e.amax, b)
			}
		}
	}
}

// TestTrackedMagnitudeHolds: through real pushes, the magnitude bound each
// entry keeps (exact every exactMaxEvery updates, the update's bound in
// between: stepStoreFast) is never below the largest |value| or |state|
// stored, with gradients from 1e-8 to MaxGradient and learning rates up
// to 1e3, classical and Nesterov momentum with weight decay, and Adam.
func TestTrackedMagnitudeHolds(t *testing.T) {
	specs := []*pb.OptimizerSpec{
		{Name: "momentum", LearningRate: 0.05, Momentum: 0.9},
		{Name: "momentum", LearningRate: 1e3, Momentum: 0.99, Nesterov: true, WeightDecay: 0.1},
		{Name: "adam", LearningRate: 0.01},
	}
	r := rand.New(rand.NewPCG(5, 6))
	for _, oc := range specs {
		spec := &pb.JobSpec{Name: "j", Mode: pb.UpdateMode_UPDATE_MODE_ASYNC, Optimizer: oc, Seed: 7, DenseBlockSize: 3000,
			Params: []*pb.ParamSpec{{Name: "w", Shape: []int64{2*chunkElems + 11}, Init: pb.Initializer_INIT_NORMAL}}}
		s := mustSlot(t, spec, 0, 1)
		n := int(spec.Params[0].Shape[0])
		refused := 0
		for step := range 3 * exactMaxEvery {
			g := make([]float32, n)
			scale := math.Pow(10, r.Float64()*20-8)
			for i := range g {
				g[i] = float32(min(max((2*r.Float64()-1)*scale, -MaxGradient), MaxGradient))
			}
			if _, err := s.Push(context.Background(), &pb.PushRequest{Version: s.Version(), Grads: denseTensors(s.Layout(), 0, map[string][]float32{"w": g})}); err != nil {
				refused++ // out of float32's range: refused whole, checked elsewhere
			}
			for k, e := range s.dense {
				got := optim.MaxAbs(e.values)
				for _, st := range e.state {
					got = max(got, optim.MaxAbs(st))
				}
				if math.IsInf(got, 1) || got > e.magnitude() {
					t.Fatalf("%s step %d entry %v: stored max %g, tracked %g", oc.Name, step, k, got, e.magnitude())
				}
			}
		}
		if refused == 3*exactMaxEvery {
			t.Fatalf("%s: every push refused; the test checked nothing", oc.Name)
		}
	}
}

// TestMomentumBeyondFloat32Coefficients: a learning rate past float32's
// range (finite in float64, so the spec is valid) takes momentum's float64
// loop (step64): updates that fit are applied, and one that would leave
// float32 is refused whole, the slot unchanged.
func TestMomentumBeyondFloat32Coefficients(t *testing.T) {
	spec := &pb.JobSpec{Name: "j", Mode: pb.UpdateMode_UPDATE_MODE_ASYNC, Seed: 7,
		Optimizer: &pb.OptimizerSpec{Name: "momentum", LearningRate: 1e39, Momentum: 0.9},
		Params:    []*pb.ParamSpec{{Name: "w", Shape: []int64{5}, Init: pb.Initializer_INIT_UNIFORM, Scale: 0.5}}}
	s := mustSlot(t, spec, 0, 1)
	push := func(g float32) error {
		gs := make([]float32, 5)
		for i := range gs {
			gs[i] = g
		}
		_, err := s.Push(context.Background(), &pb.PushRequest{Version: s.Version(), Grads: denseTensors(s.Layout(), 0, map[string][]float32{"w": gs})})
		return err
	}
	w0 := pullAll(t, s)["w"]
	if err := push(0); err != nil {
		t.Fatalf("zero gradient: %v", err)
	}
	if err := push(1e-30); err != nil { // v = 1e-30, w -= 1e9
		t.Fatalf("gradient 1e-30: %v", err)
	}
	w := pullAll(t, s)["w"]
	for i := range w {
		if d := float64(w0[i]) - float64(w[i]); math.Abs(d-1e9) > 1e3 {
			t.Fatalf("w[%d] moved by %g, want 1e9", i, d)
		}
	}
	if err := push(1); !errors.Is(err, wire.ErrInvalid) { // w -= 1e39: past float32
		t.Fatalf("gradient 1 with lr 1e39: %v, want wire.ErrInvalid", err)
	}
	if got := pullAll(t, s)["w"]; !slices.Equal(got, w) {
		t.Fatalf("refused push changed w: %v, was %v", got, w)
	}
}
