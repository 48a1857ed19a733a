package main

import (
	"strings"
	"testing"
)

func TestRaftAddrOf(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"10.0.0.4:7001", "10.0.0.4:7001"},
		{"http://10.0.0.4:7001", "10.0.0.4:7001"},
		{"https://node4.example:7001", "node4.example:7001"},
		{"[::1]:7001", "[::1]:7001"},
		{"", ""},
		{"10.0.0.4", ""},
		{"http://10.0.0.4", ""},
		{":7001", ""},
	} {
		got, err := raftAddrOf(tc.in)
		if got != tc.want || (tc.want == "") != (err != nil) {
			t.Errorf("raftAddrOf(%q) = %q, %v; want %q", tc.in, got, err, tc.want)
		}
		if err != nil && !strings.Contains(err.Error(), "--peer-urls") {
			t.Errorf("raftAddrOf(%q): error %q does not name the flag", tc.in, err)
		}
	}
}
