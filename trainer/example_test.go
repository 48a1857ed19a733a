package trainer_test

import (
	"context"
	"fmt"
	"os"

	pb "github.com/raftps/raftps/api/raftpspb"
	"github.com/raftps/raftps/trainer"
	"github.com/raftps/raftps/trainer/model"
	"github.com/raftps/raftps/trainer/trainertest"
)

// A trainer runs a whole (small) job against in-memory fakes of the master
// and the parameter servers. In a node, cmd wires gRPC clients instead.
func Example() {
	dir, _ := os.MkdirTemp("", "raftps-example")
	defer os.RemoveAll(dir)
	if err := trainertest.WriteSynthetic(dir, 1000, 200, 1); err != nil {
		fmt.Println(err)
		return
	}
	spec := &pb.JobSpec{
		Name:  "demo",
		Model: &pb.ModelSpec{Name: "softmax"},
		// Tasks cover records [0, 1000) in 4 tasks of 250, for 2 passes.
		Dataset:        &pb.DatasetSpec{Path: dir, Format: "fashion-mnist", Records: 1000},
		RecordsPerTask: 250, Passes: 2, BatchSize: 50, Seed: 1, EvalEachPass: true,
		Optimizer: &pb.OptimizerSpec{Name: "momentum", LearningRate: 0.05, Momentum: 0.9},
	}
	master := trainertest.NewMaster(spec)
	ps, _ := trainertest.NewPS(spec, 28*28, 10)

	tr, err := trainer.New(trainer.Config{ID: "t1", Job: "demo"}, master, ps)
	if err != nil {
		fmt.Println(err)
		return
	}
	if err := tr.Run(context.Background()); err != nil { // returns at JOB_OVER
		fmt.Println(err)
		return
	}
	st := tr.Stats()
	last := master.Finished[len(master.Finished)-1].Metrics
	fmt.Printf("train tasks %d, eval tasks %d, examples %d, pushes %d\n", st.Tasks, st.EvalTasks, st.Examples, ps.Version())
	fmt.Printf("test accuracy above 90%%: %v\n", last.Accuracy > 0.9)
	// Output:
	// train tasks 8, eval tasks 2, examples 2000, pushes 40
	// test accuracy above 90%: true
}

// The reference optimizer: two momentum steps on one weight.
func ExampleOptimizer() {
	opt, _ := trainer.NewOptimizer(&pb.OptimizerSpec{Name: "momentum", LearningRate: 0.1, Momentum: 0.9})
	p := model.Params{Dense: map[string][]float32{"w": {1}}}
	for _, g := range []float32{0.5, -1} {
		_ = opt.Update(p, model.Params{Dense: map[string][]float32{"w": {g}}})
		fmt.Printf("w = %.4f\n", p.Dense["w"][0])
	}
	// Output:
	// w = 0.9500
	// w = 1.0050
}
