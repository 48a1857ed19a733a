package trainer_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	pb "github.com/raftps/raftps/api/raftpspb"
	"github.com/raftps/raftps/trainer"
	"github.com/raftps/raftps/trainer/dataset"
)

// fashionDir is the repository's copy of Fashion-MNIST.
var fashionDir = filepath.Join("..", "datasets", "fashion-mnist")

func mustFashion(tb testing.TB) (train, test *dataset.Dataset) {
	tb.Helper()
	if _, err := os.Stat(filepath.Join(fashionDir, "train-images-idx3-ubyte.gz")); err != nil {
		tb.Fatalf("the repository's copy of Fashion-MNIST is missing (datasets/fashion-mnist): %v", err)
	}
	train, err := dataset.LoadFashionMNIST(fashionDir, "train")
	if err != nil {
		tb.Fatal(err)
	}
	test, err = dataset.LoadFashionMNIST(fashionDir, "test")
	if err != nil {
		tb.Fatal(err)
	}
	return train, test
}

func fashionSpec(m *pb.ModelSpec, opt *pb.OptimizerSpec, passes int32) *pb.JobSpec {
	return &pb.JobSpec{
		Name: "local", Model: m, Optimizer: opt, Passes: passes, BatchSize: 64,
		RecordsPerTask: 1000, Seed: 1, EvalEachPass: true,
	}
}

// TestTrainLocalFashionMNIST trains on all 60000 records and checks the
// test accuracy against the usual figures for these models.
func TestTrainLocalFashionMNIST(t *testing.T) {
	if testing.Short() || raceEnabled {
		t.Skip("trains on full Fashion-MNIST; skipped with -short and -race")
	}
	train, test := mustFashion(t)
	for _, tc := range []struct {
		name   string
		model  *pb.ModelSpec
		opt    *pb.OptimizerSpec
		passes int32
		want   float64
	}{
		// 84.1% after 3 passes (momentum 0.9, lr 0.01 gives 83.3%, and 83.8%
		// after 10); logistic regression tops out near 84% (Xiao et al. 2017).
		{"softmax", &pb.ModelSpec{Name: "softmax"}, &pb.OptimizerSpec{Name: "adagrad", LearningRate: 0.1}, 3, 0.835},
		// 85.7% after 3 passes.
		{"mlp-128", &pb.ModelSpec{Name: "mlp", Hidden: []int32{128}}, &pb.OptimizerSpec{Name: "momentum", LearningRate: 0.01, Momentum: 0.9}, 3, 0.85},
		// 82.6% after 1 pass.
		{"hashed_lr", &pb.ModelSpec{Name: "hashed_lr", EmbeddingDim: 16, HashBuckets: 1 << 14}, &pb.OptimizerSpec{Name: "momentum", LearningRate: 0.01, Momentum: 0.9}, 1, 0.80},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t0 := time.Now()
			res, err := trainer.TrainLocal(context.Background(), fashionSpec(tc.model, tc.opt, tc.passes), train, test)
			if err != nil {
				t.Fatal(err)
			}
			for _, p := range res.Passes {
				t.Logf("pass %d: train loss %.4f, test loss %.4f, test accuracy %.4f", p.Pass, p.TrainLoss, p.TestLoss, p.TestAccuracy)
			}
			t.Logf("%s: test accuracy %.4f, loss %.4f, %d steps, %.0f examples/s, wall %v",
				tc.name, res.Accuracy, res.Loss, res.Steps, res.ExamplesPerSec, time.Since(t0).Round(time.Millisecond))
			if res.Accuracy < tc.want {
				t.Errorf("test accuracy %.4f < %.2f", res.Accuracy, tc.want)
			}
		})
	}
}

func TestTrainLocalSpec(t *testing.T) {
	dir := synthDir(t)
	train, err := dataset.LoadFashionMNIST(dir, "train")
	if err != nil {
		t.Fatal(err)
	}
	test, err := dataset.LoadFashionMNIST(dir, "test")
	if err != nil {
		t.Fatal(err)
	}
	spec := smallSpec(dir, &pb.ModelSpec{Name: "hashed_lr", EmbeddingDim: 8, HashBuckets: 4096})
	res, err := trainer.TrainLocal(context.Background(), spec, train, test)
	if err != nil {
		t.Fatal(err)
	}
	if res.Steps != 80 || res.Examples != 4000 || len(res.Passes) != 2 || res.Accuracy < 0.9 || res.ExamplesPerSec <= 0 {
		t.Errorf("result %+v", res)
	}
	spec.MaxSteps = 5
	if res, err = trainer.TrainLocal(context.Background(), spec, train, test); err != nil || res.Steps != 5 {
		t.Errorf("max_steps 5: %d steps, err %v", res.Steps, err)
	}
	for _, bad := range []func(*pb.JobSpec){
		func(s *pb.JobSpec) { s.BatchSize = 0 },
		func(s *pb.JobSpec) { s.Dataset.Records = 1 << 20 },
	} {
		s := smallSpec(dir, &pb.ModelSpec{Name: "softmax"})
		bad(s)
		if _, err := trainer.TrainLocal(context.Background(), s, train, test); !errors.Is(err, trainer.ErrBadJob) {
			t.Errorf("%v: err %v, want ErrBadJob", s, err)
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := trainer.TrainLocal(ctx, smallSpec(dir, &pb.ModelSpec{Name: "softmax"}), train, test); !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled: err %v", err)
	}
}
