//go:build raftps_testclock

package raftstore

import (
	"os"
	"strings"
	"sync"
	"time"
)

var testClock = struct {
	path string
	mu   sync.Mutex
	read time.Time
	off  time.Duration
}{path: os.Getenv(TestClockOffsetEnv)}

// stampWall is the wall clock (Unix ns) stamped into proposed entries,
// offset by the duration in TestClockOffsetEnv's file.
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
