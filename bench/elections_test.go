package bench

import (
	"context"
	"strings"
	"testing"
)

// TestElectionsNeedsStressNG: a loaded phase without stress-ng on PATH is
// an error naming the package, before any node starts (not a quiet
// "loaded" phase without load).
func TestElectionsNeedsStressNG(t *testing.T) {
	t.Setenv("PATH", t.TempDir())
	_, err := Elections(context.Background(), ElectionsConfig{Bin: "/nonexistent/raftps", Dir: t.TempDir(), Hogs: 4})
	if err == nil || !strings.Contains(err.Error(), "apt-get install stress-ng") {
		t.Fatalf("Elections without stress-ng: %v; want an error naming stress-ng", err)
	}
}

// TestElectionsResultString: the one line raftps-bench elections prints.
func TestElectionsResultString(t *testing.T) {
	r := ElectionsResult{IdleTermsPerMin: 0, LoadedTermsPerMin: 0.125, IdleFailover: []float64{1.1, 0.9, 1.3},
		IdleLoad: "9.1", LoadedLoad: "14.2"}
	want := "idle: 0.00 terms/min, failover median 1.10 s max 1.30 s [1.10 0.90 1.30] (load 9.1); loaded: 0.12 terms/min, failover n/a (load 14.2)"
	if got := r.String(); got != want {
		t.Fatalf("String() = %q\nwant       %q", got, want)
	}
}
