package optim

import (
	"fmt"
	"math"
	"strings"
	"sync"

	"gonum.org/v1/gonum/blas/blas32"

	pb "github.com/raftps/raftps/api/raftpspb"
	"github.com/raftps/raftps/pserver/wire"
)

// Optimizer names (OptimizerSpec.name).
const (
	SGD      = "sgd"
	Momentum = "momentum"
	Adam     = "adam"
	Adagrad  = "adagrad"
)

// Optimizer applies one update to one entry (a dense block or an
// embedding row): its values (params) and its state, one []float32 per
// name in StateSlots, each as long as the values. Optimizers hold only
// their hyperparameters: the same (params, state, grad, Hyper) give the
// same bits on every machine, so a backup applying the primary's
// gradients holds the primary's parameters.
//
// Every optimizer sees g after L2 weight decay (g += wd·w) and the learning
// rate lr_t = lr / (1 + lr_decay·t) (Config.Schedule), t = updates already
// applied to the entry (stored in checkpoints), so a restored model
// continues the exact same schedule and Adam bias correction.
//
// Updates are stored in float32, and only committed if every result is
// finite in float32 (SGD with momentum computes in float32 with gonum's
// BLAS, as PyTorch does on float32 parameters; the others per element in
// float64): an update is first checked without storing anything (Check),
// and committed only if every entry of the push or step passed, so a
// refused update leaves the slot byte-identical. The check is usually
// free: each entry keeps amax, a bound on |value| and |state| (maintained
// by the commit pass, or by Bound itself between exact maxima: see
// pserver's Slot.applyLocked), and Bound gives, from amax and max|g|, a
// bound on every new value and state; when that is below SafeBound no
// element can overflow and the dry run is skipped. Only entries near the
// range (huge values, gradients or learning rates) pay for an exact dry
// run.
type Optimizer interface {
	// Name is the optimizer's OptimizerSpec.name.
	Name() string
	// StateSlots names the entry's state tensors, in order (e.g. "m", "v").
	StateSlots() []string
	// Apply computes the update of elements [lo, lo+len(grad)) of params
	// and of every state[k] with their gradient grad and h (h.T = the
	// update's number, 1 on the first), as mode says: Check stores nothing
	// and reports whether every new value and state element would be
	// finite in float32; Store stores them and returns the largest
	// magnitude among them; StoreFast stores them and may return amax -1
	// instead (the maximum not taken: the caller's bound holds it). A
	// store follows a check that passed, or a Bound below SafeBound. Calls
	// on disjoint ranges of one entry may run concurrently.
	Apply(params []float32, state [][]float32, lo int, grad []float32, h Hyper, mode Mode) (ok bool, amax float64)
	// Bound returns an upper bound on the magnitude of every value and
	// state element after one update with max|g| = gmax, given that every
	// value and state element is at most amax in magnitude now (and
	// second-moment state is >= 0).
	Bound(amax, gmax float64, h Hyper) float64
}

// Hyper is one update's hyperparameters: the learning rate after the
// schedule (Config.Schedule), the L2 weight decay, and T, the update's
// number for the entry (1 on the first; Adam's bias correction).
type Hyper struct {
	LR          float64
	WeightDecay float64
	T           int64
}

// Mode says what Optimizer.Apply does.
type Mode uint8

const (
	Check     Mode = iota // compute, store nothing: does every result fit?
	Store                 // store; return the largest magnitude stored
	StoreFast             // store; the largest magnitude may be left untaken (-1)
)

// SafeBound: below it, a bound computed in float64 leaves a margin of 2^64
// for rounding before float32 overflows (MaxFloat32 ≈ 3.4e38).
const SafeBound = 1e19

// fits reports whether x is finite and does not round to ±Inf in float32.
func fits(x float64) bool { return math.Abs(x) <= math.MaxFloat32 }

// Config is an OptimizerSpec with defaults applied: the optimizer and the
// learning rate schedule. It is immutable once made by New.
type Config struct {
	Optimizer
	LR          float64 // base learning rate (default 0.01)
	WeightDecay float64 // L2 weight decay (g += wd·w)
	LRDecay     float64 // lr_t = LR / (1 + LRDecay·t)
}

