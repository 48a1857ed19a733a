package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/raftps/raftps/gossip"
	"github.com/raftps/raftps/internal/testing/localcluster"
	"github.com/raftps/raftps/node"
)

// trainingNode starts an in-process node with every role (server,
// pserver, trainer) over the shipped Fashion-MNIST.
func trainingNode(t *testing.T) *node.Node {
	t.Helper()
	return openNode(t, "j1", gossip.RoleServer, gossip.RolePServer, gossip.RoleTrainer)
}

// runFor executes the CLI in-process with args until it returns or d
// passes (then its context is cancelled, as Ctrl-C does); returns stdout.
func runFor(d time.Duration, args ...string) (string, error) {
	var out, errb bytes.Buffer
	root := newRootCmd(&out, &errb)
	root.SetArgs(args)
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	err := root.ExecuteContext(ctx)
	return out.String(), err
}

// checkJSONStream checks the shape of a streaming command's -w json
// (kv watch, lease keepalive): one JSON object per event, one after
// another, each of the one shape (checkJSONSchema); returns them.
func checkJSONStream(t *testing.T, what, out string) []map[string]any {
	t.Helper()
	var objs []map[string]any
	dec := json.NewDecoder(strings.NewReader(out))
	for dec.More() {
		var raw json.RawMessage
		if err := dec.Decode(&raw); err != nil {
			t.Fatalf("%s -w json: not a stream of JSON objects: %v\n%s", what, err, out)
		}
		objs = append(objs, checkJSONObject(t, what, string(raw)))
	}
	return objs
}

// checkJSONObject is checkJSONSchema, and the value is an object (a
// JSON null decodes into a map without error).
func checkJSONObject(t *testing.T, what, out string) map[string]any {
	t.Helper()
	if !strings.HasPrefix(strings.TrimSpace(out), "{") {
		t.Fatalf("%s -w json: not a JSON object:\n%s", what, out)
	}
	return checkJSONSchema(t, what, out)
}

