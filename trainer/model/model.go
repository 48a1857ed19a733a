package model

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"

	pb "github.com/raftps/raftps/api/raftpspb"
	"github.com/raftps/raftps/internal/shape"
)

// Errors returned by Build and by Model methods; match with errors.Is.
var (
	// ErrUnknownModel: ModelSpec.name is not one of Names().
	ErrUnknownModel = errors.New("model: unknown model")
	// ErrBadSpec: a ModelSpec field is out of range (e.g. a hidden width <= 0).
	ErrBadSpec = errors.New("model: bad model spec")
	// ErrShape: a parameter, input or gradient has the wrong length, or a
	// parameter is missing.
	ErrShape = errors.New("model: shape mismatch")
	// ErrMissingRow: an embedding row that the batch needs is not in Params.
	ErrMissingRow = errors.New("model: embedding row missing")
)

// Rows is a subset of an embedding table: row IDs[i] is
// Values[i*dim:(i+1)*dim], dim being the table's second dimension. It carries
// both pulled rows and row gradients.
type Rows struct {
	IDs    []int64
	Values []float32
}

// Params holds a model's parameters, or gradients of the same layout.
// Dense tensors are row-major float32 with the length of their ParamSpec
// shape (a weight matrix [in, out] is in*out values, input-major). Embedding
// tables hold only the rows a batch needs (see Model.SparseRows).
type Params struct {
	Dense  map[string][]float32
	Sparse map[string]Rows
}

// Model is a classifier with hand-written gradients. Implementations are
// stateless and safe for concurrent use.
//
// x is always a mini-batch of n = len(y) records, n x InputDim float32
// values row-major; y holds labels in [0, Classes).
type Model interface {
	// Name is the ModelSpec name ("softmax", "mlp", "hashed_lr").
	Name() string
	// InputDim and Classes are the dimensions given to Build.
	InputDim() int
	Classes() int
	// Params lists the parameters: name, shape, embedding flag, initializer
	// (Glorot uniform for weights, zeros for biases, uniform for embeddings).
	// The order is fixed and is the order JobSpec.params should use.
	Params() []*pb.ParamSpec
	// SparseRows returns, per embedding parameter, the sorted distinct row
	// ids that the batch x (n x InputDim) reads; nil for dense-only models.
	// A trainer pulls exactly these rows before calling Loss.
	SparseRows(x []float32) map[string][]int64
	// Loss returns the mean softmax cross-entropy over the batch and the
	// number of records whose arg-max prediction equals the label. If grads
	// is non-nil it is overwritten with the gradient of the mean loss:
	// dense tensors with the parameter's length, embedding gradients as Rows
	// with the same IDs as p.Sparse (slices are reused when large enough).
	// Errors: ErrShape, ErrMissingRow.
	Loss(p Params, x []float32, y []uint8, grads *Params) (loss float64, correct int, err error)
	// Predict writes the arg-max class of each record of x into out (grown
	// to n if needed) and returns it.
	Predict(p Params, x []float32, out []int) ([]int, error)

	// loss64 is the float64 core used by Loss, Predict and the gradient
	// checks: g (if non-nil) must be zeroed and shaped like p.
	loss64(p *params64, x []float64, n int, y []uint8, g *params64, pred []int) (float64, int, error)
}

// Names lists the model names Build accepts.
func Names() []string { return []string{"softmax", "mlp", "hashed_lr"} }

// Defaults used by Build when a ModelSpec field is zero.
const (
	DefaultEmbeddingDim = 16
	DefaultHashBuckets  = 1 << 16
)

// Build returns the model named by spec for inputs of inputDim features and
// labels in [0, classes): "softmax" (multinomial logistic regression),
// "mlp" (spec.hidden ReLU layers, e.g. [128]) or "hashed_lr" (hashed
// pixel-intensity features, summed embedding bag of
// spec.embedding_dim over spec.hash_buckets rows, dense softmax layer).
// Unknown names return ErrUnknownModel, bad sizes ErrBadSpec.
func Build(spec *pb.ModelSpec, inputDim, classes int) (Model, error) {
	if spec == nil {
		return nil, fmt.Errorf("%w: nil ModelSpec", ErrBadSpec)
	}
	if inputDim <= 0 || classes < 2 {
		return nil, fmt.Errorf("%w: inputDim %d, classes %d", ErrBadSpec, inputDim, classes)
	}
	m, err := build(spec, inputDim, classes)
	if err != nil {
		return nil, err
	}
	// Every shape must be a size before anything is allocated from it
	// (hash_buckets 1<<62 with dim 3 wraps negative).
	for _, ps := range m.Params() {
		if _, err := NumElements(ps); err != nil {
			return nil, err
		}
	}
	return m, nil
}

