package pserver

import (
	"context"
	"math"
	"testing"

	pb "github.com/raftps/raftps/api/raftpspb"
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