// TestEveryCommandJSON: every command that prints, run with -w json
// against one node with every role, prints the one documented shape
// (printer.go): one JSON object with snake_case keys at every depth, or,
// for a streaming command, a stream of such objects, one per event. It
// covers what TestOpsCommandsJSON does not: job, train, checkpoint, kv
// watch and get --prefix, lease keepalive, members, member
// add|promote|remove, tls. Each must succeed here (a refusal is checked
// to be an error, and prints nothing on stdout).
func TestEveryCommandJSON(t *testing.T) {
	n := trainingNode(t)
	ep := []string{"--endpoints", n.GRPCAddr(), "--command-timeout", "20s", "-w", "json"}
	dir := t.TempDir()
	ds := filepath.Join(localcluster.DatasetRoot(), "fashion-mnist")
	if err := os.MkdirAll(filepath.Join(dir, "pki"), 0o700); err != nil {
		t.Fatal(err)
	}

	// train runs a small job to its end: checkpoints to list afterwards.
	trainArgs := []string{"train", "--name", "tiny", "--model", "mlp", "--hidden", "16", "--dataset", ds, "--records", "2000",
		"--records-per-task", "500", "--passes", "1", "--batch-size", "50", "--pservers", "1", "--replicas", "1",
		"--checkpoint-steps", "5", "--target-accuracy", "0", "--optimizer", "sgd", "--lr", "0.1"}
	start := time.Now()
	out, err := runFor(5*time.Minute, append(ep, trainArgs...)...)
	if err != nil {
		t.Fatalf("train: %v\n%s", err, out)
	}
	t.Logf("train -w json (%v):\n%s", time.Since(start).Round(time.Second), out)
	tr := checkJSONObject(t, "train", out)
	if tr["state"] != "JOB_SUCCEEDED" || tr["job"] != "tiny" {
		t.Fatalf("train -w json: %v", tr)
	}

	for _, args := range [][]string{
		{"job", "list"},
		{"job", "status", "tiny"},
		{"checkpoint", "list", "tiny"},
		{"checkpoint", "best", "tiny"},
		{"checkpoint", "verify", "tiny"},
		{"checkpoint", "export", "tiny", "--out", filepath.Join(dir, "tiny.rpsx")},
		{"job", "submit", "--name", "j2", "--model", "mlp", "--hidden", "16", "--dataset", ds, "--records", "1000", "--records-per-task", "500", "--pservers", "1"},
		{"job", "cancel", "j2"},
		{"job", "delete", "j2"},
		{"kv", "put", "/json/a", "1"},
		{"kv", "put", "/json/b", "2"},
		{"kv", "get", "/json/", "--prefix"},
		{"members"},
		{"member", "list"},
		{"member", "add", "l1", "--peer-urls", "127.0.0.1:1", "--learner"},
		{"member", "remove", "l1"},
		{"kv", "get", "/json/missing"},
		{"lease", "list"},
		{"endpoint", "status"},
		{"endpoint", "status", "--cluster"},
		{"endpoint", "health"},
		{"endpoint", "health", "--cluster"},
		{"status"},
		{"version"},
		{"snapshot", "save", filepath.Join(dir, "snap.db")},
		{"snapshot", "status", filepath.Join(dir, "snap.db")},
		{"snapshot", "restore", filepath.Join(dir, "snap.db"), "--data-dir", filepath.Join(dir, "restored"), "--id", "r1"},
		{"tls", "ca", "create", "--dir", filepath.Join(dir, "pki")},
		{"tls", "cert", "create", "--dir", filepath.Join(dir, "pki"), "--ca", filepath.Join(dir, "pki", "ca.pem"),
			"--ca-key", filepath.Join(dir, "pki", "ca-key.pem"), "--client", "alice", "--role", "admin"},
	} {
		what := strings.Join(args, " ")
		t.Run(what, func(t *testing.T) {
			out, err := runFor(30*time.Second, append(ep, args...)...)
			if err != nil {
				t.Fatalf("%s: %v\n%s", what, err, out)
			}
			obj := checkJSONObject(t, what, out)
			switch what {
			case "checkpoint list tiny":
				if vs, _ := obj["versions"].([]any); len(vs) == 0 {
					t.Fatalf("checkpoint list: no versions: %v", obj)
				}
			case "checkpoint verify tiny":
				if ms, ok := obj["mismatches"].([]any); !ok || len(ms) != 0 {
					t.Fatalf("checkpoint verify: %v, want an empty mismatches list", obj)
				}
			}
		})
	}

	// A refusal is an error and prints nothing on stdout.
	if out, err := runFor(30*time.Second, append(ep, "member", "promote", "j1")...); err == nil || out != "" {
		t.Fatalf("member promote of a voter: %v, stdout %q; want an error and nothing printed", err, out)
	}

	// Streams: kv watch from revision 1 and lease keepalive, until the
	// context ends (Ctrl-C).
	out, err = runFor(3*time.Second, append(ep, "kv", "watch", "/json/", "--prefix", "--rev", "1")...)
	if err != nil {
		t.Fatalf("kv watch: %v", err)
	}
	if evs := checkJSONStream(t, "kv watch", out); len(evs) != 2 {
		t.Fatalf("kv watch -w json: %d events, want 2:\n%s", len(evs), out)
	}
	out, err = runFor(10*time.Second, append(ep, "lease", "grant", "30")...)
	if err != nil {
		t.Fatal(err)
	}
	checkJSONObject(t, "lease grant", out)
	lease := jsonID(t, out)
	out, err = runFor(3*time.Second, append(ep, "lease", "keepalive", lease)...)
	if err != nil {
		t.Fatalf("lease keepalive: %v", err)
	}
	if evs := checkJSONStream(t, "lease keepalive", out); len(evs) == 0 {
		t.Fatalf("lease keepalive -w json printed nothing")
	}
}

// jsonID is the "id" of a -w json object, a JSON number, with every digit
// (a lease id does not fit a float64).
func jsonID(t *testing.T, out string) string {
	t.Helper()
	dec := json.NewDecoder(strings.NewReader(out))
	dec.UseNumber()
	var v struct {
		ID json.Number `json:"id"`
	}
	if err := dec.Decode(&v); err != nil || v.ID == "" {
		t.Fatalf("no numeric id in %s: %v", out, err)
	}
	return v.ID.String()
}
