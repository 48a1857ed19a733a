package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/raftps/raftps/cmd/raftps/offline"
	"github.com/raftps/raftps/raftstore"
)

// runArgs executes the CLI in-process with exactly args; returns stdout.
func runArgs(args ...string) (string, error) {
	var out, errb bytes.Buffer
	root := newRootCmd(&out, &errb)
	root.SetArgs(args)
	err := root.ExecuteContext(context.Background())
	return out.String(), err
}

var snakeKey = regexp.MustCompile(`^[a-z][a-z0-9_]*$`)

// checkJSONSchema checks the one JSON shape of -w json: one object whose
// keys, at every depth, are snake_case.
func checkJSONSchema(t *testing.T, what, out string) map[string]any {
	t.Helper()
	var obj map[string]any
	dec := json.NewDecoder(strings.NewReader(out))
	if err := dec.Decode(&obj); err != nil {
		t.Fatalf("%s -w json: not one JSON object: %v\n%s", what, err, out)
	}
	if dec.More() {
		t.Fatalf("%s -w json: more than one JSON value:\n%s", what, out)
	}
	var walk func(v any, path string)
	walk = func(v any, path string) {
		switch v := v.(type) {
		case map[string]any:
			for k, x := range v {
				if !snakeKey.MatchString(k) {
					t.Errorf("%s -w json: key %q at %s is not snake_case", what, k, path)
				}
				walk(x, path+"."+k)
			}
		case []any:
			for _, x := range v {
				walk(x, path+"[]")
			}
		}
	}
	walk(obj, "")
	return obj
}

// Every command's -w json is one JSON object with snake_case keys; an
// unknown -w, an unknown subcommand and an unreachable endpoint fail.
func TestOpsCommandsJSON(t *testing.T) {
	n := mustNode(t)
	ep := []string{"--endpoints", n.GRPCAddr(), "--command-timeout", "10s", "-w", "json"}
	dir := t.TempDir()
	snapFile := filepath.Join(dir, "snap.db")
	lease := ""
	for _, args := range [][]string{
		{"kv", "put", "/ops/a", "1"},
		{"kv", "get", "/ops/a"},
		{"kv", "get", "/ops/missing"},
		{"lease", "grant", "60"},
		{"lease", "list"},
		{"lease", "timetolive", "LEASE", "--keys"},
		{"member", "list"},
		{"endpoint", "status"},
		{"endpoint", "status", "--cluster"},
		{"endpoint", "health", "--cluster"},
		{"status"},
		{"version"},
		{"job", "list"},
		{"snapshot", "save", snapFile},
		{"snapshot", "status", snapFile},
		{"snapshot", "restore", snapFile, "--data-dir", filepath.Join(dir, "restored"), "--id", "r1"},
		{"kv", "del", "/ops/a"},
		{"lease", "revoke", "LEASE"},
	} {
		for i, a := range args {
			if a == "LEASE" {
				args[i] = lease
			}
		}
		what := strings.Join(args, " ")
		out, err := runArgs(append(ep, args...)...)
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		obj := checkJSONSchema(t, what, out)
		if what == "lease grant 60" {
			lease = jsonID(t, out)
		}
		if strings.HasPrefix(what, "snapshot save") && obj["keys"].(float64) < 1 {
			t.Fatalf("snapshot save: %v", obj)
		}
		if what == "endpoint status --cluster" {
			eps := obj["endpoints"].([]any)
			if len(eps) != 1 || eps[0].(map[string]any)["version"] == "" || eps[0].(map[string]any)["db_size"].(float64) <= 0 {
				t.Fatalf("endpoint status --cluster: %v", obj)
			}
		}
	}

	for _, args := range [][]string{
		{"-w", "yaml", "version"},
		{"kv", "bogus"},
		{"bogus"},
	} {
		if _, err := runArgs(append([]string{"--endpoints", n.GRPCAddr()}, args...)...); err == nil {
			t.Errorf("%q: no error", args)
		}
	}
	if _, err := runArgs("kv", "bogus"); !errors.Is(err, ErrUnknownCommand) {
		t.Errorf("kv bogus: %v, want ErrUnknownCommand", err)
	}

	// --dial-timeout bounds the wait for a dead endpoint, well inside
	// --command-timeout.
	start := time.Now()
	_, err := runArgs("--endpoints", "127.0.0.1:1", "--dial-timeout", "300ms", "--command-timeout", "20s", "status")
	if !errors.Is(err, ErrDial) || time.Since(start) > 10*time.Second {
		t.Fatalf("dead endpoint: %v after %s, want ErrDial within the dial timeout", err, time.Since(start))
	}
}

