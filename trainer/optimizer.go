package trainer

import (
	"errors"
	"fmt"
	"math"

	pb "github.com/raftps/raftps/api/raftpspb"
	"github.com/raftps/raftps/trainer/model"
)

// ErrBadOptimizer: the OptimizerSpec names an unknown optimizer or has an
// out-of-range hyper-parameter.
var ErrBadOptimizer = errors.New("trainer: bad optimizer spec")

// Optimizer is a minimal in-process optimizer for TrainLocal and the test
// parameter server in trainertest. It is the reference for the update rules;
// a parameter server must apply the same ones. With g' = g + weight_decay·w,
// lr_t = learning_rate / (1 + lr_decay·t), t = number of updates applied so
// far (0 for the first):
//
//	sgd:      w -= lr_t·g'
//	momentum: v = μ·v + g';  w -= lr_t·v            (nesterov: w -= lr_t·(g' + μ·v))
//	adam:     m = β1·m + (1-β1)·g';  v = β2·v + (1-β2)·g'²;
//	          w -= lr_t·m̂ / (√v̂ + ε), m̂ = m/(1-β1^(t+1)), v̂ = v/(1-β2^(t+1))   (Kingma & Ba 2015, Alg. 1)
//	adagrad:  s += g'²;  w -= lr_t·g' / (√s + ε)    (Duchi et al. 2011)
//
// Defaults for zero fields: name "sgd", β1 0.9, β2 0.999, ε 1e-8. Embedding
// rows are updated lazily: only rows with a gradient move, and their slot
// state (v, m, s) is per row; Adam's bias correction uses the global t.
//
// An Optimizer is not safe for concurrent use.
type Optimizer struct {
	spec  *pb.OptimizerSpec
	t     int64
	c1    float64 // Adam bias corrections 1-β1^(t+1), 1-β2^(t+1) for the current update
	c2    float64
	slots map[string][2][]float64 // per parameter: first and second moment (or velocity / sum)
}

// NewOptimizer validates spec and returns an Optimizer with zero state.
func NewOptimizer(spec *pb.OptimizerSpec) (*Optimizer, error) {
	if spec == nil {
		return nil, fmt.Errorf("%w: nil OptimizerSpec", ErrBadOptimizer)
	}
	s := &pb.OptimizerSpec{
		Name: spec.GetName(), LearningRate: spec.GetLearningRate(), Momentum: spec.GetMomentum(),
		Nesterov: spec.GetNesterov(), Beta1: spec.GetBeta1(), Beta2: spec.GetBeta2(), Epsilon: spec.GetEpsilon(),
		WeightDecay: spec.GetWeightDecay(), LrDecay: spec.GetLrDecay(),
	}
	if s.Name == "" {
		s.Name = "sgd"
	}
	switch s.Name {
	case "sgd", "momentum", "adam", "adagrad":
	default:
		return nil, fmt.Errorf("%w: unknown optimizer %q (want sgd, momentum, adam or adagrad)", ErrBadOptimizer, s.Name)
	}
	if !(s.LearningRate > 0) {
		return nil, fmt.Errorf("%w: learning_rate %v must be > 0", ErrBadOptimizer, s.LearningRate)
	}
	if s.Beta1 == 0 {
		s.Beta1 = 0.9
	}
	if s.Beta2 == 0 {
		s.Beta2 = 0.999
	}
	if s.Epsilon == 0 {
		s.Epsilon = 1e-8
	}
	if s.Momentum < 0 || s.Momentum >= 1 || s.Beta1 >= 1 || s.Beta2 >= 1 || s.LrDecay < 0 || s.WeightDecay < 0 {
		return nil, fmt.Errorf("%w: momentum %v, beta1 %v, beta2 %v, lr_decay %v, weight_decay %v", ErrBadOptimizer,
			s.Momentum, s.Beta1, s.Beta2, s.LrDecay, s.WeightDecay)
	}
	return &Optimizer{spec: s, slots: map[string][2][]float64{}}, nil
}

// Steps returns the number of updates applied.
func (o *Optimizer) Steps() int64 { return o.t }

// Update applies one step of gradients g to p and advances t. Dense
// gradients must have their parameter's length; embedding parameters in p
// must be full tables (Rows.IDs = 0..rows-1, as model.InitParams makes
// them) and g.Sparse names rows of them.
func (o *Optimizer) Update(p model.Params, g model.Params) error {
	lr := o.spec.LearningRate / (1 + o.spec.LrDecay*float64(o.t))
	o.c1 = 1 - math.Pow(o.spec.Beta1, float64(o.t+1))
	o.c2 = 1 - math.Pow(o.spec.Beta2, float64(o.t+1))
	for name, gw := range g.Dense {
		w, ok := p.Dense[name]
		if !ok || len(w) != len(gw) {
			return fmt.Errorf("%w: gradient %q has %d values, parameter %d", model.ErrShape, name, len(gw), len(w))
		}
		st := o.slot(name, len(w))
		for i := range w {
			w[i] = o.apply(st, i, float64(w[i]), float64(gw[i]), lr)
		}
	}
	for name, gr := range g.Sparse {
		table, ok := p.Sparse[name]
		if !ok || len(table.IDs) == 0 {
			return fmt.Errorf("%w: embedding gradient %q has no table", model.ErrShape, name)
		}
		dim := len(table.Values) / len(table.IDs)
		if len(gr.Values) != len(gr.IDs)*dim {
			return fmt.Errorf("%w: embedding gradient %q has %d values for %d rows of dim %d", model.ErrShape, name, len(gr.Values), len(gr.IDs), dim)
		}
		st := o.slot(name, len(table.Values))
		for r, id := range gr.IDs {
			if id < 0 || int(id) >= len(table.IDs) {
				return fmt.Errorf("%w: embedding %q row %d of %d", model.ErrShape, name, id, len(table.IDs))
			}
			for j := 0; j < dim; j++ {
				i := int(id)*dim + j
				table.Values[i] = o.apply(st, i, float64(table.Values[i]), float64(gr.Values[r*dim+j]), lr)
			}
		}
	}
	o.t++
	return nil
}

func (o *Optimizer) slot(name string, n int) [2][]float64 {
	st, ok := o.slots[name]
	if !ok {
		switch o.spec.Name {
		case "momentum", "adagrad":
			st[0] = make([]float64, n)
		case "adam":
			st[0], st[1] = make([]float64, n), make([]float64, n)
		}
		o.slots[name] = st
	}
	return st
}

func (o *Optimizer) apply(st [2][]float64, i int, w, g, lr float64) float32 {
	s := o.spec
	g += s.WeightDecay * w
	switch s.Name {
	case "sgd":
		w -= lr * g
	case "momentum":
		v := s.Momentum*st[0][i] + g
		st[0][i] = v
		if s.Nesterov {
			w -= lr * (g + s.Momentum*v)
		} else {
			w -= lr * v
		}
	case "adam":
		m := s.Beta1*st[0][i] + (1-s.Beta1)*g
		v := s.Beta2*st[1][i] + (1-s.Beta2)*g*g
		st[0][i], st[1][i] = m, v
		w -= lr * (m / o.c1) / (math.Sqrt(v/o.c2) + s.Epsilon)
	case "adagrad":
		st[0][i] += g * g
		w -= lr * g / (math.Sqrt(st[0][i]) + s.Epsilon)
	}
	return float32(w)
}