func build(spec *pb.ModelSpec, inputDim, classes int) (Model, error) {
	switch spec.GetName() {
	case "softmax":
		if len(spec.GetHidden()) > 0 {
			return nil, fmt.Errorf("%w: softmax takes no hidden layers (got %v); use mlp", ErrBadSpec, spec.GetHidden())
		}
		return newDense("softmax", inputDim, nil, classes), nil
	case "mlp":
		if len(spec.GetHidden()) == 0 {
			return nil, fmt.Errorf("%w: mlp needs at least one hidden width", ErrBadSpec)
		}
		var hidden []int
		for _, h := range spec.GetHidden() {
			if h <= 0 {
				return nil, fmt.Errorf("%w: hidden width %d", ErrBadSpec, h)
			}
			hidden = append(hidden, int(h))
		}
		return newDense("mlp", inputDim, hidden, classes), nil
	case "hashed_lr":
		dim, buckets := int(spec.GetEmbeddingDim()), spec.GetHashBuckets()
		if dim == 0 {
			dim = DefaultEmbeddingDim
		}
		if buckets == 0 {
			buckets = DefaultHashBuckets
		}
		if dim < 0 || buckets < 0 {
			return nil, fmt.Errorf("%w: embedding_dim %d, hash_buckets %d", ErrBadSpec, dim, buckets)
		}
		return newHashed(inputDim, dim, buckets, classes), nil
	}
	return nil, fmt.Errorf("%w %q (known: %v)", ErrUnknownModel, spec.GetName(), Names())
}

// NumElements returns the product of a ParamSpec's shape, computed with
// overflow checks: a negative dim or more than shape.MaxElements elements
// (e.g. [3, 1<<62], whose int64 product wraps negative) is ErrBadSpec.
func NumElements(ps *pb.ParamSpec) (int64, error) {
	n, err := shape.Elements(ps.GetShape())
	if err != nil {
		return 0, fmt.Errorf("%w: parameter %q: %w", ErrBadSpec, ps.GetName(), err)
	}
	return n, nil
}

// InitTensor returns the initial values of ps (all rows for an embedding
// table), drawn from a PCG generator seeded with (seed, hash of the name):
//   - INIT_ZEROS: 0;
//   - INIT_UNIFORM: U(-scale, scale);
//   - INIT_NORMAL: N(0, scale²);
//   - INIT_GLOROT: U(-l, l), l = sqrt(6 / (fan_in + fan_out)) with fan_in =
//     shape[0], fan_out = shape[1] (Glorot & Bengio 2010), or shape[0] for
//     both if 1-D.
//
// A shape NumElements refuses gives nil (Build never makes one; to64 then
// reports the length mismatch as ErrShape).
func InitTensor(ps *pb.ParamSpec, seed int64) []float32 {
	n, err := NumElements(ps)
	if err != nil {
		return nil
	}
	out := make([]float32, n)
	h := uint64(14695981039346656037)
	for _, c := range []byte(ps.GetName()) {
		h = (h ^ uint64(c)) * 1099511628211
	}
	r := rand.New(rand.NewPCG(uint64(seed), h))
	switch ps.GetInit() {
	case pb.Initializer_INIT_ZEROS:
	case pb.Initializer_INIT_UNIFORM:
		for i := range out {
			out[i] = float32((2*r.Float64() - 1) * ps.GetScale())
		}
	case pb.Initializer_INIT_NORMAL:
		for i := range out {
			out[i] = float32(r.NormFloat64() * ps.GetScale())
		}
	case pb.Initializer_INIT_GLOROT:
		shape := ps.GetShape()
		fanIn, fanOut := float64(1), float64(1)
		if len(shape) > 0 {
			fanIn, fanOut = float64(shape[0]), float64(shape[0])
		}
		if len(shape) > 1 {
			fanOut = float64(shape[1])
		}
		l := math.Sqrt(6 / (fanIn + fanOut))
		for i := range out {
			out[i] = float32((2*r.Float64() - 1) * l)
		}
	}
	return out
}

// InitParams returns the initial parameters of m: every dense tensor, and
// every embedding table in full (IDs 0..rows-1), as InitTensor gives them.
// It is what TrainLocal starts from; a parameter server initializes its
// shards with the same InitTensor.
func InitParams(m Model, seed int64) Params {
	p := Params{Dense: map[string][]float32{}, Sparse: map[string]Rows{}}
	for _, ps := range m.Params() {
		v := InitTensor(ps, seed)
		if ps.GetEmbedding() {
			ids := make([]int64, ps.GetShape()[0])
			for i := range ids {
				ids[i] = int64(i)
			}
			p.Sparse[ps.GetName()] = Rows{IDs: ids, Values: v}
		} else {
			p.Dense[ps.GetName()] = v
		}
	}
	return p
}

// params64 is the float64 form of Params used by the compute core.
type params64 struct {
	dense  map[string][]float64
	sparse map[string]*rows64
}

