package raftstore

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"

	raftwal "github.com/hashicorp/raft-wal"
)

// openWAL opens hashicorp/raft-wal (segment files with one fdatasync per
// append and its own bolt file for the stable store) in <dir>/wal.
func openWAL(dir string) (logStore, error) {
	d := filepath.Join(dir, "wal")
	if err := os.MkdirAll(d, 0o700); err != nil {
		return nil, err
	}
	w, err := raftwal.Open(d)
	if err != nil {
		return nil, fmt.Errorf("raftstore: open raft-wal %q: %w", d, err)
	}
	return w, nil
}

// BenchmarkPutLogStore measures puts through the leader of a fresh 3-node
// cluster with raftps' log store (raft-boltdb, openLogStore) and with
// hashicorp/raft-wal in its place, with 1 and 16 clients. One op is one
// pair per client count: boltdb then wal on odd ops, wal then boltdb on
// even ones. It reports c<N>-boltdb-ops/s and c<N>-wal-ops/s (medians over
// the ops) and c<N>-wal/boltdb, the median of the per-op ratios, with
// their min and max. make bench runs it -benchtime 1x five times and
// pairs the runs (bench/gosection.go).
//
// It is the measured "why" of the 1-client put row: raft-boltdb makes
// every append a bolt commit (two fdatasyncs and page rewrites) on the
// leader and then on each follower; a WAL append is one fdatasync.
//
//	go test -run '^$' -bench PutLogStore -benchtime 5x ./raftstore/
func BenchmarkPutLogStore(b *testing.B) {
	defer func(f func(string) (logStore, error)) { openLogStore = f }(openLogStore)
	stores := []struct {
		name string
		open func(string) (logStore, error)
	}{{"boltdb", openLogStore}, {"wal", openWAL}}
	clientCounts := []int{1, 16}
	ops := map[string][]float64{}
	ratios := map[int][]float64{}
	for i := range b.N {
		for _, clients := range clientCounts {
			var got [2]float64
			for k := range 2 {
				v := k
				if i%2 == 1 {
					v = 1 - k
				}
				openLogStore = stores[v].open
				got[v] = putRun(b, nil, clients, *boltBenchPuts*clients)
				unit := fmt.Sprintf("c%d-%s-ops/s", clients, stores[v].name)
				ops[unit] = append(ops[unit], got[v])
			}
			ratios[clients] = append(ratios[clients], got[1]/got[0])
		}
	}
	med := func(x []float64) float64 { x = slices.Clone(x); slices.Sort(x); return x[len(x)/2] }
	for unit, x := range ops {
		b.ReportMetric(med(x), unit)
	}
	for _, clients := range clientCounts {
		r := ratios[clients]
		b.ReportMetric(med(r), fmt.Sprintf("c%d-wal/boltdb", clients))
		b.ReportMetric(slices.Min(r), fmt.Sprintf("c%d-wal/boltdb-min", clients))
		b.ReportMetric(slices.Max(r), fmt.Sprintf("c%d-wal/boltdb-max", clients))
	}
}
