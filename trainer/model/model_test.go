package model

import (
	"errors"
	"math"
	"math/rand/v2"
	"testing"

	pb "github.com/raftps/raftps/api/raftpspb"
)

// randParams64 draws every parameter of m from N(0, 0.5²); embedding tables
// get exactly the rows the batch needs.
func randParams64(t *testing.T, m Model, x []float32, r *rand.Rand) *params64 {
	t.Helper()
	p := Params{Dense: map[string][]float32{}, Sparse: map[string]Rows{}}
	need := m.SparseRows(x)
	for _, ps := range m.Params() {
		if ps.GetEmbedding() {
			ids := need[ps.GetName()]
			v := make([]float32, len(ids)*int(ps.GetShape()[1]))
			for i := range v {
				v[i] = float32(r.NormFloat64() * 0.5)
			}
			p.Sparse[ps.GetName()] = Rows{IDs: ids, Values: v}
			continue
		}
		n, err := NumElements(ps)
		if err != nil {
			t.Fatal(err)
		}
		v := make([]float32, n)
		for i := range v {
			v[i] = float32(r.NormFloat64() * 0.5)
		}
		p.Dense[ps.GetName()] = v
	}
	q, err := to64(m.Params(), p)
	if err != nil {
		t.Fatal(err)
	}
	return q
}

func randBatch(n, dim, classes int, r *rand.Rand) ([]float32, []uint8) {
	x := make([]float32, n*dim)
	for i := range x {
		if r.Float64() < 0.7 { // sparse-ish, like images
			x[i] = float32(r.Float64())
		}
	}
	y := make([]uint8, n)
	for i := range y {
		y[i] = uint8(r.IntN(classes))
	}
	return x, y
}

// TestGradientsFiniteDifference checks every analytic gradient element
// against a central difference (f(w+h) - f(w-h)) / 2h in float64:
// relative error |a - n| / max(|a| + |n|, 1e-6) < 1e-4.
func TestGradientsFiniteDifference(t *testing.T) {
	const dim, classes, n = 12, 4, 5
	cases := []struct {
		name string
		spec *pb.ModelSpec
	}{
		{"softmax", &pb.ModelSpec{Name: "softmax"}},
		{"mlp-1", &pb.ModelSpec{Name: "mlp", Hidden: []int32{7}}},
		{"mlp-2", &pb.ModelSpec{Name: "mlp", Hidden: []int32{6, 5}}},
		{"hashed_lr", &pb.ModelSpec{Name: "hashed_lr", EmbeddingDim: 3, HashBuckets: 17}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := rand.New(rand.NewPCG(1, 2))
			m, err := Build(tc.spec, dim, classes)
			if err != nil {
				t.Fatal(err)
			}
			x, y := randBatch(n, dim, classes, r)
			p := randParams64(t, m, x, r)
			x64 := f64(x)
			g := p.zerosLike()
			if _, _, err := m.loss64(p, x64, n, y, g, nil); err != nil {
				t.Fatal(err)
			}
			f := func() float64 {
				l, _, err := m.loss64(p, x64, n, y, nil, nil)
				if err != nil {
					t.Fatal(err)
				}
				return l
			}
			const h = 1e-6
			checked := 0
			check := func(name string, w, gw []float64) {
				for i := range w {
					orig := w[i]
					w[i] = orig + h
					lp := f()
					w[i] = orig - h
					lm := f()
					w[i] = orig
					num := (lp - lm) / (2 * h)
					rel := math.Abs(gw[i]-num) / math.Max(math.Abs(gw[i])+math.Abs(num), 1e-6)
					if rel > 1e-4 {
						t.Errorf("%s[%d]: analytic %.8g, numeric %.8g, rel err %.2g", name, i, gw[i], num, rel)
					}
					checked++
				}
			}
			for name, w := range p.dense {
				check(name, w, g.dense[name])
			}
			for name, rows := range p.sparse {
				check(name, rows.vals, g.sparse[name].vals)
			}
			if checked == 0 {
				t.Fatal("no parameters checked")
			}
			t.Logf("%d gradient elements within 1e-4", checked)
		})
	}
}

func TestBuild(t *testing.T) {
	for _, tc := range []struct {
		spec  *pb.ModelSpec
		err   error
		names []string
	}{
		{&pb.ModelSpec{Name: "softmax"}, nil, []string{"w", "b"}},
		{&pb.ModelSpec{Name: "mlp", Hidden: []int32{8, 4}}, nil, []string{"w0", "b0", "w1", "b1", "w2", "b2"}},
		{&pb.ModelSpec{Name: "hashed_lr"}, nil, []string{"emb", "w", "b"}},
		{&pb.ModelSpec{Name: "resnet"}, ErrUnknownModel, nil},
		{&pb.ModelSpec{Name: "mlp"}, ErrBadSpec, nil},
		{&pb.ModelSpec{Name: "mlp", Hidden: []int32{0}}, ErrBadSpec, nil},
		{&pb.ModelSpec{Name: "softmax", Hidden: []int32{3}}, ErrBadSpec, nil},
		{nil, ErrBadSpec, nil},
	} {
		m, err := Build(tc.spec, 16, 10)
		if !errors.Is(err, tc.err) {
			t.Errorf("Build(%v): err %v, want %v", tc.spec, err, tc.err)
			continue
		}
		if err != nil {
			continue
		}
		var got []string
		for _, ps := range m.Params() {
			got = append(got, ps.GetName())
		}
		if len(got) != len(tc.names) {
			t.Errorf("Build(%v) params %v, want %v", tc.spec, got, tc.names)
		}
	}
}

