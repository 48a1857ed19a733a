package psclient

import (
	"os/exec"
	"slices"
	"strings"
	"testing"
)

// TestTrainerLinksNoServer: a trainer links the pserver client and the
// wire codec, never the pserver server (Slot, Server) or its optimizers
// (go list -deps over psclient and trainer/...).
func TestTrainerLinksNoServer(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps",
		"github.com/raftps/raftps/pserver/psclient", "github.com/raftps/raftps/trainer/...").CombinedOutput()
	if err != nil {
		t.Fatalf("go list -deps: %v\n%s", err, out)
	}
	deps := strings.Fields(string(out))
	if !slices.Contains(deps, "github.com/raftps/raftps/pserver/wire") {
		t.Fatalf("go list -deps lists no pserver/wire; the check reads nothing:\n%s", out)
	}
	for _, bad := range []string{"github.com/raftps/raftps/pserver"} {
		if slices.Contains(deps, bad) {
			t.Errorf("a trainer links %s", bad)
		}
	}
}
