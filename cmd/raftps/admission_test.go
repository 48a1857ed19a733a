package main

import (
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

// TestSubmitHugeModelRefused (issue 12 item 11): `raftps job submit
// --hidden 1000000000` (784x10^9 parameters) is refused at submit through
// the real CLI and gRPC with InvalidArgument naming the field (the width
// bound), and widths within the bound whose product passes the cluster's
// cap (--hidden 1048576,1048576: 2^40 parameters) with InvalidArgument
// naming jobspec.MaxJobBytes; no job is created.
func TestSubmitHugeModelRefused(t *testing.T) {
	n := mustNode(t)
	ds, _ := filepath.Abs(filepath.Join("..", "..", "datasets", "fashion-mnist"))
	for hidden, want := range map[string]string{"1000000000": "model.hidden[0]", "1048576,1048576": "MaxJobBytes"} {
		_, err := run(t, n, "job", "submit", "--name", "huge", "--hidden", hidden, "--dataset", ds)
		if err == nil || !strings.Contains(err.Error(), "InvalidArgument") || !strings.Contains(err.Error(), want) {
			t.Fatalf("submit --hidden %s: %v, want InvalidArgument naming %s", hidden, err, want)
		}
		t.Logf("--hidden %s refused: %v", hidden, err)
		if _, err := run(t, n, "job", "status", "huge"); err == nil || status.Code(err) != codes.NotFound {
			t.Fatalf("job after the refused submit: %v, want NotFound", err)
		}
	}
}

// TestJobStatusShowsBudgetRefusal (issue 12 item 11): on a pserver node
// whose --pserver-memory-budget (600 KiB) holds one slot of a 1-slot mlp
// 784-64-10 job (407120 bytes), a second such job is admitted but not
// claimed, and `raftps job status` shows why in its latest events. Before,
// `job status` printed no events (and the slot was claimed).
func TestJobStatusShowsBudgetRefusal(t *testing.T) {
	n := nodetest.Open(t, "b1", []string{gossip.RoleServer, gossip.RolePServer}, func(cfg *node.Config) {
		cfg.PServerMemoryBudget = 600 << 10
	})
	ds, _ := filepath.Abs(filepath.Join("..", "..", "datasets", "fashion-mnist"))
	for _, name := range []string{"first", "second"} {
		var err error
		for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
			if _, err = run(t, n, "job", "submit", "--name", name, "--dataset", ds, "--hidden", "64", "--pservers", "1"); err == nil {
				break
			}
		}
		if err != nil {
			t.Fatalf("submit %s: %v", name, err)
		}
		if name == "first" {
			for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(100 * time.Millisecond) {
				out, _ := run(t, n, "job", "status", "first")
				if strings.Contains(out, "pserver slot 0: node b1") {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("slot of first not claimed within 20 s:\n%s", out)
				}
			}
		}
	}
	var out string
	var err error
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		out, err = run(t, n, "job", "status", "second")
		if err == nil && strings.Contains(out, "SLOT_NOT_CLAIMED") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("job status second (%v):\n%s\nwant a SLOT_NOT_CLAIMED event", err, out)
		}
	}
	t.Logf("job status second:\n%s", out)
	if !strings.Contains(out, "slot 0 not claimed by b1: it needs 407120 bytes") || strings.Contains(out, "pserver slot 0:") {
		t.Fatalf("job status second:\n%s\nwant the refusal's figures and no slot served", out)
	}
}
