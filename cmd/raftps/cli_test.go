package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/raftps/raftps/gossip"
	"github.com/raftps/raftps/internal/testing/nodetest"
	"github.com/raftps/raftps/node"
)

// mustNode starts an in-process single-node cluster with the server role
// (plaintext: the CLI tests dial it without certificates).
func mustNode(t *testing.T) *node.Node {
	t.Helper()
	return openNode(t, "t1", gossip.RoleServer)
}

// openNode starts an in-process node id with roles (nodetest.Open,
// plaintext) and waits until it leads.
func openNode(t *testing.T, id string, roles ...string) *node.Node {
	t.Helper()
	return nodetest.Open(t, id, roles, nil)
}

// run executes the CLI in-process against n and returns stdout.
func run(t *testing.T, n *node.Node, args ...string) (string, error) {
	t.Helper()
	var out, errb bytes.Buffer
	root := newRootCmd(&out, &errb)
	root.SetArgs(append([]string{"--endpoints", n.GRPCAddr(), "--timeout", "10s"}, args...))
	err := root.ExecuteContext(context.Background())
	return out.String(), err
}

func TestNodeAndCLI(t *testing.T) {
	n := mustNode(t)
	if out, err := run(t, n, "kv", "put", "/cli/a", "hello"); err != nil || strings.TrimSpace(out) != "OK" {
		t.Fatalf("kv put: %q %v", out, err)
	}
	if out, err := run(t, n, "kv", "get", "/cli/a"); err != nil || strings.TrimSpace(out) != "hello" {
		t.Fatalf("kv get: %q %v", out, err)
	}
	if out, err := run(t, n, "kv", "get", "/cli/missing"); err != nil || out != "" {
		t.Fatalf("get of a missing key: %q, %v; want no output and exit 0 (etcdctl's)", out, err)
	}
	out, err := run(t, n, "status", "-o", "json")
	if err != nil {
		t.Fatal(err)
	}
	var st map[string]any
	if err := json.Unmarshal([]byte(out), &st); err != nil {
		t.Fatalf("status json: %v\n%s", err, out)
	}
	for _, k := range []string{"id", "leader", "term", "commit_index", "applied_index", "voters", "errors"} {
		if _, ok := st[k]; !ok {
			t.Errorf("status -o json lacks %q: %s", k, out)
		}
	}
	if st["leader"] != "t1" {
		t.Errorf("leader %v, want t1", st["leader"])
	}
	// A bad spec is refused with the field named, and nothing is created.
	ds, _ := filepath.Abs(filepath.Join("..", "..", "datasets", "fashion-mnist"))
	_, err = run(t, n, "job", "submit", "--name", "bad", "--lr", "-1", "--dataset", ds)
	if err == nil || !strings.Contains(err.Error(), "InvalidArgument") || !strings.Contains(err.Error(), "learning_rate") {
		t.Fatalf("bad spec: %v", err)
	}
	if out, err := run(t, n, "job", "list"); err != nil || strings.Contains(out, "bad") {
		t.Fatalf("job list after a rejected submit: %q %v", out, err)
	}
	// /readyz answers once a leader is known and the FSM caught up.
	resp, err := http.Get("http://" + n.HTTPAddr() + "/readyz")
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("readyz: %v %v", resp, err)
	}
	resp.Body.Close()
	// Close is safe twice.
	if err := n.Close(); err != nil {
		t.Fatalf("close: %v", err)
	}
	if err := n.Close(); err != nil {
		t.Fatalf("second close: %v", err)
	}
}

// TestTrainDetach: cancelling `raftps train` (Ctrl-C) detaches and leaves
// the job running.
func TestTrainDetach(t *testing.T) {
	n := mustNode(t)
	ds, _ := filepath.Abs(filepath.Join("..", "..", "datasets", "fashion-mnist"))
	var out, errb bytes.Buffer
	root := newRootCmd(&out, &errb)
	root.SetArgs([]string{"--endpoints", n.GRPCAddr(), "train", "--name", "detach", "--dataset", ds, "--passes", "1"})
	// Ctrl-C cancels the command's context (signal.NotifyContext); there
	// are no trainers here, so the job waits until then.
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	time.AfterFunc(2*time.Second, cancel)
	if err := root.ExecuteContext(ctx); err != nil {
		t.Fatalf("train after Ctrl-C: %v (want a clean detach)\n%s", err, errb.String())
	}
	if !strings.Contains(errb.String(), "detached") {
		t.Fatalf("no detach message:\n%s", errb.String())
	}
	got, err := run(t, n, "job", "status", "detach", "-o", "json")
	if err != nil || !strings.Contains(got, "JOB_RUNNING") {
		t.Fatalf("job after detach: %v\n%s", err, got)
	}
}