// New validates s and returns its Config, with defaults for zero fields:
// learning rate 0.01, momentum 0.9, Adam's β1 0.9, β2 0.999, ε 1e-8,
// Adagrad's ε 1e-10; an empty name is SGD. A non-finite or out-of-range
// hyperparameter or an unknown name is wire.ErrBadSpec.
func New(s *pb.OptimizerSpec) (Config, error) {
	c := Config{LR: s.GetLearningRate(), WeightDecay: s.GetWeightDecay(), LRDecay: s.GetLrDecay()}
	if c.LR == 0 {
		c.LR = 0.01
	}
	if !(c.LR > 0 && c.WeightDecay >= 0 && c.LRDecay >= 0) || !finite(c.LR, c.WeightDecay, c.LRDecay, s.GetMomentum(), s.GetEpsilon()) {
		return c, wire.Errorf(wire.ErrBadSpec, "optimizer: learning_rate %g, weight_decay %g, lr_decay %g: want finite, learning_rate > 0, others >= 0",
			c.LR, c.WeightDecay, c.LRDecay)
	}
	if b1, b2, mu, eps := s.GetBeta1(), s.GetBeta2(), s.GetMomentum(), s.GetEpsilon(); b1 < 0 || b1 >= 1 || b2 < 0 || b2 >= 1 || mu < 0 || mu >= 1 || eps < 0 {
		return c, wire.Errorf(wire.ErrBadSpec, "optimizer: beta1 %g, beta2 %g, momentum %g: want [0, 1); epsilon %g: want >= 0", b1, b2, mu, eps)
	}
	switch strings.ToLower(s.GetName()) {
	case "", SGD:
		c.Optimizer = sgd{}
	case Momentum:
		mu := s.GetMomentum()
		if mu == 0 {
			mu = 0.9
		}
		c.Optimizer = momentum{mu: mu, nesterov: s.GetNesterov()}
	case Adam:
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
		c.Optimizer = a
	case Adagrad:
		a := adagrad{eps: s.GetEpsilon()}
		if a.eps == 0 {
			a.eps = 1e-10
		}
		c.Optimizer = a
	default:
		return c, wire.Errorf(wire.ErrBadSpec, "unknown optimizer %q", s.GetName())
	}
	return c, nil
}

// Schedule returns the hyperparameters of the next update of an entry
// that has had t updates: lr_t = LR·lrScale / (1 + LRDecay·t), the weight
// decay, and T = t+1. lrScale multiplies the learning rate (Horovod's
// "scale the learning rate by the number of workers").
func (c *Config) Schedule(t int64, lrScale float64) Hyper {
	return Hyper{LR: c.LR * lrScale / (1 + c.LRDecay*float64(t)), WeightDecay: c.WeightDecay, T: t + 1}
}

// UpdateBound returns a bound on the magnitude of every value and state
// element of an entry whose values and state are at most amax in
// magnitude, after its next update h with gradient g. Below SafeBound,
// that bound alone shows every result finite in float32; if not, the
// caller dry-runs the update (Check). gmax is max |g|, or < 0 if not
// computed: gLimit, which every element of g obeys (pserver.MaxGradient),
// is tried first, and the exact maximum is taken only if that bound is
// too large (Adam's and Adagrad's g², for instance).
func (c *Config) UpdateBound(amax float64, g []float32, gmax, gLimit float64, h Hyper) float64 {
	if gmax < 0 {
		if b := c.Bound(amax, gLimit, h); b < SafeBound {
			return b
		}
		gmax = MaxAbs(g)
	}
	return c.Bound(amax, gmax, h)
}

// MaxAbs returns max |x| over f (+Inf if f holds NaN; 0 if f is empty).
func MaxAbs(f []float32) float64 {
	b := MaxAbsBits(f)
	if b > math.Float32bits(float32(math.Inf(1))) {
		return math.Inf(1)
	}
	return float64(math.Float32frombits(b))
}

// MaxUpdates bounds an entry's update count t restored from a checkpoint
// (t+1 must not overflow; no job applies 2^62 updates).
const MaxUpdates = 1 << 62

