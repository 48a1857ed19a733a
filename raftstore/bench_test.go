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
	for _, clients := range []int{1, 64} {
		b.Run(fmt.Sprintf("clients=%d", clients), func(b *testing.B) {
			cmds := make([]string, 1024)
			for i := range cmds {
				cmds[i] = fmt.Sprintf("/bench/%d", i)
			}
			var next atomic.Int64
			lat := make([][]time.Duration, clients)
			e0, c0 := l.BatchStats()
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
						if _, err := put(ctx, b, l, cmds[i%int64(len(cmds))], val); err != nil {
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
			e1, c1 := l.BatchStats()
			b.ReportMetric(float64(len(all))/elapsed.Seconds(), "ops/s")
			b.ReportMetric(pct(0.50), "p50-ms")
			b.ReportMetric(pct(0.99), "p99-ms")
			if e1 > e0 {
				b.ReportMetric(float64(c1-c0)/float64(e1-e0), "cmds/entry")
			}
		})
	}
}