// TestErrorsNameNoPackage (issue 37): the CLI's errors read as a user
// would say them, without the server's Go package prefixes, and keep
// their gRPC code (a script can still ask for it). `job status` of an
// unknown job printed "NotFound: fsm: not found: job \"nosuch\"".
func TestErrorsNameNoPackage(t *testing.T) {
	n := mustNode(t)
	_, err := run(t, n, "job", "status", "nosuch")
	if err == nil || err.Error() != `job "nosuch" not found` || status.Code(err) != codes.NotFound {
		t.Fatalf("job status nosuch: %v (code %v); want `job \"nosuch\" not found` with code NotFound", err, status.Code(err))
	}
	ds, _ := filepath.Abs(filepath.Join("..", "..", "datasets", "fashion-mnist"))
	_, err = run(t, n, "job", "submit", "--name", "bad", "--lr", "-1", "--dataset", ds)
	if err == nil || strings.Contains(err.Error(), "fsm:") || strings.Contains(err.Error(), "invalid argument: ") ||
		!strings.HasPrefix(err.Error(), "InvalidArgument: ") || !strings.Contains(err.Error(), "learning_rate") {
		t.Fatalf("bad spec: %v; want InvalidArgument naming learning_rate and no package", err)
	}
}

// TestGetPutEtcdctlFlags (issue 37): kv get takes etcdctl's --keys-only,
// --print-value-only, --limit and --from-key (refusing it with --prefix,
// as etcdctl does), and kv put --prev-kv prints the previous key and
// value after OK.
func TestGetPutEtcdctlFlags(t *testing.T) {
	n := mustNode(t)
	for _, kv := range [][2]string{{"/f/a", "1"}, {"/f/b", "2"}, {"/f/c", "3"}, {"/g/a", "4"}} {
		if _, err := run(t, n, "kv", "put", kv[0], kv[1]); err != nil {
			t.Fatal(err)
		}
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"kv", "get", "/f/", "--prefix"}, "/f/a\n1\n/f/b\n2\n/f/c\n3\n"},
		{[]string{"kv", "get", "/f/", "--prefix", "--keys-only"}, "/f/a\n/f/b\n/f/c\n"},
		{[]string{"kv", "get", "/f/", "--prefix", "--print-value-only"}, "1\n2\n3\n"},
		{[]string{"kv", "get", "/f/", "--prefix", "--limit", "2"}, "/f/a\n1\n/f/b\n2\n"},
		{[]string{"kv", "get", "/f/c", "--from-key", "--limit", "2"}, "/f/c\n3\n/g/a\n4\n"}, // the node's own keys (/nodes/...) follow
		{[]string{"kv", "get", "/f/c", "--from-key", "--keys-only", "--limit", "1"}, "/f/c\n"},
		{[]string{"kv", "put", "/f/a", "10", "--prev-kv"}, "OK\n/f/a\n1\n"},
		{[]string{"kv", "put", "/f/new", "1", "--prev-kv"}, "OK\n"},
	} {
		out, err := run(t, n, c.args...)
		if err != nil || out != c.want {
			t.Errorf("raftps %s: %q, %v; want %q", strings.Join(c.args, " "), out, err, c.want)
		}
	}
	for _, bad := range [][]string{{"--prefix", "--from-key"}, {"--keys-only", "--print-value-only"}, {"--limit", "-1"}} {
		if _, err := run(t, n, append([]string{"kv", "get", "/f/"}, bad...)...); !errors.Is(err, ErrFlags) {
			t.Errorf("kv get %v: %v; want ErrFlags", bad, err)
		}
	}
}

// TestGetRev (issue 37): kv get --rev reads a key as it was at a revision
// (etcdctl's --rev), refuses a future revision with the store's message
// and a negative one as a flag error.
func TestGetRev(t *testing.T) {
	n := mustNode(t)
	out, err := run(t, n, "-w", "json", "kv", "put", "/v/a", "1")
	if err != nil {
		t.Fatal(err)
	}
	var put struct {
		Header struct {
			Revision int64 `json:"revision"`
		} `json:"header"`
	}
	if err := json.Unmarshal([]byte(out), &put); err != nil || put.Header.Revision == 0 {
		t.Fatalf("put -w json: %q, %v", out, err)
	}
	rev := put.Header.Revision
	if _, err := run(t, n, "kv", "put", "/v/a", "2"); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ rev, want string }{{fmt.Sprint(rev), "1\n"}, {"0", "2\n"}, {fmt.Sprint(rev - 1), ""}} {
		if out, err := run(t, n, "kv", "get", "/v/a", "--rev", c.rev); err != nil || out != c.want {
			t.Errorf("kv get /v/a --rev %s: %q, %v; want %q", c.rev, out, err, c.want)
		}
	}
	if _, err := run(t, n, "kv", "get", "/v/a", "--rev", fmt.Sprint(rev+1000)); err == nil || !strings.Contains(err.Error(), "future") {
		t.Errorf("kv get --rev in the future: %v; want the future-revision error", err)
	}
	if _, err := run(t, n, "kv", "get", "/v/a", "--rev", "-1"); !errors.Is(err, ErrFlags) {
		t.Errorf("kv get --rev -1: %v; want ErrFlags", err)
	}
}
