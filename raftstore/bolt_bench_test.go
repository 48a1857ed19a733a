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

	"github.com/raftps/raftps/fsm"
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
				ops[v] = putRun(b, nil, clients, *boltBenchPuts*clients)
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

// BenchmarkPutInflight compares Config.MaxInflight 1 (the default) and 2
// with 16 and 64 clients, like BenchmarkPutBoltOptions: 5 interleaved
// pairs of fresh 3-node clusters, the median ratio (2 over 1) of ops/s with
// its min and max.
//
//	go test -run '^$' -bench PutInflight -benchtime 1x ./raftstore/
func BenchmarkPutInflight(b *testing.B) {
	const pairs = 5
	for _, clients := range []int{16, 64} {
		var ratios, one, two []float64
		for p := 0; p < pairs; p++ {
			a := putRun(b, func(c *Config) { c.MaxInflight = 1 }, clients, *boltBenchPuts*clients)
			z := putRun(b, func(c *Config) { c.MaxInflight = 2 }, clients, *boltBenchPuts*clients)
			one, two, ratios = append(one, a), append(two, z), append(ratios, z/a)
		}
		med := func(x []float64) float64 { x = slices.Clone(x); slices.Sort(x); return x[len(x)/2] }
		b.ReportMetric(med(one), fmt.Sprintf("c%d-inflight1-ops/s", clients))
		b.ReportMetric(med(two), fmt.Sprintf("c%d-inflight2-ops/s", clients))
		b.ReportMetric(med(ratios), fmt.Sprintf("c%d-ratio", clients))
		b.ReportMetric(slices.Min(ratios), fmt.Sprintf("c%d-ratio-min", clients))
		b.ReportMetric(slices.Max(ratios), fmt.Sprintf("c%d-ratio-max", clients))
	}
}

// clusterWith starts a 3-node cluster as mustCluster does, with set
// applied to every store's config.
func clusterWith(tb testing.TB, set func(*Config)) *cluster {
	tb.Helper()
	c := &cluster{tb: tb}
	for i := 0; i < 3; i++ {
		id := fmt.Sprintf("n%d", i+1)
		dir := tb.TempDir()
		cfg := testConfig(tb, id, dir)
		cfg.Bootstrap = i == 0
		set(&cfg)
		s, err := New(cfg, fsm.New(nil), directForwarder{c})
		if err != nil {
			tb.Fatal(err)
		}
		if err := s.Open(); err != nil {
			tb.Fatal(err)
		}
		c.mu.Lock()
		c.stores, c.dirs = append(c.stores, s), append(c.dirs, dir)
		c.mu.Unlock()
		tb.Cleanup(func() { s.Close() })
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		if i == 0 {
			err = s.WaitForLeader(ctx)
		} else {
			join(ctx, tb, c.leader, id, s.Addr())
		}
		cancel()
		if err != nil {
			tb.Fatal(err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, s := range c.live() {
		if err := s.LinearizableRead(ctx); err != nil {
			tb.Fatalf("%s: %v", s.cfg.ID, err)
		}
	}
	return c
}

// putRun starts a 3-node cluster (with the current boltOptions; set, if
// not nil, applied to each config), does n puts from clients concurrent
// clients through the leader, closes the cluster and returns puts/s.
func putRun(b *testing.B, set func(*Config), clients, n int) float64 {
	var c *cluster
	if set == nil {
		c = mustCluster(b, 3)
	} else {
		c = clusterWith(b, set)
	}
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
