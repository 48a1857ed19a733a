package raftstore

import (
	"context"
	"flag"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.etcd.io/bbolt"
)

var boltBenchPuts = flag.Int("bolt.puts", 400, "puts per client count and run of BenchmarkPutBoltOptions (x16 with 16 clients)")

// BenchmarkPutBoltOptions compares raftstore's bbolt options (boltOptions)
// with the library's defaults (nil: the freelist written on every commit)
// on puts through the leader of a fresh 3-node cluster, with 1 and 16
// clients, in 5 interleaved pairs (defaults, ours, defaults, ours, ...).
// It reports the median ratio ours/defaults of ops/s with the min and max
// pair ratio.
//
//	go test -run '^$' -bench PutBoltOptions -benchtime 1x ./raftstore/
func BenchmarkPutBoltOptions(b *testing.B) {
	variants := []func() *bbolt.Options{func() *bbolt.Options { return nil }, boltOptions}
	defer func(f func() *bbolt.Options) { boltOptions = f }(boltOptions)
	const pairs = 5
	for _, clients := range []int{1, 16} {
		ratios := make([]float64, 0, pairs)
		var opsDef, opsOurs []float64
		for p := 0; p < pairs; p++ {
			var ops [2]float64
			for v, opt := range variants {
				boltOptions = opt
				ops[v] = putRun(b, clients, *boltBenchPuts*clients)
			}
			opsDef, opsOurs = append(opsDef, ops[0]), append(opsOurs, ops[1])
			ratios = append(ratios, ops[1]/ops[0])
		}
		slices.Sort(ratios)
		med := func(x []float64) float64 { x = slices.Clone(x); slices.Sort(x); return x[len(x)/2] }
		b.ReportMetric(med(opsDef), fmt.Sprintf("c%d-default-ops/s", clients))
		b.ReportMetric(med(opsOurs), fmt.Sprintf("c%d-ours-ops/s", clients))
		b.ReportMetric(ratios[len(ratios)/2], fmt.Sprintf("c%d-ratio", clients))
		b.ReportMetric(ratios[0], fmt.Sprintf("c%d-ratio-min", clients))
		b.ReportMetric(ratios[len(ratios)-1], fmt.Sprintf("c%d-ratio-max", clients))
	}
}

// putRun starts a 3-node cluster with the current boltOptions, does n puts
// from clients concurrent clients through the leader, closes the cluster
// and returns puts/s.
func putRun(b *testing.B, clients, n int) float64 {
	c := mustCluster(b, 3)
	defer func() {
		for _, s := range c.live() {
			s.Close()
		}
	}()
	ctx := context.Background()
	l := c.leader(ctx)
	val := string(make([]byte, 256))
	var next atomic.Int64
	var wg sync.WaitGroup
	start := time.Now()
	for range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := next.Add(1); i <= int64(n); i = next.Add(1) {
				if _, err := put(ctx, b, l, fmt.Sprintf("/bench/%d", i%1024), val); err != nil {
					b.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	return float64(n) / time.Since(start).Seconds()
}
