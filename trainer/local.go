package trainer

import (
	"context"
	"errors"
	"fmt"
	"time"

	pb "github.com/raftps/raftps/api/raftpspb"
	"github.com/raftps/raftps/trainer/dataset"
	"github.com/raftps/raftps/trainer/model"
)

// ErrBadJob: a JobSpec field the trainer needs is missing or out of range.
var ErrBadJob = errors.New("trainer: bad job spec")

// Result is what TrainLocal reports.
type Result struct {
	// Accuracy and Loss are measured on the test split after the last pass.
	Accuracy float64
	Loss     float64
	// TrainLoss is the mean mini-batch loss of the last pass.
	TrainLoss float64
	// Passes has one entry per pass; test metrics only if eval_each_pass.
	Passes []*pb.PassMetric
	// Examples and Steps count the training mini-batch records and updates.
	Examples int64
	Steps    int64
	// TrainTime excludes evaluation; ExamplesPerSec = Examples / TrainTime.
	TrainTime      time.Duration
	ExamplesPerSec float64
}

// TrainLocal trains spec's model in this process, without RPC, the way a
// single trainer and parameter server would: same initial parameters
// (model.InitParams with spec.seed), same shuffled order (dataset.Permutation
// per pass), mini-batches of spec.batch_size cut within each task of
// spec.records_per_task records, same update rules (Optimizer). It returns
// the test accuracy and loss after spec.passes passes (or spec.max_steps
// updates). It is the accuracy reference and the "without RPC" side of the
// throughput comparison. It checks ctx between mini-batches.
func TrainLocal(ctx context.Context, spec *pb.JobSpec, trainDS, testDS *dataset.Dataset) (Result, error) {
	var res Result
	m, err := model.Build(spec.GetModel(), trainDS.Dim, trainDS.Classes)
	if err != nil {
		return res, err
	}
	opt, err := NewOptimizer(spec.GetOptimizer())
	if err != nil {
		return res, err
	}
	records, err := recordCount(spec, trainDS)
	if err != nil {
		return res, err
	}
	batch := int(spec.GetBatchSize())
	if batch <= 0 {
		return res, fmt.Errorf("%w: batch_size %d", ErrBadJob, batch)
	}
	perTask := int(spec.GetRecordsPerTask())
	if perTask <= 0 {
		perTask = records
	}
	passes := max(int(spec.GetPasses()), 1)
	p := model.InitParams(m, spec.GetSeed())
	var (
		x     []float32
		y     []uint8
		grads model.Params
		sub   = model.Params{Dense: p.Dense, Sparse: map[string]model.Rows{}}
		start = time.Now()
		evalT time.Duration
	)
	for pass := 0; pass < passes; pass++ {
		perm := dataset.Permutation(records, spec.GetSeed(), int32(pass))
		var lossSum float64
		var n int64
		for tb := 0; tb < records; tb += perTask {
			for _, b := range dataset.Batches(perm[tb:min(tb+perTask, records)], batch) {
				if err := ctx.Err(); err != nil {
					return res, err
				}
				if spec.GetMaxSteps() > 0 && res.Steps >= spec.GetMaxSteps() {
					break
				}
				x, y = trainDS.Gather(b, x, y)
				for name, ids := range m.SparseRows(x) {
					sub.Sparse[name] = gatherRows(p.Sparse[name], ids, sub.Sparse[name].Values)
				}
				l, _, err := m.Loss(sub, x, y, &grads)
				if err != nil {
					return res, err
				}
				if err := opt.Update(p, grads); err != nil {
					return res, err
				}
				lossSum += l * float64(len(b))
				n += int64(len(b))
				res.Steps++
			}
		}
		res.Examples += n
		pm := &pb.PassMetric{Pass: int32(pass), Examples: n, Step: res.Steps}
		if n > 0 {
			pm.TrainLoss = lossSum / float64(n)
		}
		res.TrainLoss = pm.TrainLoss
		if spec.GetEvalEachPass() && pass+1 < passes {
			t0 := time.Now()
			if pm.TestLoss, pm.TestAccuracy, err = model.Evaluate(m, p, testDS); err != nil {
				return res, err
			}
			evalT += time.Since(t0)
		}
		res.Passes = append(res.Passes, pm)
		if spec.GetMaxSteps() > 0 && res.Steps >= spec.GetMaxSteps() {
			break
		}
	}
	res.TrainTime = time.Since(start) - evalT
	if res.TrainTime > 0 {
		res.ExamplesPerSec = float64(res.Examples) / res.TrainTime.Seconds()
	}
	if res.Loss, res.Accuracy, err = model.Evaluate(m, p, testDS); err != nil {
		return res, err
	}
	last := res.Passes[len(res.Passes)-1]
	last.TestLoss, last.TestAccuracy = res.Loss, res.Accuracy
	return res, nil
}

// recordCount returns spec.dataset.records, or ds.N if it is 0.
func recordCount(spec *pb.JobSpec, ds *dataset.Dataset) (int, error) {
	records := int(spec.GetDataset().GetRecords())
	if records == 0 {
		records = ds.N
	}
	if records < 0 || records > ds.N {
		return 0, fmt.Errorf("%w: dataset.records %d, the data has %d", ErrBadJob, records, ds.N)
	}
	return records, nil
}

// gatherRows copies rows ids of a full table (IDs 0..n-1) into dst.
func gatherRows(table model.Rows, ids []int64, dst []float32) model.Rows {
	dim := len(table.Values) / max(len(table.IDs), 1)
	if cap(dst) < len(ids)*dim {
		dst = make([]float32, len(ids)*dim)
	}
	dst = dst[:len(ids)*dim]
	for i, id := range ids {
		copy(dst[i*dim:(i+1)*dim], table.Values[int(id)*dim:(int(id)+1)*dim])
	}
	return model.Rows{IDs: ids, Values: dst}
}
