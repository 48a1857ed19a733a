package model_test

import (
	"fmt"

	pb "github.com/raftps/raftps/api/raftpspb"
	"github.com/raftps/raftps/trainer/model"
)

// Params lists what the parameter servers must hold for a model.
func ExampleBuild() {
	for _, spec := range []*pb.ModelSpec{
		{Name: "softmax"},
		{Name: "mlp", Hidden: []int32{128}},
		{Name: "hashed_lr", EmbeddingDim: 16, HashBuckets: 1 << 14},
	} {
		m, err := model.Build(spec, 784, 10)
		if err != nil {
			fmt.Println(err)
			return
		}
		fmt.Print(m.Name(), ":")
		for _, p := range m.Params() {
			kind := ""
			if p.Embedding {
				kind = " embedding"
			}
			fmt.Printf(" %s%v%s %v", p.Name, p.Shape, kind, p.Init)
		}
		fmt.Println()
	}
	_, err := model.Build(&pb.ModelSpec{Name: "cnn"}, 784, 10)
	fmt.Println(err)
	// Output:
	// softmax: w[784 10] INIT_GLOROT b[10] INIT_ZEROS
	// mlp: w0[784 128] INIT_GLOROT b0[128] INIT_ZEROS w1[128 10] INIT_GLOROT b1[10] INIT_ZEROS
	// hashed_lr: emb[16384 16] embedding INIT_UNIFORM w[16 10] INIT_GLOROT b[10] INIT_ZEROS
	// model: unknown model "cnn" (known: [softmax mlp hashed_lr])
}

// One SGD step on a two-record batch: Loss fills the gradient of the mean
// loss, the caller applies it.
func ExampleModel_Loss() {
	m, _ := model.Build(&pb.ModelSpec{Name: "softmax"}, 2, 2)
	p := model.InitParams(m, 1)
	x := []float32{1, 0, 0, 1} // two records of 2 features
	y := []uint8{0, 1}
	var g model.Params
	for step := 0; step < 3; step++ {
		loss, correct, _ := m.Loss(p, x, y, &g)
		fmt.Printf("step %d: loss %.3f, %d/2 correct\n", step, loss, correct)
		for name, grad := range g.Dense {
			for i := range grad {
				p.Dense[name][i] -= 1.0 * grad[i]
			}
		}
	}
	// Output:
	// step 0: loss 0.673, 1/2 correct
	// step 1: loss 0.462, 2/2 correct
	// step 2: loss 0.340, 2/2 correct
}
