package schema

import "testing"

func TestLearnerKey(t *testing.T) {
	if got := LearnerKey("n4"); got != "/learners/n4" {
		t.Fatalf("LearnerKey: %q", got)
	}
	for _, tc := range []struct {
		key, id string
		ok      bool
	}{
		{"/learners/n4", "n4", true},
		{"/learners/", "", false},
		{"/learners/n4/x", "", false},
		{"/nodes/n4", "", false},
	} {
		id, ok := ParseLearnerKey(tc.key)
		if ok != tc.ok || (ok && id != tc.id) {
			t.Errorf("ParseLearnerKey(%q) = %q, %v; want %q, %v", tc.key, id, ok, tc.id, tc.ok)
		}
	}
}
