package trainer_test

import (
	"errors"
	"math"
	"testing"

	pb "github.com/raftps/raftps/api/raftpspb"
	"github.com/raftps/raftps/trainer"
	"github.com/raftps/raftps/trainer/model"
)

// TestOptimizerRules runs two updates of one weight w=1 with g=0.5 then
// g=-1 and compares with the formulas worked by hand.
func TestOptimizerRules(t *testing.T) {
	adam := func(lr float64) float64 {
		b1, b2, eps := 0.9, 0.999, 1e-8
		w, m, v := 1.0, 0.0, 0.0
		for i, g := range []float64{0.5, -1} {
			m = b1*m + (1-b1)*g
			v = b2*v + (1-b2)*g*g
			tt := float64(i + 1)
			w -= lr * (m / (1 - math.Pow(b1, tt))) / (math.Sqrt(v/(1-math.Pow(b2, tt))) + eps)
		}
		return w
	}
	for _, tc := range []struct {
		spec *pb.OptimizerSpec
		want float64
	}{
		{&pb.OptimizerSpec{Name: "sgd", LearningRate: 0.1}, 1 - 0.1*0.5 + 0.1},
		{&pb.OptimizerSpec{Name: "SGD", LearningRate: 0.1, LrDecay: 1}, 1 - 0.1*0.5 + 0.05},
		{&pb.OptimizerSpec{Name: "sgd", LearningRate: 0.1, WeightDecay: 0.1}, func() float64 {
			w := 1 - 0.1*(0.5+0.1)
			return w - 0.1*(-1+0.1*w)
		}()},
		// v1 = 0.5, v2 = 0.45 - 1 = -0.55; w = 1 - 0.05 + 0.055.
		{&pb.OptimizerSpec{Name: "momentum", LearningRate: 0.1, Momentum: 0.9}, 1 - 0.05 + 0.055},
		{&pb.OptimizerSpec{Name: "momentum", LearningRate: 0.1}, 1 - 0.05 + 0.055}, // μ defaults to 0.9
		{&pb.OptimizerSpec{Name: "momentum", LearningRate: 0.1, Momentum: 0.9, Nesterov: true}, 1 - 0.1*(0.5+0.45) - 0.1*(-1+0.9*-0.55)},
		{&pb.OptimizerSpec{Name: "adam", LearningRate: 0.01}, adam(0.01)},
		{&pb.OptimizerSpec{Name: "adagrad", LearningRate: 0.1}, 1 - 0.1*0.5/math.Sqrt(0.25) + 0.1*1/math.Sqrt(1.25)},
	} {
		o, err := trainer.NewOptimizer(tc.spec)
		if err != nil {
			t.Fatal(err)
		}
		p := model.Params{Dense: map[string][]float32{"w": {1}}}
		for _, g := range []float32{0.5, -1} {
			if err := o.Update(p, model.Params{Dense: map[string][]float32{"w": {g}}}); err != nil {
				t.Fatal(err)
			}
		}
		if got := float64(p.Dense["w"][0]); math.Abs(got-tc.want) > 1e-6 {
			t.Errorf("%v: w = %.7f, want %.7f", tc.spec, got, tc.want)
		}
	}
}

func TestOptimizerRowsAreLazy(t *testing.T) {
	o, err := trainer.NewOptimizer(&pb.OptimizerSpec{Name: "adam", LearningRate: 0.1})
	if err != nil {
		t.Fatal(err)
	}
	table := model.Rows{IDs: []int64{0, 1, 2}, Values: []float32{1, 1, 2, 2, 3, 3}}
	p := model.Params{Sparse: map[string]model.Rows{"emb": table}}
	g := model.Params{Sparse: map[string]model.Rows{"emb": {IDs: []int64{2}, Values: []float32{1, -1}}}}
	if err := o.Update(p, g); err != nil {
		t.Fatal(err)
	}
	// Adam's first step moves each touched element by lr·sign(g).
	want := []float32{1, 1, 2, 2, 2.9, 3.1}
	for i := range want {
		if math.Abs(float64(table.Values[i]-want[i])) > 1e-6 {
			t.Fatalf("table = %v, want %v", table.Values, want)
		}
	}
	bad := model.Params{Sparse: map[string]model.Rows{"emb": {IDs: []int64{3}, Values: []float32{1, 1}}}}
	if err := o.Update(p, bad); !errors.Is(err, model.ErrShape) {
		t.Errorf("row out of range: err %v", err)
	}
}

func TestOptimizerSpecErrors(t *testing.T) {
	for _, s := range []*pb.OptimizerSpec{
		{Name: "rmsprop"},
		{Name: "sgd", LearningRate: -1},
		{Name: "momentum", Momentum: 1.5},
		{Name: "adam", Beta1: 1},
	} {
		if _, err := trainer.NewOptimizer(s); !errors.Is(err, trainer.ErrBadOptimizer) {
			t.Errorf("%v: err %v, want ErrBadOptimizer", s, err)
		}
	}
	if _, err := trainer.NewOptimizer(nil); err != nil {
		t.Errorf("nil spec (all defaults): %v", err)
	}
}
