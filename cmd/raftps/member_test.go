package main

import (
	"bytes"
	"context"
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

// TestMembersAliasSilent (issue 37): `raftps members`, which the README
// named, works and prints nothing on stderr (it printed a deprecation
// notice), and `member list` lists the same members.
func TestMembersAliasSilent(t *testing.T) {
	n := mustNode(t)
	runBoth := func(args ...string) (string, string) {
		var out, errb bytes.Buffer
		root := newRootCmd(&out, &errb)
		root.SetArgs(append([]string{"--endpoints", n.GRPCAddr(), "--timeout", "10s"}, args...))
		if err := root.ExecuteContext(context.Background()); err != nil {
			t.Fatalf("raftps %v: %v", args, err)
		}
		return out.String(), errb.String()
	}
	out, errOut := runBoth("members")
	if errOut != "" || !strings.Contains(out, "t1") {
		t.Fatalf("raftps members: stdout %q, stderr %q; want the member t1 and nothing on stderr", out, errOut)
	}
	if list, _ := runBoth("member", "list"); !strings.Contains(list, "t1") {
		t.Fatalf("raftps member list: %q", list)
	}
}
