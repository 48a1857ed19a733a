package bench

import (
	"math"
	"testing"
)

// TestRereplicateRows: the re-replication rows read BenchmarkRereplicate's
// result line (its name and units as pserver/agent reports them), and are
// n/a for a size that was not measured.
func TestRereplicateRows(t *testing.T) {
	out := "BenchmarkRereplicate/params=104857600-2   1   18031731325 ns/op   9.940 build_s   3.999 push/s_after   3.999 push/s_before   4.225 push/s_during\n"
	rows := rereplicateRows(ParseGoBench(out), 100<<20)
	if len(rows) != 2 || rows[0].Ours != 9.94 || rows[1].Ours != 4.225 || rows[1].Base != 3.999 {
		t.Fatalf("rows %+v, want build 9.94 s, 4.225 push/s during vs 3.999 before", rows)
	}
	if rows := rereplicateRows(ParseGoBench(out), 1<<20); !math.IsNaN(rows[0].Ours) || !math.IsNaN(rows[1].Ours) {
		t.Fatalf("rows of a size not measured: %+v, want n/a", rows)
	}
}
