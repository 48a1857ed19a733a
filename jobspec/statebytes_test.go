package jobspec

import (
	"errors"
	"math"
	"testing"

	"github.com/raftps/raftps/api/errs"
	pb "github.com/raftps/raftps/api/raftpspb"
)

// TestStateBytes: parameter bytes times the optimizer's state factor
// (issue 12 item 11), the larger of params and the model's lower bound,
// and overflow reported as ErrInvalid rather than a wrapped number.
func TestStateBytes(t *testing.T) {
	params := []*pb.ParamSpec{{Name: "w", Shape: []int64{784, 128}}, {Name: "b", Shape: []int64{128}}}
	elems := int64(784*128 + 128)
	for _, tc := range []struct {
		opt    string
		factor int64
	}{{"sgd", 1}, {"momentum", 2}, {"adagrad", 2}, {"adam", 3}} {
		s := testSpec("x", 10, 1)
		s.Optimizer.Name, s.Params = tc.opt, params
		got, err := StateBytes(s)
		if err != nil || got != elems*4*tc.factor {
			t.Errorf("%s: StateBytes = %d, %v; want %d", tc.opt, got, err, elems*4*tc.factor)
		}
	}
	// No params: the model's hidden widths and embedding table still count.
	s := testSpec("x", 10, 1)
	s.Optimizer.Name = "adam"
	s.Model = &pb.ModelSpec{Name: "mlp", Hidden: []int32{1 << 20, 1 << 20}}
	if got, err := StateBytes(s); err != nil || got < (1<<40)*4*3 {
		t.Errorf("hidden [2^20, 2^20] with adam: StateBytes = %d, %v; want >= %d", got, err, int64(1<<40)*12)
	}
	if _, err := ValidateSpec(s); !errors.Is(err, errs.ErrInvalid) {
		t.Errorf("ValidateSpec of a 12 TiB model = %v, want ErrInvalid", err)
	}
	s.Model = &pb.ModelSpec{Name: "hashed_lr", EmbeddingDim: math.MaxInt32, HashBuckets: math.MaxInt64}
	if _, err := StateBytes(s); !errors.Is(err, errs.ErrInvalid) {
		t.Errorf("overflowing embedding: StateBytes error %v, want ErrInvalid", err)
	}
	// Just under and just over the cap.
	s = testSpec("x", 10, 1)
	s.Params = []*pb.ParamSpec{{Name: "w", Shape: []int64{MaxJobBytes / 4}}}
	if _, err := ValidateSpec(s); err != nil {
		t.Errorf("exactly MaxJobBytes refused: %v", err)
	}
	s.Params[0].Shape[0]++
	if _, err := ValidateSpec(s); !errors.Is(err, errs.ErrInvalid) {
		t.Errorf("MaxJobBytes + 4 accepted: %v", err)
	}
	if n, ok := ParamElements([]int64{3, 1 << 62}); ok {
		t.Errorf("ParamElements([3, 2^62]) = %d, ok", n)
	}
	if n, ok := ParamElements([]int64{1 << 31, 1 << 31, 2}); ok {
		t.Errorf("ParamElements([2^31, 2^31, 2]) = %d, ok (2^63 overflows)", n)
	}
	if n, ok := ParamElements([]int64{1 << 24, 1 << 24}); !ok || n != 1<<48 {
		t.Errorf("ParamElements([2^24, 2^24]) = %d, %v; want 2^48", n, ok)
	}
	for _, dims := range [][]int64{{1<<24 + 1, 1 << 24}, {}, {0}, {5, -1}} {
		if n, ok := ParamElements(dims); ok {
			t.Errorf("ParamElements(%v) = %d, ok", dims, n)
		}
	}
}
