package etcdapi_test

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/raftps/raftps/raftstore/etcdapi"
)

// TestSnapshotFileRefusedByEtcdctl runs Debian's etcdctl (3.4, package
// etcd-client) on a snapshot streamed by Maintenance.Snapshot (what
// `etcdctl snapshot save` writes from raftps): `snapshot status` fails
// naming `raftps snapshot status|restore` (it said "invalid database"),
// `snapshot restore` refuses it at the hash check without panicking (it
// panicked in etcd's backend), and the file still parses as raftps'
// snapshot.
func TestSnapshotFileRefusedByEtcdctl(t *testing.T) {
	e := newEnv(t, 0)
	ctx := ctxT(t)
	mustPut(t, e.cli, "/s/a", "1")
	rc, err := e.cli.Snapshot(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	if _, err := buf.ReadFrom(rc); err != nil {
		t.Fatal(err)
	}
	if _, err := etcdapi.ParseSnapshot(buf.Bytes()); err != nil {
		t.Fatalf("raftps' own reader: %v", err)
	}
	dir := t.TempDir()
	file := filepath.Join(dir, "raftps.db")
	if err := os.WriteFile(file, buf.Bytes(), 0o600); err != nil {
		t.Fatal(err)
	}
	run := func(args ...string) (string, int) {
		cctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		cmd := exec.CommandContext(cctx, "etcdctl", args...)
		cmd.Env = append(cmd.Environ(), "ETCDCTL_API=3")
		out, err := cmd.CombinedOutput()
		var ee *exec.ExitError
		if err != nil && !errors.As(err, &ee) {
			t.Fatalf("etcdctl %s: %v (install Debian's etcd-client)", args[1], err)
		}
		return string(out), cmd.ProcessState.ExitCode()
	}
	out, code := run("snapshot", "status", file)
	t.Logf("etcdctl snapshot status: exit %d: %s", code, out)
	if code != 1 || !strings.Contains(out, "NOT AN ETCD SNAPSHOT") || !strings.Contains(out, "raftps snapshot status") ||
		!strings.Contains(out, "raftps snapshot restore") {
		t.Errorf("etcdctl snapshot status: exit %d, %q; want exit 1 naming raftps snapshot status and restore", code, out)
	}
	out, code = run("snapshot", "restore", file, "--data-dir", filepath.Join(dir, "etcd"))
	t.Logf("etcdctl snapshot restore: exit %d: %s", code, out)
	if code != 1 || strings.Contains(out, "panic") || !strings.Contains(out, "expected sha256") {
		t.Errorf("etcdctl snapshot restore: exit %d, %q; want exit 1 at the hash check, no panic", code, out)
	}
	if _, err := os.Stat(filepath.Join(dir, "etcd", "member", "wal")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("etcdctl snapshot restore wrote a WAL: %v", err)
	}
}
