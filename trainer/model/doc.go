// Package model holds the built-in classifiers and their hand-written
// gradients: "softmax" (multinomial logistic regression), "mlp" (ReLU hidden
// layers) and "hashed_lr" (hashed sparse features through an embedding
// table, to exercise row-sharded parameters). All end in a softmax
// cross-entropy averaged over the mini-batch.
//
//	m, err := model.Build(&pb.ModelSpec{Name: "mlp", Hidden: []int32{128}}, 784, 10)
//	spec.Params = m.Params()           // names, shapes, initializers for the pservers
//	p := model.InitParams(m, spec.Seed) // or pulled from the pservers
//	var g model.Params
//	loss, correct, err := m.Loss(p, x, y, &g) // g: gradient of the mean loss
//	testLoss, acc, err := model.Evaluate(m, p, testDS)
//
// # Parameters
//
// Parameters travel as float32 (Params.Dense: row-major tensors, a weight
// [in, out] maps input i to output j at i*out+j). Embedding tables are never
// pulled whole: SparseRows(x) names the rows a batch reads, the caller
// fetches those into Params.Sparse, and Loss returns their gradients as
// Rows with the same ids. Computation is float64 on gonum's BLAS
// (blas64.Gemm); only the wire format is float32.
//
// Parameter names: softmax "w" [in, classes], "b" [classes]; mlp "w0", "b0",
// "w1", "b1", ... one pair per layer; hashed_lr "emb" [buckets, dim]
// (embedding), "w" [dim, classes], "b" [classes]. Weights use Glorot
// uniform, biases zeros, embeddings U(-0.01, 0.01) (see InitTensor).
//
// # Correctness
//
// Every gradient is checked in the tests against central finite differences
// in float64 (relative error < 1e-4) for each model.
//
// # Concurrency
//
// Models are immutable after Build and safe for concurrent use; Params and
// gradients belong to the caller.
package model
