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

// TestReplicasDefaultField (issue 34): replicas_default, the master's
// reason for the replicas it chose, is dropped from a spec that reaches
// ValidateSpec with replicas 0 (no choice was made), kept with a set
// replicas, and refused past MaxReplicasDefault bytes naming the field.
func TestReplicasDefaultField(t *testing.T) {
	s := testSpec("r", 10, 1)
	s.ReplicasDefault = "capacity for 2"
	if v, err := ValidateSpec(s); err != nil || v.Replicas != DefaultSlotReplicas || v.ReplicasDefault != "" {
		t.Errorf("replicas 0 with a reason: %v, replicas %d (%q); want %d and no reason", err, v.GetReplicas(), v.GetReplicasDefault(), DefaultSlotReplicas)
	}
	s.Replicas = 2
	if v, err := ValidateSpec(s); err != nil || v.Replicas != 2 || v.ReplicasDefault != "capacity for 2" {
		t.Errorf("replicas 2 with a reason: %v, replicas %d (%q)", err, v.GetReplicas(), v.GetReplicasDefault())
	}
	s.ReplicasDefault = strings.Repeat("x", MaxReplicasDefault+1)
	if _, err := ValidateSpec(s); !errors.Is(err, errs.ErrInvalid) || !strings.Contains(err.Error(), "replicas_default") {
		t.Errorf("a %d-byte reason: %v, want ErrInvalid naming replicas_default", MaxReplicasDefault+1, err)
	}
}
