package demo

import (
	"testing"

	"github.com/raftps/raftps/schema"
)

// TestRolledBackSteps: the steps a rollback event's message threw away
// (its from step minus the step of the version rolled back to), 0 for a
// message that is not a rollback (a restore, a promotion).
func TestRolledBackSteps(t *testing.T) {
	for _, tc := range []struct {
		msg  string
		want int64
	}{
		{"slot 1 on n2: rolled back from step 76 to version 2000000050 (epoch 2, step 50; slot 0 was restored)", 26},
		{"slot 0 on n3: rolled back from step 47 to version 1000000000 (epoch 1, step 0; slot 1 was restored)", 47},
		{"slot 0 on n1: version 1000000050 md5 abc from n2: checkpoint", 0},
		{"slot 0 on n2: backup promoted at epoch 31, version 120, step 120, in 14ms (no restore, no rollback)", 0},
	} {
		if got := RolledBackSteps(tc.msg); got != tc.want {
			t.Errorf("RolledBackSteps(%q) = %d, want %d", tc.msg, got, tc.want)
		}
	}
	if schema.EpochStride != 1_000_000_000 {
		t.Fatalf("schema.EpochStride is %d: the cases above assume 1e9", schema.EpochStride)
	}
}
