package pserver

import (
	"errors"
	"testing"

	pb "github.com/raftps/raftps/api/raftpspb"
)

// TestLayoutShapeOverflow: a shape whose product overflows int64 ([3, 1<<62]
// wraps negative, [4, 1<<62] to zero) is ErrBadSpec from NewLayout,
// NewSlot and NewClient, never a negative size that panics in make.
func TestLayoutShapeOverflow(t *testing.T) {
	for _, shp := range [][]int64{{3, 1 << 62}, {4, 1 << 62}, {1 << 32, 1 << 32}, {-1}} {
		for _, emb := range []bool{false, true} {
			spec := &pb.JobSpec{Name: "j", NumPservers: 1, Params: []*pb.ParamSpec{{Name: "p", Shape: shp, Embedding: emb}}}
			if _, err := NewLayout(spec, 1); !errors.Is(err, ErrBadSpec) {
				t.Errorf("NewLayout(%v, embedding=%v) = %v, want ErrBadSpec", shp, emb, err)
			}
			if _, err := NewSlot(spec, 0, 1); !errors.Is(err, ErrBadSpec) {
				t.Errorf("NewSlot(%v, embedding=%v) = %v, want ErrBadSpec", shp, emb, err)
			}
			if _, err := NewClient(spec, "t", StaticResolver{}); !errors.Is(err, ErrBadSpec) {
				t.Errorf("NewClient(%v, embedding=%v) = %v, want ErrBadSpec", shp, emb, err)
			}
		}
	}
}