// CheckState checks restored values, state and update count t of one
// entry for this optimizer: every element finite, second moments (Adam's
// "v", Adagrad's "accumulator") non-negative, one state tensor per
// StateSlots name as long as the values, and 0 <= t <= MaxUpdates.
func (c *Config) CheckState(values []float32, state [][]float32, t int64) error {
	if t < 0 || t > MaxUpdates {
		return fmt.Errorf("update count %d not in [0, %d]", t, int64(MaxUpdates))
	}
	if !AllFinite(values) {
		return fmt.Errorf("values hold NaN or Inf")
	}
	names := c.StateSlots()
	if len(state) != len(names) {
		return fmt.Errorf("%d optimizer state tensors, want %d", len(state), len(names))
	}
	for i, st := range state {
		if len(st) != len(values) || !AllFinite(st) {
			return fmt.Errorf("optimizer state %q: wrong length or NaN/Inf", names[i])
		}
		if names[i] == "v" || names[i] == "accumulator" {
			for _, x := range st {
				if x < 0 {
					return fmt.Errorf("optimizer state %q holds %g < 0", names[i], x)
				}
			}
		}
	}
	return nil
}

// finite reports whether every x is neither NaN nor ±Inf.
func finite(xs ...float64) bool {
	for _, x := range xs {
		if math.IsNaN(x) || math.IsInf(x, 0) {
			return false
		}
	}
	return true
}

// axpy computes y += a·x with gonum's BLAS level 1 (no fused
// multiply-add: a·x is rounded, then the sum).
func axpy(a float32, x, y []float32) {
	if len(x) == 0 {
		return
	}
	blas32.Axpy(a, blas32.Vector{N: len(x), Inc: 1, Data: x}, blas32.Vector{N: len(y), Inc: 1, Data: y})
}

// sgd is plain stochastic gradient descent: w ← w − lr·g
// (Robbins & Monro 1951; Bottou 2010, "Large-scale machine learning with SGD").
type sgd struct{}

func (sgd) Name() string         { return SGD }
func (sgd) StateSlots() []string { return nil }
func (sgd) Apply(params []float32, _ [][]float32, lo int, g []float32, h Hyper, mode Mode) (bool, float64) {
	wd, lr := h.WeightDecay, h.LR
	w := params[lo : lo+len(g)]
	var amax float64
	for i, gi := range g {
		wi := float64(w[i])
		nw := wi - lr*(float64(gi)+wd*wi)
		a := math.Abs(nw)
		if !(a <= math.MaxFloat32) {
			return false, 0
		}
		if mode != Check {
			w[i] = float32(nw)
			if a > amax {
				amax = a
			}
		}
	}
	return true, amax
}

func (sgd) Bound(amax, gmax float64, h Hyper) float64 {
	wd, lr := h.WeightDecay, h.LR
	return amax + lr*(gmax+wd*amax)
}

// momentum is heavy-ball momentum (Polyak 1964) in the form of Sutskever et
// al. 2013 "On the importance of initialization and momentum in deep
// learning" as implemented by PyTorch's SGD:
//
//	v ← μ·v + g
//	w ← w − lr·v            (classical)
//	w ← w − lr·(g + μ·v)    (Nesterov)
type momentum struct {
	mu       float64
	nesterov bool
}

func (m momentum) Name() string         { return Momentum }
func (m momentum) StateSlots() []string { return []string{"velocity"} }
func (m momentum) Apply(params []float32, state [][]float32, lo int, g []float32, h Hyper, mode Mode) (bool, float64) {
	wd, lr := h.WeightDecay, h.LR
	v, w := state[0][lo:lo+len(g)], params[lo:lo+len(g)]
	if !m.float32OK(wd, lr) {
		return m.step64(v, w, g, wd, lr, mode)
	}
	if mode == Check {
		return m.check32(v, w, g, wd, lr), 0
	}
	return true, m.commit32(v, w, g, wd, lr, mode == Store)
}

// float32OK reports whether wd and lr are float32 numbers, as the
// coefficients of commit32 (every real job; a learning rate or weight
// decay beyond 3.4e38 takes step64). μ < 1 (newOptConfig), so μ and lr·μ
// are then too.
func (momentum) float32OK(wd, lr float64) bool {
	return fits(wd) && fits(lr)
}

