package pserver

import (
	"math"
	"strings"

	"gonum.org/v1/gonum/blas/blas32"

	pb "github.com/raftps/raftps/api/raftpspb"
)

// Optimizer names (OptimizerSpec.name).
const (
	OptSGD      = "sgd"
	OptMomentum = "momentum"
	OptAdam     = "adam"
	OptAdagrad  = "adagrad"
)

// optimizer applies one update to one entry (a dense block or an embedding
// row). Its state lives beside the values in entry.state, one []float32 per
// name in stateSlots, each as long as the values.
//
// Every optimizer sees g after L2 weight decay (g += wd·w) and the learning
// rate lr_t = lr / (1 + lr_decay·t), t = updates already applied to the
// entry (entry.t, stored in checkpoints), so a restored model continues the
// exact same schedule and Adam bias correction.
type optimizer interface {
	name() string
	stateSlots() []string
	// update applies gradient g (already decayed) with learning rate lr;
	// e.t has already been incremented (t = 1 on the first update).
	update(e *entry, g []float32, lr float64)
}

// optConfig is an OptimizerSpec with defaults applied.
type optConfig struct {
	opt         optimizer
	lr          float64
	weightDecay float64
	lrDecay     float64
}

func newOptConfig(s *pb.OptimizerSpec) (optConfig, error) {
	c := optConfig{lr: s.GetLearningRate(), weightDecay: s.GetWeightDecay(), lrDecay: s.GetLrDecay()}
	if c.lr == 0 {
		c.lr = 0.01
	}
	if c.lr < 0 || c.weightDecay < 0 || c.lrDecay < 0 {
		return c, errorf(ErrBadSpec, "optimizer: negative learning_rate, weight_decay or lr_decay")
	}
	switch strings.ToLower(s.GetName()) {
	case "", OptSGD:
		c.opt = sgd{}
	case OptMomentum:
		mu := s.GetMomentum()
		if mu == 0 {
			mu = 0.9
		}
		c.opt = momentum{mu: float32(mu), nesterov: s.GetNesterov()}
	case OptAdam:
		a := adam{beta1: s.GetBeta1(), beta2: s.GetBeta2(), eps: s.GetEpsilon()}
		if a.beta1 == 0 {
			a.beta1 = 0.9
		}
		if a.beta2 == 0 {
			a.beta2 = 0.999
		}
		if a.eps == 0 {
			a.eps = 1e-8
		}
		c.opt = a
	case OptAdagrad:
		a := adagrad{eps: s.GetEpsilon()}
		if a.eps == 0 {
			a.eps = 1e-10
		}
		c.opt = a
	default:
		return c, errorf(ErrBadSpec, "unknown optimizer %q", s.GetName())
	}
	return c, nil
}

// apply runs one optimizer step on e with gradient g (len(g) == len(e.values)).
// scratch, if non-nil and long enough, is used for the decayed gradient; g is
// never modified. lrScale multiplies the learning rate (Horovod's
// "scale the learning rate by the number of workers").
func (c *optConfig) apply(e *entry, g []float32, lrScale float64, scratch []float32) {
	lr := c.lr * lrScale / (1 + c.lrDecay*float64(e.t))
	if c.weightDecay != 0 {
		// g' = g + wd·w
		if cap(scratch) < len(g) {
			scratch = make([]float32, len(g))
		}
		scratch = scratch[:len(g)]
		copy(scratch, g)
		axpy(float32(c.weightDecay), e.values, scratch)
		g = scratch
	}
	e.t++
	c.opt.update(e, g, lr)
}

// axpy computes y += a·x with gonum's BLAS level 1.
func axpy(a float32, x, y []float32) {
	if len(x) == 0 {
		return
	}
	blas32.Axpy(a, blas32.Vector{N: len(x), Inc: 1, Data: x}, blas32.Vector{N: len(y), Inc: 1, Data: y})
}

// scal computes x *= a with gonum's BLAS level 1.
func scal(a float32, x []float32) {
	if len(x) == 0 {
		return
	}
	blas32.Scal(a, blas32.Vector{N: len(x), Inc: 1, Data: x})
}

// sgd is plain stochastic gradient descent: w ← w − lr·g
// (Robbins & Monro 1951; Bottou 2010, "Large-scale machine learning with SGD").
type sgd struct{}

func (sgd) name() string         { return OptSGD }
func (sgd) stateSlots() []string { return nil }
func (sgd) update(e *entry, g []float32, lr float64) {
	axpy(float32(-lr), g, e.values)
}

// momentum is heavy-ball momentum (Polyak 1964) in the form of Sutskever et
// al. 2013 "On the importance of initialization and momentum in deep
// learning" as implemented by PyTorch's SGD:
//
//	v ← μ·v + g
//	w ← w − lr·v            (classical)
//	w ← w − lr·(g + μ·v)    (Nesterov)
type momentum struct {
	mu       float32
	nesterov bool
}

func (m momentum) name() string         { return OptMomentum }
func (m momentum) stateSlots() []string { return []string{"velocity"} }
func (m momentum) update(e *entry, g []float32, lr float64) {
	v := e.state[0]
	scal(m.mu, v)
	axpy(1, g, v)
	if m.nesterov {
		axpy(float32(-lr), g, e.values)
		axpy(float32(-lr)*m.mu, v, e.values)
		return
	}
	axpy(float32(-lr), v, e.values)
}

// adam is Kingma & Ba 2015, "Adam: A method for stochastic optimization",
// Algorithm 1, with bias correction:
//
//	m ← β1·m + (1−β1)·g
//	v ← β2·v + (1−β2)·g²
//	w ← w − lr · m̂ / (√v̂ + ε),  m̂ = m/(1−β1^t), v̂ = v/(1−β2^t)
//
// computed in float64 per element, stored in float32.
type adam struct{ beta1, beta2, eps float64 }

func (a adam) name() string         { return OptAdam }
func (a adam) stateSlots() []string { return []string{"m", "v"} }
func (a adam) update(e *entry, g []float32, lr float64) {
	m, v, w := e.state[0], e.state[1], e.values
	t := float64(e.t)
	c1 := 1 - math.Pow(a.beta1, t)
	c2 := 1 - math.Pow(a.beta2, t)
	for i, gi := range g {
		gf := float64(gi)
		mi := a.beta1*float64(m[i]) + (1-a.beta1)*gf
		vi := a.beta2*float64(v[i]) + (1-a.beta2)*gf*gf
		m[i], v[i] = float32(mi), float32(vi)
		w[i] = float32(float64(w[i]) - lr*(mi/c1)/(math.Sqrt(vi/c2)+a.eps))
	}
}

// adagrad is Duchi, Hazan & Singer 2011, "Adaptive subgradient methods for
// online learning and stochastic optimization" (diagonal form):
//
//	G ← G + g²
//	w ← w − lr · g / (√G + ε)
type adagrad struct{ eps float64 }

func (a adagrad) name() string         { return OptAdagrad }
func (a adagrad) stateSlots() []string { return []string{"accumulator"} }
func (a adagrad) update(e *entry, g []float32, lr float64) {
	acc, w := e.state[0], e.values
	for i, gi := range g {
		gf := float64(gi)
		ai := float64(acc[i]) + gf*gf
		acc[i] = float32(ai)
		w[i] = float32(float64(w[i]) - lr*gf/(math.Sqrt(ai)+a.eps))
	}
}
