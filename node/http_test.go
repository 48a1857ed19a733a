package node

import (
	"testing"

	"github.com/raftps/raftps/raftstore"
)

// TestRaftReady: /readyz's raft condition is a known leader and an FSM
// within readyMaxLag entries of the commit index. Entries that never reach
// the FSM (a new leader's no-op, the configuration) do not make a leader
// unready, so readiness does not flip from 200 to 503 just after an
// election; a node replaying its log does stay unready.
func TestRaftReady(t *testing.T) {
	for _, tc := range []struct {
		name string
		st   raftstore.Status
		want bool
	}{
		{"no leader", raftstore.Status{CommitIndex: 5, AppliedIndex: 5}, false},
		{"fresh leader, nothing committed", raftstore.Status{LeaderID: "n1"}, true},
		{"configuration and no-op committed, no command yet", raftstore.Status{LeaderID: "n1", CommitIndex: 2}, true},
		{"caught up", raftstore.Status{LeaderID: "n1", CommitIndex: 900, AppliedIndex: 900}, true},
		{"a moment behind", raftstore.Status{LeaderID: "n1", CommitIndex: 900, AppliedIndex: 897}, true},
		{"at the limit", raftstore.Status{LeaderID: "n1", CommitIndex: 1000 + readyMaxLag, AppliedIndex: 1000}, true},
		{"replaying its log", raftstore.Status{LeaderID: "n1", CommitIndex: 1001 + readyMaxLag, AppliedIndex: 1000}, false},
		{"restored from a snapshot past the commit index", raftstore.Status{LeaderID: "n1", CommitIndex: 10, AppliedIndex: 5000}, true},
	} {
		if got := raftReady(tc.st); got != tc.want {
			t.Errorf("%s: raftReady(commit %d, applied %d, leader %q) = %v, want %v", tc.name, tc.st.CommitIndex, tc.st.AppliedIndex, tc.st.LeaderID, got, tc.want)
		}
	}
}
