package model

import (
	"fmt"
	"math"
	"strconv"

	"gonum.org/v1/gonum/blas"
	"gonum.org/v1/gonum/blas/blas64"

	pb "github.com/raftps/raftps/api/raftpspb"
)

// layer is one fully connected layer: z = a·W + b, W [in, out] row-major.
type layer struct {
	w, b    string
	in, out int
}

// denseModel is softmax regression (no hidden layer) or an MLP with ReLU
// hidden layers, both ending in a softmax cross-entropy.
type denseModel struct {
	name    string
	inDim   int
	classes int
	layers  []layer
	specs   []*pb.ParamSpec
}

func newDense(name string, in int, hidden []int, classes int) *denseModel {
	m := &denseModel{name: name, inDim: in, classes: classes}
	sizes := append(append([]int{in}, hidden...), classes)
	for l := 0; l+1 < len(sizes); l++ {
		ly := layer{w: "w", b: "b", in: sizes[l], out: sizes[l+1]}
		if name != "softmax" {
			ly.w, ly.b = "w"+strconv.Itoa(l), "b"+strconv.Itoa(l)
		}
		m.layers = append(m.layers, ly)
	}
	m.specs = denseSpecs(m.layers)
	return m
}

func denseSpecs(layers []layer) []*pb.ParamSpec {
	var specs []*pb.ParamSpec
	for _, ly := range layers {
		specs = append(specs,
			&pb.ParamSpec{Name: ly.w, Shape: []int64{int64(ly.in), int64(ly.out)}, Init: pb.Initializer_INIT_GLOROT},
			&pb.ParamSpec{Name: ly.b, Shape: []int64{int64(ly.out)}, Init: pb.Initializer_INIT_ZEROS})
	}
	return specs
}

func (m *denseModel) Name() string                            { return m.name }
func (m *denseModel) InputDim() int                           { return m.inDim }
func (m *denseModel) Classes() int                            { return m.classes }
func (m *denseModel) Params() []*pb.ParamSpec                 { return cloneSpecs(m.specs) }
func (m *denseModel) SparseRows([]float32) map[string][]int64 { return nil }
func (m *denseModel) Loss(p Params, x []float32, y []uint8, g *Params) (float64, int, error) {
	return lossVia(m, p, x, y, g)
}
func (m *denseModel) Predict(p Params, x []float32, out []int) ([]int, error) {
	return predictVia(m, p, x, out)
}

func (m *denseModel) loss64(p *params64, x []float64, n int, y []uint8, g *params64, pred []int) (float64, int, error) {
	loss, correct, _ := forwardBackward(m.layers, p, g, x, n, y, pred, false)
	return loss, correct, nil
}

func cloneSpecs(specs []*pb.ParamSpec) []*pb.ParamSpec {
	out := make([]*pb.ParamSpec, len(specs))
	for i, s := range specs {
		out[i] = &pb.ParamSpec{Name: s.Name, Shape: append([]int64(nil), s.Shape...), Embedding: s.Embedding, Init: s.Init, Scale: s.Scale}
	}
	return out
}

func general(rows, cols int, data []float64) blas64.General {
	return blas64.General{Rows: rows, Cols: cols, Data: data, Stride: cols}
}

// forwardBackward runs the layers on x (n x layers[0].in) and a softmax
// cross-entropy against y. If y is nil only pred is filled. If g is non-nil
// (zeroed) it receives the gradient of the mean loss; if wantDX, the
// gradient with respect to x (n x in) is returned as well.
//
// Backward pass, with d the gradient at a layer's output z (n x out):
// dW = aᵀ·d, db = Σ_rows d, da = d·Wᵀ, and for the previous ReLU layer
// d_prev = da ⊙ [a > 0]. At the top, d = (softmax(z) - onehot(y)) / n.
func forwardBackward(layers []layer, p *params64, g *params64, x []float64, n int, y []uint8, pred []int, wantDX bool) (loss float64, correct int, dx []float64) {
	acts := make([][]float64, len(layers)+1)
	acts[0] = x
	for l, ly := range layers {
		z := make([]float64, n*ly.out)
		b := p.dense[ly.b]
		for i := 0; i < n; i++ {
			copy(z[i*ly.out:(i+1)*ly.out], b)
		}
		blas64.Gemm(blas.NoTrans, blas.NoTrans, 1, general(n, ly.in, acts[l]), general(ly.in, ly.out, p.dense[ly.w]), 1, general(n, ly.out, z))
		if l+1 < len(layers) {
			for i, v := range z {
				if v < 0 {
					z[i] = 0
				}
			}
		}
		acts[l+1] = z
	}
	k := layers[len(layers)-1].out
	logits := acts[len(layers)]
	// Softmax in place: logits become probabilities.
	for i := 0; i < n; i++ {
		row := logits[i*k : (i+1)*k]
		arg, mx := 0, row[0]
		for j, v := range row {
			if v > mx {
				arg, mx = j, v
			}
		}
		if pred != nil {
			pred[i] = arg
		}
		if y == nil {
			continue
		}
		if arg == int(y[i]) {
			correct++
		}
		zy := row[y[i]] - mx
		var sum float64
		for j, v := range row {
			e := math.Exp(v - mx)
			row[j] = e
			sum += e
		}
		loss += math.Log(sum) - zy
		for j := range row {
			row[j] /= sum
		}
	}
	if y == nil || n == 0 {
		return 0, 0, nil
	}
	loss /= float64(n)
	if g == nil && !wantDX {
		return loss, correct, nil
	}
	d := logits
	inv := 1 / float64(n)
	for i := 0; i < n; i++ {
		d[i*k+int(y[i])] -= 1
	}
	for i := range d {
		d[i] *= inv
	}
	for l := len(layers) - 1; l >= 0; l-- {
		ly := layers[l]
		if g != nil {
			blas64.Gemm(blas.Trans, blas.NoTrans, 1, general(n, ly.in, acts[l]), general(n, ly.out, d), 0, general(ly.in, ly.out, g.dense[ly.w]))
			gb := g.dense[ly.b]
			for i := range gb {
				gb[i] = 0
			}
			for i := 0; i < n; i++ {
				for j, v := range d[i*ly.out : (i+1)*ly.out] {
					gb[j] += v
				}
			}
		}
		if l == 0 && !wantDX {
			break
		}
		da := make([]float64, n*ly.in)
		blas64.Gemm(blas.NoTrans, blas.Trans, 1, general(n, ly.out, d), general(ly.in, ly.out, p.dense[ly.w]), 0, general(n, ly.in, da))
		if l > 0 {
			for i, a := range acts[l] {
				if a <= 0 {
					da[i] = 0
				}
			}
		}
		d = da
	}
	if wantDX {
		dx = d
	}
	return loss, correct, dx
}

func (m *denseModel) String() string { return fmt.Sprintf("%s%v", m.name, m.layers) }
