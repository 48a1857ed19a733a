package trainer_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"

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