// commit32 stores the update in float32 as a few passes of gonum's BLAS
// level 1 (SIMD on amd64) over blocks that stay in the L1 cache:
//
//	t = g + wd·w                  (t: a block-sized buffer)
//	w = w − lr·t                  (Nesterov only)
//	t = t + μ·v;  v = t
//	w = w − lr·v                  (classical)
//	w = w − lr·μ·v                (Nesterov)
//
// With withMax it returns the largest |value| or |state| stored, taken
// over the float32 bit patterns with the sign cleared (which order like
// the magnitudes); without, it returns -1. Every product and sum is
// rounded to float32: a few roundings per element, which check32's margin
// and the bound's 1e-6 widening cover. It replaced one float64 loop per
// element (now step64), which did not vectorize and was most of a sync
// step (figures: pserver/DESIGN.md, "Measured").
func (m momentum) commit32(v, w, g []float32, wd, lr float64, withMax bool) float64 {
	mu, wd32, lr32 := float32(m.mu), float32(wd), float32(lr)
	buf := commitBufs.Get().(*[commitBlock]float32)
	defer commitBufs.Put(buf)
	t := buf[:]
	var mb uint32
	for lo := 0; lo < len(g); lo += commitBlock {
		hi := min(lo+commitBlock, len(g))
		gb, vb, wb, tb := g[lo:hi], v[lo:hi], w[lo:hi], t[:hi-lo]
		copy(tb, gb)
		if wd != 0 {
			axpy(wd32, wb, tb)
		}
		if m.nesterov {
			axpy(-lr32, tb, wb)
		}
		axpy(mu, vb, tb)
		copy(vb, tb)
		if m.nesterov {
			axpy(-lr32*mu, vb, wb)
		} else {
			axpy(-lr32, vb, wb)
		}
		if withMax {
			mb = max(mb, MaxAbsBits(vb), MaxAbsBits(wb))
		}
	}
	if !withMax {
		return -1
	}
	return float64(math.Float32frombits(mb))
}

// commitBlock is the block of commit32's passes: 4 KiB of each of g, v, w
// and the buffer.
const commitBlock = 1024

// commitBufs holds commit32's block buffers (a fresh one per call was a
// fifth of its time, in allocation and zeroing).
var commitBufs = sync.Pool{New: func() any { return new([commitBlock]float32) }}

// check32 reports whether commit32 would store only finite values: it
// computes commit32's sequence in float64 with its float32 coefficients
// and requires every intermediate to stay below MaxFloat32 by more than
// the float32 rounding commit32 adds.
func (m momentum) check32(v, w, g []float32, wd, lr float64) bool {
	const limit = math.MaxFloat32 * (1 - 1.0/(1<<20))
	mu, wd, lr := float64(float32(m.mu)), float64(float32(wd)), float64(float32(lr))
	for i, gi := range g {
		wi, vi := float64(w[i]), float64(v[i])
		d := wd * wi // each product and sum commit32 rounds to float32
		t := float64(gi) + d
		ok := math.Abs(d) <= limit && math.Abs(t) <= limit
		if m.nesterov {
			d = lr * t
			wi -= d
			ok = ok && math.Abs(d) <= limit && math.Abs(wi) <= limit
		}
		d = mu * vi
		vi = t + d
		ok = ok && math.Abs(d) <= limit && math.Abs(vi) <= limit
		if m.nesterov {
			d = lr * mu * vi
		} else {
			d = lr * vi
		}
		wi -= d
		if !(ok && math.Abs(d) <= limit && math.Abs(wi) <= limit) {
			return false
		}
	}
	return true
}

// step64 computes the update per element in float64 and stores it rounded
// to float32 (for coefficients beyond float32's range).
func (m momentum) step64(v, w, g []float32, wd, lr float64, mode Mode) (bool, float64) {
	var amax float64
	for i, gi := range g {
		wi := float64(w[i])
		gf := float64(gi) + wd*wi
		vi := m.mu*float64(v[i]) + gf
		var nw float64
		if m.nesterov {
			nw = wi - lr*(gf+m.mu*vi)
		} else {
			nw = wi - lr*vi
		}
		if !fits(vi) || !fits(nw) {
			return false, 0
		}
		if mode != Check {
			v[i], w[i] = float32(vi), float32(nw)
			amax = max(amax, math.Abs(vi), math.Abs(nw))
		}
	}
	return true, amax
}

