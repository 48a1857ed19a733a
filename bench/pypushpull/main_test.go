package main

import (
	"testing"
	"time"
)

// TestCPUSecondsCountsThisProcessWork: cpuSeconds grows by the CPU this
// process burns (the figure bench/python.py sets against Python's
// process_time), and not by time spent asleep.
func TestCPUSecondsCountsThisProcessWork(t *testing.T) {
	c0, err := cpuSeconds()
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(200 * time.Millisecond)
	c1, err := cpuSeconds()
	if err != nil {
		t.Fatal(err)
	}
	if c1 < c0 || c1-c0 > 0.1 {
		t.Fatalf("asleep 200ms: cpuSeconds went %.3f -> %.3f, want about no change", c0, c1)
	}
	// Burn at least 50ms of CPU (bounded by a wall deadline on a loaded machine).
	deadline := time.Now().Add(30 * time.Second)
	x := uint64(1)
	for c := c1; c-c1 < 0.05; {
		for i := 0; i < 1_000_000; i++ {
			x = x*6364136223846793005 + 1442695040888963407
		}
		if c, err = cpuSeconds(); err != nil {
			t.Fatal(err)
		}
		if time.Now().After(deadline) {
			t.Fatalf("30s of spinning: cpuSeconds only went %.3f -> %.3f (x=%d)", c1, c, x)
		}
	}
}
