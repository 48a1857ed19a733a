package bench

import (
	"context"
	"fmt"
	"sync"
	"time"
)

// kvSection runs every workload on raftps then etcd, interleaved workload
// by workload so that drifts of the machine's load hit both alike.
func (r *runner) kvSection(ctx context.Context, clusters []Cluster) {
	dur, maxOps := 5*time.Second, int64(50000)
	if r.cfg.Quick {
		dur, maxOps = 2*time.Second, 20000
	}
	pools := make([][]Store, len(clusters))
	for i, c := range clusters {
		for range 8 { // 8 connections per system, shared by the clients
			s, err := c.NewStore(c.Endpoints())
			if err != nil {
				r.logf("%s: %v", c.Name(), err)
				return
			}
			pools[i] = append(pools[i], s)
		}
	}
	defer func() {
		for _, p := range pools {
			for _, s := range p {
				s.Close()
			}
		}
	}()
	leases := make([]*sync.Map, len(clusters))
	for i := range leases {
		leases[i] = &sync.Map{}
	}
	type wl struct {
		w   func(i int) Workload
		key string
	}
	wls := []wl{
		{func(int) Workload { return PutWorkload(1) }, "put"},
		{func(int) Workload { return PutWorkload(16) }, "put"},
		{func(int) Workload { return PutWorkload(256) }, "put"},
		{func(int) Workload { return GetWorkload(16) }, "get"},
		{func(int) Workload { return CASWorkload(16) }, "cas"},
		{func(i int) Workload { return LeaseWorkload(16, leases[i]) }, "lease"},
	}
	for _, x := range wls {
		res := make([]LoadResult, len(clusters))
		ok := make([]bool, len(clusters))
		var name string
		for i, c := range clusters {
			w := x.w(i)
			name = w.Name
			// A short warm-up, then the measurement.
			_, _ = RunLoad(ctx, pools[i], w, 300*time.Millisecond, 1000)
			lr, err := RunLoad(ctx, pools[i], w, dur, maxOps)
			if err != nil {
				r.logf("%s %s: %v", c.Name(), w.Name, err)
			} else {
				res[i], ok[i] = lr, true
				r.logf("%-7s %-36s %8.0f ops/s  p50 %6.2f ms  p99 %7.2f ms  (%d ops, %d errors, extra %d)", c.Name(), w.Name,
					lr.Throughput(), ms(lr.P50), ms(lr.P99), lr.Ops, lr.Errors, lr.Extra)
			}
			if x.key == "lease" {
				revokeAll(ctx, leases[i])
			}
		}
		r.raw[fmt.Sprintf("kv/%s", name)] = res
		if len(clusters) < 2 {
			res = append(res, LoadResult{})
			ok = append(ok, false)
		}
		val := func(i int, f func(LoadResult) float64) float64 {
			if !ok[i] {
				return NA
			}
			return f(res[i])
		}
		note := ""
		if res[0].Errors > 0 || res[1].Errors > 0 {
			note = fmt.Sprintf("errors raftps %d, etcd %d", res[0].Errors, res[1].Errors)
		}
		r.add(Row{Section: "metadata store", Metric: name + " throughput", Unit: "ops/s",
			Ours: val(0, LoadResult.Throughput), BaseName: "etcd", Base: val(1, LoadResult.Throughput), Note: note})
		r.add(Row{Section: "metadata store", Metric: name + " p50", Unit: "ms",
			Ours: val(0, func(l LoadResult) float64 { return ms(l.P50) }), BaseName: "etcd", Base: val(1, func(l LoadResult) float64 { return ms(l.P50) })})
		r.add(Row{Section: "metadata store", Metric: name + " p99", Unit: "ms",
			Ours: val(0, func(l LoadResult) float64 { return ms(l.P99) }), BaseName: "etcd", Base: val(1, func(l LoadResult) float64 { return ms(l.P99) })})
	}
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
