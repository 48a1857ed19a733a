package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/raftps/raftps/internal/testing/localcluster"
	"github.com/raftps/raftps/schema"
)

// TestJobDelete (issue 12 item 8): `raftps job delete` refuses a running
// job with FailedPrecondition and changes nothing; once the job is
// cancelled it deletes the job and the keys under its prefix (a slot
// record here), so `job status` answers NotFound; deleting it again says
// NotFound. Before, there was no delete command.
func TestJobDelete(t *testing.T) {
	n := mustNode(t)
	ds, _ := filepath.Abs(filepath.Join("..", "..", "datasets", "fashion-mnist"))
	if _, err := run(t, n, "job", "submit", "--name", "del", "--dataset", ds, "--pservers", "1"); err != nil {
		t.Fatalf("submit: %v", err)
	}
	slot := schema.SlotKey("del", 0)
	if out, err := run(t, n, "kv", "put", slot, "x"); err != nil {
		t.Fatalf("kv put %s: %q %v", slot, out, err)
	}
	_, err := run(t, n, "job", "delete", "del")
	if err == nil || !strings.Contains(err.Error(), "FailedPrecondition") || !strings.Contains(err.Error(), "cancel") {
		t.Fatalf("delete of a running job: %v, want FailedPrecondition telling to cancel it", err)
	}
	if out, err := run(t, n, "job", "status", "del"); err != nil || !strings.Contains(out, "running") {
		t.Fatalf("job after the refused delete: %q %v, want it running", out, err)
	}
	if out, err := run(t, n, "kv", "get", slot); err != nil || strings.TrimSpace(out) != "x" {
		t.Fatalf("slot key after the refused delete: %q %v, want it kept", out, err)
	}
	if _, err := run(t, n, "job", "cancel", "del"); err != nil {
		t.Fatalf("cancel: %v", err)
	}
	out, err := run(t, n, "job", "delete", "del")
	if err != nil || !strings.Contains(out, "job del deleted (was cancelled)") {
		t.Fatalf("delete of a cancelled job: %q %v", out, err)
	}
	if _, err := run(t, n, "job", "status", "del"); err == nil || status.Code(err) != codes.NotFound {
		t.Fatalf("job status after delete: %v, want NotFound", err)
	}
	if out, err := run(t, n, "kv", "get", slot); err != nil || out != "" {
		t.Fatalf("slot key after delete: %q %v, want it deleted", out, err)
	}
	if _, err := run(t, n, "job", "delete", "del"); err == nil || status.Code(err) != codes.NotFound {
		t.Fatalf("second delete: %v, want NotFound", err)
	}
}

