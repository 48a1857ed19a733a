//go:build raftps_testclock

package raftstore

import (
	"os"
	"path/filepath"
	"testing"
	"time"
)

// TestStampWallOffset (built with -tags raftps_testclock, as `make test`
// runs it): with the test clock file set, the stamp follows the
// file's duration (re-read after 100 ms), and falls back to no offset when
// the file is missing or unparsable.
func TestStampWallOffset(t *testing.T) {
	old := testClock.path
	t.Cleanup(func() {
		testClock.mu.Lock()
		testClock.path, testClock.read, testClock.off = old, time.Time{}, 0
		testClock.mu.Unlock()
	})
	file := filepath.Join(t.TempDir(), "offset")
	testClock.mu.Lock()
	testClock.path, testClock.read = file, time.Time{}
	testClock.mu.Unlock()
	near := func(want time.Duration) {
		t.Helper()
		got := time.Duration(stampWall() - time.Now().UnixNano())
		if d := got - want; d < -time.Second || d > time.Second {
			t.Fatalf("stamp offset %s, want about %s", got, want)
		}
	}
	near(0) // no file
	if err := os.WriteFile(file, []byte("1h\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	time.Sleep(150 * time.Millisecond)
	near(time.Hour)
	if err := os.WriteFile(file, []byte("-30m"), 0o644); err != nil {
		t.Fatal(err)
	}
	time.Sleep(150 * time.Millisecond)
	near(-30 * time.Minute)
	if err := os.WriteFile(file, []byte("garbage"), 0o644); err != nil {
		t.Fatal(err)
	}
	time.Sleep(150 * time.Millisecond)
	near(0)
}