func (m momentum) Bound(amax, gmax float64, h Hyper) float64 {
	wd, lr := h.WeightDecay, h.LR
	g := gmax + wd*amax
	v := m.mu*amax + g
	return max(v, amax+lr*(g+v))
}

// adam is Kingma & Ba 2015, "Adam: A method for stochastic optimization",
// Algorithm 1, with bias correction:
//
//	m ← β1·m + (1−β1)·g
//	v ← β2·v + (1−β2)·g²
//	w ← w − lr · m̂ / (√v̂ + ε),  m̂ = m/(1−β1^t), v̂ = v/(1−β2^t)
type adam struct{ beta1, beta2, eps float64 }

func (a adam) Name() string         { return Adam }
func (a adam) StateSlots() []string { return []string{"m", "v"} }
func (a adam) Apply(params []float32, state [][]float32, lo int, g []float32, h Hyper, mode Mode) (bool, float64) {
	wd, lr, t := h.WeightDecay, h.LR, h.T
	hi := lo + len(g)
	m, v, w := state[0][lo:hi], state[1][lo:hi], params[lo:hi]
	c1 := 1 - math.Pow(a.beta1, float64(t))
	c2 := 1 - math.Pow(a.beta2, float64(t))
	var amax float64
	for i, gi := range g {
		wi := float64(w[i])
		gf := float64(gi) + wd*wi
		mi := a.beta1*float64(m[i]) + (1-a.beta1)*gf
		vi := a.beta2*float64(v[i]) + (1-a.beta2)*gf*gf
		nw := wi - lr*(mi/c1)/(math.Sqrt(vi/c2)+a.eps)
		if !fits(mi) || !fits(vi) || !fits(nw) {
			return false, 0
		}
		if mode != Check {
			m[i], v[i], w[i] = float32(mi), float32(vi), float32(nw)
			amax = max(amax, math.Abs(mi), vi, math.Abs(nw))
		}
	}
	return true, amax
}

// Bound: m and v are convex combinations, so |m'| <= max(amax, g) and
// v' <= max(amax, g²); the step is at most lr·|m'|/(c1·ε) (v' >= 0).
func (a adam) Bound(amax, gmax float64, h Hyper) float64 {
	wd, lr, t := h.WeightDecay, h.LR, h.T
	g := gmax + wd*amax
	mb := max(amax, g)
	c1 := 1 - math.Pow(a.beta1, float64(t))
	if c1 <= 0 || a.eps <= 0 {
		return math.Inf(1) // no cheap bound: dry run
	}
	return max(mb, g*g, amax+lr*mb/(c1*a.eps))
}

// adagrad is Duchi, Hazan & Singer 2011, "Adaptive subgradient methods for
// online learning and stochastic optimization" (diagonal form):
//
//	G ← G + g²
//	w ← w − lr · g / (√G + ε)
type adagrad struct{ eps float64 }

func (a adagrad) Name() string         { return Adagrad }
func (a adagrad) StateSlots() []string { return []string{"accumulator"} }
func (a adagrad) Apply(params []float32, state [][]float32, lo int, g []float32, h Hyper, mode Mode) (bool, float64) {
	wd, lr := h.WeightDecay, h.LR
	acc, w := state[0][lo:lo+len(g)], params[lo:lo+len(g)]
	var amax float64
	for i, gi := range g {
		wi := float64(w[i])
		gf := float64(gi) + wd*wi
		ai := float64(acc[i]) + gf*gf
		nw := wi - lr*gf/(math.Sqrt(ai)+a.eps)
		if !fits(ai) || !fits(nw) {
			return false, 0
		}
		if mode != Check {
			acc[i], w[i] = float32(ai), float32(nw)
			amax = max(amax, ai, math.Abs(nw))
		}
	}
	return true, amax
}

// Bound: G' <= amax + g²; |g|/(√G' + ε) <= 1 because G' >= g², so the
// step is at most lr.
func (a adagrad) Bound(amax, gmax float64, h Hyper) float64 {
	wd, lr := h.WeightDecay, h.LR
	g := gmax + wd*amax
	return max(amax+g*g, amax+lr)
}