// nodeCmd runs `raftps node` in-process (server role, loopback ports,
// --insecure) with extra flags until the test ends, and returns a CLI
// against it and a dataset path the submit check accepts (empty files
// under the default dataset root).
func nodeCmd(t *testing.T, extra ...string) (cli func(args ...string) (string, error), ds string) {
	t.Helper()
	ports, err := localcluster.FreePorts(4)
	if err != nil {
		t.Fatal(err)
	}
	a := func(p int) string { return fmt.Sprintf("127.0.0.1:%d", p) }
	dir := filepath.Join(t.TempDir(), "r1")
	ds = filepath.Join(dir, "datasets", "fashion-mnist")
	if err := os.MkdirAll(ds, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"train-images-idx3-ubyte.gz", "train-labels-idx1-ubyte.gz", "t10k-images-idx3-ubyte.gz", "t10k-labels-idx1-ubyte.gz"} {
		if err := os.WriteFile(filepath.Join(ds, f), nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	ctx, stop := context.WithCancel(context.Background())
	done := make(chan struct{})
	var nodeErr error
	go func() {
		defer close(done)
		var out, errb bytes.Buffer
		root := newRootCmd(&out, &errb)
		root.SetArgs(append([]string{"node", "--insecure", "--id", "r1", "--data-dir", dir, "--roles", "server", "--log-level", "error",
			"--grpc-addr", a(ports[0]), "--raft-addr", a(ports[1]), "--gossip-addr", a(ports[2]), "--http-addr", a(ports[3])}, extra...))
		nodeErr = root.ExecuteContext(ctx)
	}()
	t.Cleanup(func() {
		stop()
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			t.Error("node did not stop within 30 s")
		}
	})
	cli = func(args ...string) (string, error) {
		var out, errb bytes.Buffer
		root := newRootCmd(&out, &errb)
		root.SetArgs(append([]string{"--endpoints", a(ports[0]), "--timeout", "10s"}, args...))
		err := root.ExecuteContext(context.Background())
		return out.String(), err
	}
	// Wait for the node to serve.
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(200 * time.Millisecond) {
		if _, err = cli("job", "list"); err == nil {
			return cli, ds
		}
		select {
		case <-done:
			t.Fatalf("the node stopped: %v", nodeErr)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("node not serving within 30 s: %v", err)
		}
	}
}

// submitCancelled submits job name, writes a key under its prefix and
// cancels it.
func submitCancelled(t *testing.T, cli func(args ...string) (string, error), ds, name string) {
	t.Helper()
	if _, err := cli("job", "submit", "--name", name, "--dataset", ds, "--pservers", "1"); err != nil {
		t.Fatalf("submit %s: %v", name, err)
	}
	if _, err := cli("kv", "put", schema.SlotKey(name, 0), "x"); err != nil {
		t.Fatalf("kv put: %v", err)
	}
	if _, err := cli("job", "cancel", name); err != nil {
		t.Fatalf("cancel %s: %v", name, err)
	}
}

// TestRetentionFlags (issue 12 item 8): `raftps node --keep-finished-jobs 1`
// reaches the master: of three cancelled jobs only the newest is kept, the
// others are pruned by the leader with their keys; negative values of
// --keep-finished-jobs and --finished-job-max-age are refused naming the
// flag. Before, neither flag existed and finished jobs were kept forever.
func TestRetentionFlags(t *testing.T) {
	for _, args := range [][]string{{"--keep-finished-jobs", "-1"}, {"--finished-job-max-age", "-1s"}} {
		var out, errb bytes.Buffer
		root := newRootCmd(&out, &errb)
		root.SetArgs(append([]string{"node", "--insecure", "--id", "x", "--data-dir", t.TempDir()}, args...))
		err := root.ExecuteContext(context.Background())
		if err == nil || !strings.Contains(err.Error(), args[0]+" must be >= 0") {
			t.Fatalf("node %v: %v, want a refusal naming %s", args, err, args[0])
		}
	}

	cli, ds := nodeCmd(t, "--keep-finished-jobs", "1")
	var err error
	for _, name := range []string{"old1", "old2", "new"} {
		submitCancelled(t, cli, ds, name)
		time.Sleep(20 * time.Millisecond) // distinct finish times
	}
	var list string
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
		if list, err = cli("job", "list"); err == nil && !strings.Contains(list, "old1") && !strings.Contains(list, "old2") {
			break
		}
	}
	if !strings.Contains(list, "new") || strings.Contains(list, "old1") || strings.Contains(list, "old2") {
		t.Fatalf("job list with --keep-finished-jobs 1 after three cancelled jobs (%v):\n%s\nwant only the newest", err, list)
	}
	for name, want := range map[string]string{"old1": "", "old2": "", "new": "x"} {
		var out string
		for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
			if out, err = cli("kv", "get", schema.SlotKey(name, 0)); err == nil && strings.TrimSpace(out) == want {
				break
			}
		}
		if strings.TrimSpace(out) != want {
			t.Fatalf("slot key of %s: %q, want %q", name, out, want)
		}
	}
}

// TestRetentionMaxAge (issue 12 item 8): `raftps node
// --finished-job-max-age 2s --keep-finished-jobs 0` prunes a cancelled job
// and its keys once it has been finished for 2 s, while a running job is
// kept. Before, the flag did not exist.
func TestRetentionMaxAge(t *testing.T) {
	cli, ds := nodeCmd(t, "--finished-job-max-age", "2s", "--keep-finished-jobs", "0")
	submitCancelled(t, cli, ds, "aged")
	if _, err := cli("job", "submit", "--name", "running", "--dataset", ds, "--pservers", "1"); err != nil {
		t.Fatalf("submit running: %v", err)
	}
	var (
		list string
		err  error
	)
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
		if list, err = cli("job", "list"); err == nil && !strings.Contains(list, "aged") {
			break
		}
	}
	if strings.Contains(list, "aged") || !strings.Contains(list, "running") {
		t.Fatalf("job list with --finished-job-max-age 2s (%v):\n%s\nwant the cancelled job pruned, the running one kept", err, list)
	}
	if out, err := cli("kv", "get", schema.SlotKey("aged", 0)); err != nil || out != "" {
		t.Fatalf("slot key of the pruned job: %q %v, want it deleted", out, err)
	}
}
