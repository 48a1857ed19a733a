package version

import (
	"encoding/json"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestMakeBuildStamps (issue 37): the binary `make build` writes reports
// the work tree's version (git describe) and revision (git rev-parse
// HEAD), not "(devel)" and "unknown".
func TestMakeBuildStamps(t *testing.T) {
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	git := func(args ...string) string {
		out, err := exec.Command("git", append([]string{"-C", root}, args...)...).Output()
		if err != nil {
			t.Fatalf("git %s: %v", strings.Join(args, " "), err)
		}
		return strings.TrimSpace(string(out))
	}
	bin := filepath.Join(t.TempDir(), "raftps")
	if out, err := exec.Command("make", "-s", "-C", root, "build", "BIN="+bin).CombinedOutput(); err != nil {
		t.Fatalf("make build: %v\n%s", err, out)
	}
	out, err := exec.Command(bin, "version", "-w", "json").Output()
	if err != nil {
		t.Fatalf("raftps version: %v", err)
	}
	var in Info
	if err := json.Unmarshal(out, &in); err != nil {
		t.Fatalf("raftps version -w json: %v\n%s", err, out)
	}
	if want := git("describe", "--tags", "--always", "--dirty"); in.Version != want {
		t.Errorf("version %q, want %q (git describe)", in.Version, want)
	}
	if want := git("rev-parse", "HEAD"); in.Revision != want {
		t.Errorf("revision %q, want %q (git rev-parse HEAD)", in.Revision, want)
	}
	if in.Time == "" {
		t.Errorf("commit time not stamped: %s", out)
	}
	if want := git("status", "--porcelain") != ""; in.Modified != want {
		t.Errorf("modified %t, want %t (git status)", in.Modified, want)
	}
}
