package bench

import (
	"context"
	"math"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/raftps/raftps/internal/testing/testutil"
)

// TestTLSSection runs the security section (quick) with a fresh raftps
// binary: two rows, TLS against plaintext, each from Pairs interleaved
// pairs with both sides measured, and no note of a failure.
func TestTLSSection(t *testing.T) {
	r := quickRunner(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	r.tlsSection(ctx, t.TempDir())
	if len(r.rep.Notes) > 0 {
		t.Fatalf("notes: %v", r.rep.Notes)
	}
	if len(r.rep.Rows) != 2 {
		t.Fatalf("%d rows, want 2: %+v", len(r.rep.Rows), r.rep.Rows)
	}
	for _, row := range r.rep.Rows {
		t.Logf("%s: %.0f vs %.0f %s, ratio %.2f %s", row.Metric, row.Ours, row.Base, row.Unit, row.Ratio(), row.FormatSpread())
		if row.Section != "security" || row.BaseName != "plaintext" || len(row.Ratios) != Pairs ||
			math.IsNaN(row.Ours) || math.IsNaN(row.Base) || row.Ours <= 0 || row.Base <= 0 {
			t.Fatalf("row %+v", row)
		}
	}
}

// quickRunner is a runner of the quick sections over a raftps binary
// freshly built from this tree.
func quickRunner(t *testing.T) *runner {
	t.Helper()
	root, err := testutil.ModuleRoot()
	if err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(t.TempDir(), "raftps")
	build := exec.Command("go", "build", "-o", bin, "./cmd/raftps")
	build.Dir = root
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	r := &runner{cfg: Config{Bin: bin, Root: root, Quick: true, Dataset: filepath.Join(root, "datasets", "fashion-mnist")},
		rep: &Report{}, raw: map[string]any{}}
	return r
}
