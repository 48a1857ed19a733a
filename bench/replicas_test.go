package bench

import (
	"context"
	"math"
	"strings"
	"testing"
	"time"
)

// TestReplicasSection runs the replicas section (quick) with a fresh
// raftps binary: the memory row with both sides measured, the four
// R=2 vs R=1 rows each from Pairs interleaved pairs with both sides
// measured, the two failover rows with at least one promotion timed
// between them, and no note of a failure.
func TestReplicasSection(t *testing.T) {
	r := quickRunner(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	r.replicasSection(ctx, t.TempDir())
	if len(r.rep.Notes) > 0 {
		t.Fatalf("notes: %v", r.rep.Notes)
	}
	if len(r.rep.Rows) != 7 {
		t.Fatalf("%d rows, want 7: %+v", len(r.rep.Rows), r.rep.Rows)
	}
	promotions := 0
	for _, row := range r.rep.Rows {
		t.Logf("%s: %.3g vs %.3g %s, ratio %.2f %s; %s", row.Metric, row.Ours, row.Base, row.Unit, row.Ratio(), row.FormatSpread(), row.Note)
		switch {
		case row.Section == "recovery in training":
			if !math.IsNaN(row.Ours) {
				if row.Ours <= 0 || !strings.Contains(row.Metric, "PSERVER_PROMOTED (R=2") {
					t.Errorf("row %+v", row)
				}
				promotions++
			}
		case strings.HasPrefix(row.Metric, "memory"):
			if row.BaseName != "primary" || math.IsNaN(row.Ours) || math.IsNaN(row.Base) || row.Ours <= 0 || row.Base <= 0 {
				t.Errorf("row %+v", row)
			}
		default:
			if row.Section != "replicas" || row.BaseName != "R=1" || len(row.Ratios) != Pairs ||
				math.IsNaN(row.Ours) || math.IsNaN(row.Base) || row.Ours <= 0 || row.Base <= 0 {
				t.Errorf("row %+v", row)
			}
		}
	}
	if promotions == 0 {
		t.Error("no failover row holds a timed promotion")
	}
}
