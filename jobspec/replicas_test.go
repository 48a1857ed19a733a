package jobspec

import (
	"errors"
	"strings"
	"testing"

	"github.com/raftps/raftps/api/errs"
)

// TestReplicas (issue 34): replicas 0 becomes DefaultSlotReplicas (1); 1 to
// MaxSlotReplicas pass; a negative count or more than MaxSlotReplicas is
// ErrInvalid naming the field.
func TestReplicas(t *testing.T) {
	for _, tc := range []struct {
		in, want int32
		bad      bool
	}{{0, DefaultSlotReplicas, false}, {1, 1, false}, {2, 2, false}, {MaxSlotReplicas, MaxSlotReplicas, false}, {MaxSlotReplicas + 1, 0, true}, {-1, 0, true}} {
		s := testSpec("r", 10, 1)
		s.Replicas = tc.in
		v, err := ValidateSpec(s)
		if tc.bad {
			if !errors.Is(err, errs.ErrInvalid) || !strings.Contains(err.Error(), "replicas") {
				t.Errorf("replicas %d: %v, want ErrInvalid naming replicas", tc.in, err)
			}
			continue
		}
		if err != nil || v.Replicas != tc.want {
			t.Errorf("replicas %d: %v, replicas %d; want %d", tc.in, err, v.GetReplicas(), tc.want)
		}
	}
}
