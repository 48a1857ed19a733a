package trainer_test

import (
	"context"
	"testing"
	"time"

	pb "github.com/raftps/raftps/api/raftpspb"
	"github.com/raftps/raftps/trainer"
	"github.com/raftps/raftps/trainer/trainertest"
)

var benchModels = []*pb.ModelSpec{
	{Name: "softmax"},
	{Name: "mlp", Hidden: []int32{128}},
	{Name: "hashed_lr", EmbeddingDim: 16, HashBuckets: 1 << 14},
}

// BenchmarkTrainLocal measures single-process training throughput on 10000
// Fashion-MNIST records (batch 64): the "without RPC" side of the ratio.
func BenchmarkTrainLocal(b *testing.B) {
	train, test := mustFashion(b)
	test = test.Head(1000)
	for _, m := range benchModels {
		b.Run(m.Name, func(b *testing.B) {
			spec := fashionSpec(m, &pb.OptimizerSpec{Name: "momentum", LearningRate: 0.01, Momentum: 0.9}, 1)
			spec.Dataset = &pb.DatasetSpec{Records: 10000}
			spec.EvalEachPass = false
			var ex int64
			var dt time.Duration
			for b.Loop() {
				res, err := trainer.TrainLocal(context.Background(), spec, train, test)
				if err != nil {
					b.Fatal(err)
				}
				ex += res.Examples
				dt += res.TrainTime
			}
			b.ReportMetric(float64(ex)/dt.Seconds(), "examples/s")
		})
	}
}

// BenchmarkTrainerLoop runs the full task loop (Trainer.Run) against the
// in-memory fakes of trainertest on the same 10000 records: the loop's own
// cost (pull copies, task bookkeeping) without any network.
func BenchmarkTrainerLoop(b *testing.B) {
	mustFashion(b)
	for _, m := range benchModels {
		b.Run(m.Name, func(b *testing.B) {
			spec := &pb.JobSpec{
				Name: "bench", Model: m, BatchSize: 64, RecordsPerTask: 1000, Passes: 1, Seed: 1,
				Dataset:   &pb.DatasetSpec{Path: fashionDir, Format: "fashion-mnist", Records: 10000},
				Optimizer: &pb.OptimizerSpec{Name: "momentum", LearningRate: 0.01, Momentum: 0.9},
			}
			var ex int64
			var dt time.Duration
			for b.Loop() {
				ps, err := trainertest.NewPS(spec, 784, 10)
				if err != nil {
					b.Fatal(err)
				}
				tr, err := trainer.New(trainer.Config{ID: "t", Job: "bench"}, trainertest.NewMaster(spec), ps)
				if err != nil {
					b.Fatal(err)
				}
				if err := tr.Run(context.Background()); err != nil {
					b.Fatal(err)
				}
				st := tr.Stats()
				ex += st.Examples
				dt += st.TrainTime
			}
			b.ReportMetric(float64(ex)/dt.Seconds(), "examples/s")
		})
	}
}