type rows64 struct {
	ids   []int64
	vals  []float64
	dim   int
	index map[int64]int
}

func (r *rows64) row(id int64) []float64 {
	i, ok := r.index[id]
	if !ok {
		return nil
	}
	return r.vals[i*r.dim : (i+1)*r.dim]
}

// zerosLike returns a zeroed params64 with p's layout (same row ids).
func (p *params64) zerosLike() *params64 {
	g := &params64{dense: map[string][]float64{}, sparse: map[string]*rows64{}}
	for k, v := range p.dense {
		g.dense[k] = make([]float64, len(v))
	}
	for k, r := range p.sparse {
		g.sparse[k] = &rows64{ids: r.ids, vals: make([]float64, len(r.vals)), dim: r.dim, index: r.index}
	}
	return g
}

// to64 converts and validates p against specs.
func to64(specs []*pb.ParamSpec, p Params) (*params64, error) {
	q := &params64{dense: map[string][]float64{}, sparse: map[string]*rows64{}}
	for _, ps := range specs {
		name := ps.GetName()
		if ps.GetEmbedding() {
			r, ok := p.Sparse[name]
			if !ok {
				return nil, fmt.Errorf("%w: embedding %q not in params", ErrShape, name)
			}
			dim := int(ps.GetShape()[1])
			if len(r.Values) != len(r.IDs)*dim {
				return nil, fmt.Errorf("%w: embedding %q has %d values for %d rows of dim %d", ErrShape, name, len(r.Values), len(r.IDs), dim)
			}
			rr := &rows64{ids: r.IDs, vals: f64(r.Values), dim: dim, index: make(map[int64]int, len(r.IDs))}
			for i, id := range r.IDs {
				rr.index[id] = i
			}
			q.sparse[name] = rr
			continue
		}
		v, ok := p.Dense[name]
		if !ok {
			return nil, fmt.Errorf("%w: parameter %q not in params", ErrShape, name)
		}
		if want, err := NumElements(ps); err != nil {
			return nil, fmt.Errorf("%w: %w", ErrShape, err)
		} else if int64(len(v)) != want {
			return nil, fmt.Errorf("%w: parameter %q has %d values, want %d (shape %v)", ErrShape, name, len(v), want, ps.GetShape())
		}
		q.dense[name] = f64(v)
	}
	return q, nil
}

func f64(v []float32) []float64 {
	out := make([]float64, len(v))
	for i, x := range v {
		out[i] = float64(x)
	}
	return out
}

func put32(dst []float32, src []float64) []float32 {
	if cap(dst) < len(src) {
		dst = make([]float32, len(src))
	}
	dst = dst[:len(src)]
	for i, x := range src {
		dst[i] = float32(x)
	}
	return dst
}

// lossVia is the shared implementation of Model.Loss.
func lossVia(m Model, p Params, x []float32, y []uint8, grads *Params) (float64, int, error) {
	n := len(y)
	if len(x) != n*m.InputDim() {
		return 0, 0, fmt.Errorf("%w: x has %d values, want %d x %d", ErrShape, len(x), n, m.InputDim())
	}
	for i, l := range y {
		if int(l) >= m.Classes() {
			return 0, 0, fmt.Errorf("%w: label %d of record %d not in [0, %d)", ErrShape, l, i, m.Classes())
		}
	}
	q, err := to64(m.Params(), p)
	if err != nil {
		return 0, 0, err
	}
	var g *params64
	if grads != nil {
		g = q.zerosLike()
	}
	loss, correct, err := m.loss64(q, f64(x), n, y, g, nil)
	if err != nil || grads == nil {
		return loss, correct, err
	}
	if grads.Dense == nil {
		grads.Dense = map[string][]float32{}
	}
	if grads.Sparse == nil {
		grads.Sparse = map[string]Rows{}
	}
	for k, v := range g.dense {
		grads.Dense[k] = put32(grads.Dense[k], v)
	}
	for k, r := range g.sparse {
		old := grads.Sparse[k]
		grads.Sparse[k] = Rows{IDs: slices.Clone(r.ids), Values: put32(old.Values, r.vals)}
	}
	return loss, correct, nil
}

// predictVia is the shared implementation of Model.Predict.
func predictVia(m Model, p Params, x []float32, out []int) ([]int, error) {
	if len(x)%m.InputDim() != 0 {
		return nil, fmt.Errorf("%w: x has %d values, not a multiple of %d", ErrShape, len(x), m.InputDim())
	}
	n := len(x) / m.InputDim()
	q, err := to64(m.Params(), p)
	if err != nil {
		return nil, err
	}
	if cap(out) < n {
		out = make([]int, n)
	}
	out = out[:n]
	_, _, err = m.loss64(q, f64(x), n, nil, nil, out)
	return out, err
}
