package model

import (
	"fmt"

	"github.com/raftps/raftps/trainer/dataset"
)

// EvalBatch is the number of records Evaluate scores at a time.
const EvalBatch = 1000

// Evaluate returns the mean cross-entropy loss and the accuracy (fraction of
// records whose arg-max prediction is the label) of m with parameters p over
// every record of ds. For embedding models p.Sparse must hold every row that
// SparseRows(ds.Images) names (InitParams' full tables do). An empty ds
// gives (0, 0, nil).
func Evaluate(m Model, p Params, ds *dataset.Dataset) (loss, accuracy float64, err error) {
	if ds.Dim != m.InputDim() {
		return 0, 0, fmt.Errorf("%w: dataset has %d features, model %s wants %d", ErrShape, ds.Dim, m.Name(), m.InputDim())
	}
	if ds.N == 0 {
		return 0, 0, nil
	}
	var sum float64
	var correct int
	for b := 0; b < ds.N; b += EvalBatch {
		e := min(b+EvalBatch, ds.N)
		l, c, err := m.Loss(p, ds.Images[b*ds.Dim:e*ds.Dim], ds.Labels[b:e], nil)
		if err != nil {
			return 0, 0, fmt.Errorf("evaluate records [%d, %d): %w", b, e, err)
		}
		sum += l * float64(e-b)
		correct += c
	}
	return sum / float64(ds.N), float64(correct) / float64(ds.N), nil
}
