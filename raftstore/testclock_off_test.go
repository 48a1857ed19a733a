//go:build !raftps_testclock

package raftstore

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestStampWallNoHookWithoutTag: a binary built without TestClockTag
// ignores TestClockOffsetEnv. The test binary runs itself with the
// variable naming a file that holds "1h" (set before the process starts,
// as the Jepsen suite sets it on a node), and the stamp it prints must be
// the wall clock.
func TestStampWallNoHookWithoutTag(t *testing.T) {
	if os.Getenv("RAFTPS_TEST_STAMP_CHILD") == "1" {
		fmt.Printf("offset=%d\n", stampWall()-time.Now().UnixNano())
		return
	}
	file := filepath.Join(t.TempDir(), "offset")
	if err := os.WriteFile(file, []byte("1h"), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestStampWallNoHookWithoutTag$", "-test.count=1")
	cmd.Env = append(os.Environ(), "RAFTPS_TEST_STAMP_CHILD=1", TestClockOffsetEnv+"="+file)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("child: %v\n%s", err, out)
	}
	_, rest, ok := strings.Cut(string(out), "offset=")
	if !ok {
		t.Fatalf("child printed no offset:\n%s", out)
	}
	var ns int64
	if _, err := fmt.Sscanf(rest, "%d", &ns); err != nil {
		t.Fatalf("child output %q: %v", out, err)
	}
	if d := time.Duration(ns); d < -time.Second || d > time.Second {
		t.Fatalf("stamp offset %s with %s set in a build without the %s tag, want about 0", d, TestClockOffsetEnv, TestClockTag)
	}
}
