package raftstore

import (
	"fmt"
	"slices"
	"testing"
)

// BenchmarkPutLogStore measures puts through the leader of a fresh 3-node
// cluster with each Raft log store (Config.LogStore: raft-boltdb, the
// default, and hashicorp/raft-wal), with 1 and 16 clients. One op is one
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
	stores := []string{LogStoreBoltDB, LogStoreWAL}
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
				got[v] = putRun(b, func(c *Config) { c.LogStore = stores[v] }, clients, *boltBenchPuts*clients)
				unit := fmt.Sprintf("c%d-%s-ops/s", clients, stores[v])
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
