package jobspec

import (
	"errors"
	"testing"

	"github.com/raftps/raftps/api/errs"
	pb "github.com/raftps/raftps/api/raftpspb"
)

func testSpec(name string, records, rpt int64) *pb.JobSpec {
	return &pb.JobSpec{
		Name:               name,
		Model:              &pb.ModelSpec{Name: "softmax"},
		Dataset:            &pb.DatasetSpec{Path: "/data/fashion-mnist", Format: "fashion-mnist", Records: records},
		RecordsPerTask:     rpt,
		Passes:             1,
		BatchSize:          32,
		Optimizer:          &pb.OptimizerSpec{Name: "sgd", LearningRate: 0.1},
		NumPservers:        2,
		TaskTimeoutFloorMs: 1000,
	}
}

// TestNeed: the slot share is the state over num_pservers rounded up, the
// trainer's is twice the dense model without optimizer state, and an
// overflowing spec is ErrInvalid.
func TestNeed(t *testing.T) {
	s := testSpec("x", 10, 1)
	s.Params = []*pb.ParamSpec{{Name: "w", Shape: []int64{1000}}, {Name: "b", Shape: []int64{1}}}
	s.Optimizer.Name = "adam" // 3 tensors per parameter
	s.NumPservers = 3
	n, err := Need(s)
	if err != nil {
		t.Fatal(err)
	}
	state := int64(1001 * BytesPerElement * 3)
	if want := (Bytes{State: state, Slot: (state + 2) / 3, Trainer: 1001 * BytesPerElement * 2}); n != want {
		t.Fatalf("Need = %+v, want %+v", n, want)
	}
	s.NumPservers = 0
	if n, err := Need(s); err != nil || n.Slot != 0 {
		t.Fatalf("Need with no pservers = %+v, %v; want Slot 0", n, err)
	}
	s.Params = []*pb.ParamSpec{{Name: "w", Shape: []int64{1 << 40, 1 << 40}}}
	if _, err := Need(s); !errors.Is(err, errs.ErrInvalid) {
		t.Fatalf("Need of an overflowing spec = %v, want ErrInvalid", err)
	}
}