// RAFTPS_* variables set client flags; a flag on the command line wins.
func TestEnvironmentFlags(t *testing.T) {
	n := mustNode(t)
	t.Setenv("RAFTPS_ENDPOINTS", n.GRPCAddr())
	t.Setenv("RAFTPS_WRITE_OUT", "json")
	out, err := runArgs("status")
	if err != nil {
		t.Fatal(err)
	}
	checkJSONSchema(t, "status", out)
	if out, err = runArgs("-w", "simple", "status"); err != nil || !strings.HasPrefix(out, "id: ") {
		t.Fatalf("-w simple over RAFTPS_WRITE_OUT=json: %q, %v", out, err)
	}
	t.Setenv("RAFTPS_DIAL_TIMEOUT", "soon")
	if _, err := runArgs("status"); err == nil || !strings.Contains(err.Error(), "RAFTPS_DIAL_TIMEOUT") {
		t.Fatalf("bad RAFTPS_DIAL_TIMEOUT: %v", err)
	}
}

// A corrupted or truncated snapshot file is refused before anything is
// written; a newer format is refused as such.
func TestSnapshotFileRefused(t *testing.T) {
	n := mustNode(t)
	dir := t.TempDir()
	file := filepath.Join(dir, "snap.db")
	if _, err := runArgs("--endpoints", n.GRPCAddr(), "snapshot", "save", file); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	for name, bad := range map[string][]byte{
		"flipped byte": func() []byte { c := bytes.Clone(b); c[100] ^= 1; return c }(),
		"truncated":    b[:len(b)/2],
	} {
		p := filepath.Join(dir, "bad.db")
		if err := os.WriteFile(p, bad, 0o600); err != nil {
			t.Fatal(err)
		}
		target := filepath.Join(dir, "target-"+strings.ReplaceAll(name, " ", "-"))
		_, err := runArgs("snapshot", "restore", p, "--data-dir", target, "--id", "r1")
		if !errors.Is(err, offline.ErrBadSnapshotFile) {
			t.Fatalf("%s: %v, want offline.ErrBadSnapshotFile", name, err)
		}
		if _, err := os.Stat(target); !errors.Is(err, os.ErrNotExist) {
			t.Fatalf("%s: restore of a bad file created %s", name, target)
		}
	}
	// A second restore into a used data dir is refused.
	target := filepath.Join(dir, "used")
	if _, err := runArgs("snapshot", "restore", file, "--data-dir", target, "--id", "r1"); err != nil {
		t.Fatal(err)
	}
	if _, err := runArgs("snapshot", "restore", file, "--data-dir", target, "--id", "r1"); !errors.Is(err, raftstore.ErrDataDirInUse) {
		t.Fatalf("restore into a used data dir: %v", err)
	}
	// --raft-log-store wal seeds a raft-wal data dir; an unknown store is
	// refused before anything is written.
	walTarget := filepath.Join(dir, "wal")
	if _, err := runArgs("snapshot", "restore", file, "--data-dir", walTarget, "--id", "r1", "--raft-log-store", "wal"); err != nil {
		t.Fatal(err)
	}
	if rec, err := os.ReadFile(filepath.Join(walTarget, "raft", "log-store")); err != nil || strings.TrimSpace(string(rec)) != "wal" {
		t.Fatalf("restore --raft-log-store wal: log-store %q, %v", rec, err)
	}
	if _, err := os.Stat(filepath.Join(walTarget, "raft", "wal")); err != nil {
		t.Fatalf("restore --raft-log-store wal wrote no wal dir: %v", err)
	}
	bad := filepath.Join(dir, "rocks")
	if _, err := runArgs("snapshot", "restore", file, "--data-dir", bad, "--id", "r1", "--raft-log-store", "rocksdb"); err == nil || !strings.Contains(err.Error(), "unknown log store") {
		t.Fatalf("restore --raft-log-store rocksdb: %v", err)
	}
	if _, err := os.Stat(bad); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("a refused restore created %s", bad)
	}
}
