package raftstore

import (
	"os"
	"strings"
	"sync"
	"time"
)

// TestClockOffsetEnv names an environment variable that, when set, names a
// file holding a Go duration ("1h", "-30m", "0s"). The duration is added to
// the wall clock this node stamps into the Raft entries it proposes
// (Entry.now_unix_nano), and the file is re-read at most every 100 ms, so
// a test steps a running leader's clock by rewriting the file (the Jepsen
// suite's clock-step scenario). Test-only: unset (the default), the stamp
// is time.Now() and no file is read. A missing or unparsable file means no
// offset. Monotonic stamps (Entry.mono_nano) are never offset: they are
// what the replicated clock advances by (fsm/clock.go).
const TestClockOffsetEnv = "RAFTPS_TEST_CLOCK_OFFSET_FILE"

var testClock = struct {
	path string
	mu   sync.Mutex
	read time.Time
	off  time.Duration
}{path: os.Getenv(TestClockOffsetEnv)}

// stampWall is the wall clock (Unix ns) stamped into proposed entries.
func stampWall() int64 {
	now := time.Now()
	if testClock.path == "" {
		return now.UnixNano()
	}
	testClock.mu.Lock()
	defer testClock.mu.Unlock()
	if now.Sub(testClock.read) >= 100*time.Millisecond {
		testClock.read, testClock.off = now, 0
		if b, err := os.ReadFile(testClock.path); err == nil {
			if d, err := time.ParseDuration(strings.TrimSpace(string(b))); err == nil {
				testClock.off = d
			}
		}
	}
	return now.Add(testClock.off).UnixNano()
}
