package trainer

import (
	"errors"
	"fmt"
	"math"
	"strings"

	pb "github.com/raftps/raftps/api/raftpspb"
	"github.com/raftps/raftps/trainer/model"
)

// ErrBadOptimizer: the OptimizerSpec names an unknown optimizer or has an
// out-of-range hyper-parameter.
var ErrBadOptimizer = errors.New("trainer: bad optimizer spec")

// Optimizer is a minimal in-process optimizer for TrainLocal and the test
// parameter server in trainertest. Its update rules, defaults and schedule
// are those of the pservers (pserver/optim), so that TrainLocal is a
// faithful reference (it computes in float64 per element; the pservers'
// momentum computes in float32, so the two agree to float32 rounding, not
// bit for bit). With g' = g + weight_decay·w, t = updates already
// applied to the entry (a dense tensor, or one embedding row) and
// lr_t = learning_rate / (1 + lr_decay·t):
//
//	sgd:      w -= lr_t·g'
//	momentum: v = μ·v + g';  w -= lr_t·v            (nesterov: w -= lr_t·(g' + μ·v))
//	adam:     m = β1·m + (1-β1)·g';  v = β2·v + (1-β2)·g'²;
//	          w -= lr_t·m̂ / (√v̂ + ε), m̂ = m/(1-β1^(t+1)), v̂ = v/(1-β2^(t+1))   (Kingma & Ba 2015, Alg. 1)
//	adagrad:  s += g'²;  w -= lr_t·g' / (√s + ε)    (Duchi et al. 2011)
//
// Defaults for zero fields, as in the pservers: name "sgd", learning_rate
// 0.01, momentum 0.9 (for "momentum"), β1 0.9, β2 0.999, ε 1e-8 (adam) or
// 1e-10 (adagrad). Embedding rows are updated lazily: only rows with a
// gradient move, and each row has its own t and slot state.
//
// An Optimizer is not safe for concurrent use.
type Optimizer struct {
	spec  *pb.OptimizerSpec
	steps int64
	slots map[string]*slot
}

// slot is the state of one parameter: moments (velocity, m and v, or the
// Adagrad sum) and the update count t, per tensor (dense) or per row.
type slot struct {
	s0, s1 []float64
	t      []int64
}

// NewOptimizer validates spec and returns an Optimizer with zero state.
func NewOptimizer(spec *pb.OptimizerSpec) (*Optimizer, error) {
	if spec == nil {
		spec = &pb.OptimizerSpec{}
	}
	s := &pb.OptimizerSpec{
		Name: strings.ToLower(spec.GetName()), LearningRate: spec.GetLearningRate(), Momentum: spec.GetMomentum(),
		Nesterov: spec.GetNesterov(), Beta1: spec.GetBeta1(), Beta2: spec.GetBeta2(), Epsilon: spec.GetEpsilon(),
		WeightDecay: spec.GetWeightDecay(), LrDecay: spec.GetLrDecay(),
	}
	switch s.Name {
	case "":
		s.Name = "sgd"
	case "sgd", "adam":
	case "momentum":
		if s.Momentum == 0 {
			s.Momentum = 0.9
		}
	case "adagrad":
		if s.Epsilon == 0 {
			s.Epsilon = 1e-10
		}
	default:
		return nil, fmt.Errorf("%w: unknown optimizer %q (want sgd, momentum, adam or adagrad)", ErrBadOptimizer, spec.GetName())
	}
	if s.LearningRate == 0 {
		s.LearningRate = 0.01
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
	if !(s.LearningRate > 0) || s.Momentum < 0 || s.Momentum >= 1 || s.Beta1 >= 1 || s.Beta2 >= 1 || s.LrDecay < 0 || s.WeightDecay < 0 {
		return nil, fmt.Errorf("%w: learning_rate %v, momentum %v, beta1 %v, beta2 %v, lr_decay %v, weight_decay %v", ErrBadOptimizer,
			s.LearningRate, s.Momentum, s.Beta1, s.Beta2, s.LrDecay, s.WeightDecay)
	}
	return &Optimizer{spec: s, slots: map[string]*slot{}}, nil
}

// Steps returns the number of Update calls.
func (o *Optimizer) Steps() int64 { return o.steps }

// Update applies one step of gradients g to p. Dense gradients must have
// their parameter's length; embedding parameters in p must be full tables
// (Rows.IDs = 0..rows-1, as model.InitParams makes them) and g.Sparse names
// rows of them (distinct ids).
func (o *Optimizer) Update(p model.Params, g model.Params) error {
	for name, gw := range g.Dense {
		w, ok := p.Dense[name]
		if !ok || len(w) != len(gw) {
			return fmt.Errorf("%w: gradient %q has %d values, parameter %d", model.ErrShape, name, len(gw), len(w))
		}
		st := o.slot(name, len(w), 1)
		o.apply(st, 0, w, gw, 0)
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
		st := o.slot(name, len(table.Values), len(table.IDs))
		for r, id := range gr.IDs {
			if id < 0 || int(id) >= len(table.IDs) {
				return fmt.Errorf("%w: embedding %q row %d of %d", model.ErrShape, name, id, len(table.IDs))
			}
			off := int(id) * dim
			o.apply(st, int(id), table.Values[off:off+dim], gr.Values[r*dim:(r+1)*dim], off)
		}
	}
	o.steps++
	return nil
}

func (o *Optimizer) slot(name string, n, entries int) *slot {
	st, ok := o.slots[name]
	if !ok {
		st = &slot{t: make([]int64, entries)}
		switch o.spec.Name {
		case "momentum", "adagrad":
			st.s0 = make([]float64, n)
		case "adam":
			st.s0, st.s1 = make([]float64, n), make([]float64, n)
		}
		o.slots[name] = st
	}
	return st
}

// apply updates entry e (values w, gradient g, state at offset off).
func (o *Optimizer) apply(st *slot, e int, w, g []float32, off int) {
	s := o.spec
	t := st.t[e]
	st.t[e]++
	lr := s.LearningRate / (1 + s.LrDecay*float64(t))
	var c1, c2 float64
	if s.Name == "adam" {
		c1 = 1 - math.Pow(s.Beta1, float64(t+1))
		c2 = 1 - math.Pow(s.Beta2, float64(t+1))
	}
	for i := range w {
		wi, gi := float64(w[i]), float64(g[i])
		gi += s.WeightDecay * wi
		k := off + i
		switch s.Name {
		case "sgd":
			wi -= lr * gi
		case "momentum":
			v := s.Momentum*st.s0[k] + gi
			st.s0[k] = v
			if s.Nesterov {
				wi -= lr * (gi + s.Momentum*v)
			} else {
				wi -= lr * v
			}
		case "adam":
			m := s.Beta1*st.s0[k] + (1-s.Beta1)*gi
			v := s.Beta2*st.s1[k] + (1-s.Beta2)*gi*gi
			st.s0[k], st.s1[k] = m, v
			wi -= lr * (m / c1) / (math.Sqrt(v/c2) + s.Epsilon)
		case "adagrad":
			st.s0[k] += gi * gi
			wi -= lr * gi / (math.Sqrt(st.s0[k]) + s.Epsilon)
		}
		w[i] = float32(wi)
	}
}
