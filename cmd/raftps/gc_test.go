package main

import (
	"io"
	"log/slog"
	"os"
	"runtime"
	"runtime/debug"
	"testing"
	"time"

	"github.com/bytedance/gopkg/util/gctuner"
)

func TestDefaultGCThreshold(t *testing.T) {
	for _, tc := range []struct{ mem, want uint64 }{
		{0, gcDefaultThreshold},        // unknown: the default
		{64 << 30, gcDefaultThreshold}, // large machine: the default
		{2 << 30, 256 << 20},           // small machine: an eighth
	} {
		if got := defaultGCThreshold(tc.mem); got != tc.want {
			t.Errorf("defaultGCThreshold(%d) = %d, want %d", tc.mem, got, tc.want)
		}
	}
}

// gcPercent is the runtime's GOGC now.
func gcPercent() int {
	p := debug.SetGCPercent(-1)
	debug.SetGCPercent(p)
	return p
}

// waitGCPercent runs GCs until the tuner (called from a finalizer after
// each cycle) has set the runtime's GOGC to want.
func waitGCPercent(t *testing.T, want int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for gcPercent() != want {
		if time.Now().After(deadline) {
			t.Fatalf("GOGC = %d, want %d", gcPercent(), want)
		}
		runtime.GC()
		time.Sleep(10 * time.Millisecond)
	}
}

// TestTuneGC: a heap far below the threshold gets GOGC 500 (the cap), a
// heap above it 100 (the Go default, never less); GOGC in the environment
// keeps the tuner off.
func TestTuneGC(t *testing.T) {
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	if v, ok := os.LookupEnv("GOGC"); ok {
		os.Unsetenv("GOGC")
		t.Cleanup(func() { os.Setenv("GOGC", v) })
	}
	defer debug.SetGCPercent(gcPercent())
	defer gctuner.Tuning(0)

	// A threshold far above this test binary's heap, whatever the
	// package's other tests hold at the moment (hundreds of MiB when a
	// training test runs beside this one).
	tuneGC(1<<40, log)
	waitGCPercent(t, gcMaxPercent)
	gctuner.Tuning(1) // a threshold below any heap
	waitGCPercent(t, gcMinPercent)
	gctuner.Tuning(0)

	t.Setenv("GOGC", "123")
	debug.SetGCPercent(123)
	tuneGC(512<<20, log)
	for range 3 {
		runtime.GC()
		time.Sleep(10 * time.Millisecond)
	}
	if p := gcPercent(); p != 123 {
		t.Fatalf("with GOGC=123 in the environment the runtime's GOGC became %d", p)
	}
}