func TestLossShapeErrors(t *testing.T) {
	m, _ := Build(&pb.ModelSpec{Name: "hashed_lr", EmbeddingDim: 2, HashBuckets: 8}, 4, 3)
	p := InitParams(m, 1)
	x := []float32{0.5, 0, 1, 0.2}
	if _, _, err := m.Loss(p, x, []uint8{1}, &Params{}); err != nil {
		t.Fatalf("full table: %v", err)
	}
	p.Sparse["emb"] = Rows{}
	if _, _, err := m.Loss(p, x, []uint8{1}, nil); !errors.Is(err, ErrMissingRow) {
		t.Errorf("no rows: err %v, want ErrMissingRow", err)
	}
	if _, _, err := m.Loss(p, x[:3], []uint8{1}, nil); !errors.Is(err, ErrShape) {
		t.Errorf("short x: err %v, want ErrShape", err)
	}
	delete(p.Dense, "w")
	if _, _, err := m.Loss(p, x, []uint8{1}, nil); !errors.Is(err, ErrShape) {
		t.Errorf("missing w: err %v, want ErrShape", err)
	}
}

// TestSGDLearns fits a tiny separable problem with each model.
func TestSGDLearns(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	const dim, classes, n = 8, 3, 60
	x := make([]float32, n*dim)
	y := make([]uint8, n)
	for i := 0; i < n; i++ {
		c := i % classes
		y[i] = uint8(c)
		for j := 0; j < dim; j++ {
			x[i*dim+j] = float32(0.1 * r.Float64())
		}
		x[i*dim+c] = 0.9 // class c lights pixel c
	}
	for _, spec := range []*pb.ModelSpec{{Name: "softmax"}, {Name: "mlp", Hidden: []int32{16}}, {Name: "hashed_lr", EmbeddingDim: 8, HashBuckets: 64}} {
		m, err := Build(spec, dim, classes)
		if err != nil {
			t.Fatal(err)
		}
		p := InitParams(m, 7)
		var g Params
		var first, last float64
		for step := 0; step < 300; step++ {
			l, _, err := m.Loss(p, x, y, &g)
			if err != nil {
				t.Fatal(err)
			}
			if step == 0 {
				first = l
			}
			last = l
			for k, v := range g.Dense {
				for i := range v {
					p.Dense[k][i] -= 0.5 * v[i]
				}
			}
			for k, gr := range g.Sparse {
				full := p.Sparse[k]
				d := len(full.Values) / len(full.IDs)
				for i, id := range gr.IDs {
					for j := 0; j < d; j++ {
						full.Values[int(id)*d+j] -= 0.5 * gr.Values[i*d+j] * 10
					}
				}
			}
		}
		pred, err := m.Predict(p, x, nil)
		if err != nil {
			t.Fatal(err)
		}
		ok := 0
		for i := range pred {
			if pred[i] == int(y[i]) {
				ok++
			}
		}
		if last > first/4 || ok < n*9/10 {
			t.Errorf("%s: loss %.3f -> %.3f, %d/%d correct", spec.Name, first, last, ok, n)
		}
	}
}

// TestBuildShapeOverflow: hashed_lr with hash_buckets 1<<62 and dim 3 (an
// embedding [1<<62, 3], whose int64 size wraps negative) is ErrBadSpec at
// Build, and NumElements reports [3, 1<<62] instead of wrapping.
func TestBuildShapeOverflow(t *testing.T) {
	if _, err := Build(&pb.ModelSpec{Name: "hashed_lr", HashBuckets: 1 << 62, EmbeddingDim: 3}, 784, 10); !errors.Is(err, ErrBadSpec) {
		t.Fatalf("Build(hash_buckets 1<<62) = %v, want ErrBadSpec", err)
	}
	if n, err := NumElements(&pb.ParamSpec{Name: "w", Shape: []int64{3, 1 << 62}}); !errors.Is(err, ErrBadSpec) {
		t.Fatalf("NumElements([3, 1<<62]) = %d, %v; want ErrBadSpec", n, err)
	}
	if v := InitTensor(&pb.ParamSpec{Name: "w", Shape: []int64{3, 1 << 62}}, 1); v != nil {
		t.Fatalf("InitTensor([3, 1<<62]) allocated %d values", len(v))
	}
}
