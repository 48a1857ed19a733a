package main

import (
	"bytes"
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// runCode runs the CLI with stdin and returns stdout, the error and the
// exit code main would give it.
func runCode(stdin string, args ...string) (string, error, int) {
	var out, errb bytes.Buffer
	root := newRootCmd(&out, &errb)
	root.SetIn(strings.NewReader(stdin))
	root.SetArgs(args)
	cmd, err := root.ExecuteContextC(context.Background())
	return out.String(), err, exitCode(err, cmd)
}

// TestExitCodes (issue 37): the commands that mirror etcdctl exit with
// etcdctl's codes (128 bad arguments or flags, 2 no node reachable, 3
// malformed txn input, 4 unimplemented); other commands' errors exit 1,
// and the job commands' result codes are theirs.
func TestExitCodes(t *testing.T) {
	n := mustNode(t)
	ep := []string{"--endpoints", n.GRPCAddr(), "--timeout", "10s"}
	for _, c := range []struct {
		args  []string
		stdin string
		want  int
	}{
		{[]string{"kv", "get"}, "", codeBadArgs},
		{[]string{"kv", "get", "/k", "--no-such-flag"}, "", codeBadArgs},
		{[]string{"kv", "get", "/k", "--prefix", "--from-key"}, "", codeBadArgs},
		{[]string{"lease", "grant"}, "", codeBadArgs},
		{[]string{"elect", "/e"}, "", codeBadArgs},
		{[]string{"kv", "get", "/k", "--endpoints", "127.0.0.1:1", "--dial-timeout", "300ms"}, "", codeBadConn},
		{[]string{"member", "list", "--endpoints", "127.0.0.1:1", "--dial-timeout", "300ms"}, "", codeBadConn},
		{[]string{"kv", "txn"}, "bogus(\"k\") = \"1\"\n\n\n\n", codeInvalidInput},
		{[]string{"kv", "txn"}, "\nfrobnicate k\n\n\n", codeInvalidInput},
		{[]string{"kv", "get", "/k"}, "", codeOK},
		{[]string{"job", "status"}, "", codeError}, // not an etcdctl command: 1 as before
	} {
		args := c.args
		if !slices.Contains(args, "--endpoints") {
			args = append(append([]string{}, ep...), args...)
		}
		_, err, code := runCode(c.stdin, args...)
		if code != c.want {
			t.Errorf("raftps %s: exit %d (%v); want %d", strings.Join(c.args, " "), code, err, c.want)
		}
	}
	kvCmd, _, _ := newRootCmd(nil, nil).Find([]string{"kv", "get"})
	if code := exitCode(fmt.Errorf("defrag: %w", status.Error(codes.Unimplemented, "no")), kvCmd); code != codeBadFeature {
		t.Errorf("Unimplemented from an etcdctl command: exit %d, want %d", code, codeBadFeature)
	}
	train, _, _ := newRootCmd(nil, nil).Find([]string{"train"})
	if code := exitCode(&exitError{code: codeJobFailed, err: fmt.Errorf("job failed")}, train); code != 2 {
		t.Errorf("train's job-failed result: exit %d, want 2", code)
	}
}
