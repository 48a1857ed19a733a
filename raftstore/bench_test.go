package raftstore

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// BenchmarkPut3Node measures Put through the leader of a 3-node cluster on
// loopback TCP with the default (LAN) timeouts, for 1 and 64 concurrent
// clients: ops/s, p50 and p99 latency, and commands per log entry.
//
//	go test -run '^$' -bench Put3Node -benchtime 5000x ./raftstore/
func BenchmarkPut3Node(b *testing.B) {
	c := mustCluster(b, 3)
	ctx := context.Background()
	l := c.leader(ctx)
	val := string(make([]byte, 64))
	keys := make([]string, 1024)
	for i := range keys {
		keys[i] = fmt.Sprintf("/bench/%d", i)
	}
	runClients(b, c, func(i int64) error {
		_, err := put(ctx, b, l, keys[i%int64(len(keys))], val)
		return err
	})
}

// BenchmarkRangeLinearizable3Node measures linearizable single-key reads
// on a follower of a 3-node cluster (ReadIndex forwarded to the leader,
// then a local wait and read).
func BenchmarkRangeLinearizable3Node(b *testing.B) {
	c := mustCluster(b, 3)
	ctx := context.Background()
	f := c.follower(ctx)
	mustPut(ctx, b, c.leader(ctx), "/bench/k", "v")
	runClients(b, c, func(int64) error {
		_, _, err := get(ctx, f, "/bench/k", false)
		return err
	})
}

// runClients runs op b.N times from 1 and 64 concurrent clients and reports
// ops/s, p50 and p99 latency in ms and, for writes, commands per entry.
func runClients(b *testing.B, c *cluster, op func(i int64) error) {
	for _, clients := range []int{1, 64} {
		b.Run(fmt.Sprintf("clients=%d", clients), func(b *testing.B) {
			var next atomic.Int64
			lat := make([][]time.Duration, clients)
			e0, c0 := c.batchStats()
			var wg sync.WaitGroup
			b.ResetTimer()
			start := time.Now()
			for g := 0; g < clients; g++ {
				wg.Add(1)
				go func(g int) {
					defer wg.Done()
					for {
						i := next.Add(1)
						if i > int64(b.N) {
							return
						}
						t := time.Now()
						if err := op(i); err != nil {
							b.Error(err)
							return
						}
						lat[g] = append(lat[g], time.Since(t))
					}
				}(g)
			}
			wg.Wait()
			elapsed := time.Since(start)
			b.StopTimer()
			all := slices.Concat(lat...)
			slices.Sort(all)
			if len(all) == 0 {
				return
			}
			pct := func(p float64) float64 {
				return float64(all[int(p*float64(len(all)-1))].Microseconds()) / 1000
			}
			b.ReportMetric(float64(len(all))/elapsed.Seconds(), "ops/s")
			b.ReportMetric(pct(0.50), "p50-ms")
			b.ReportMetric(pct(0.99), "p99-ms")
			if e1, c1 := c.batchStats(); e1 > e0 {
				b.ReportMetric(float64(c1-c0)/float64(e1-e0), "cmds/entry")
			}
		})
	}
}
