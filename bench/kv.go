package bench

import (
	"context"
	"fmt"
	"sync"
	"time"
)

// WALSuffix ends the names of the kv rows measured on raftps with
// --raft-log-store wal.
const WALSuffix = "(raft log store wal)"

// kvSection runs every workload on raftps and etcd in Pairs interleaved
// pairs (raftps, etcd, raftps, etcd, ...), so that drifts of the machine's
// load hit both alike; each row is the median pair ratio with its spread.
// A 1-client workload is interleaved op by op within each pair
// (RunInterleaved), which cancels drifts shorter than a run as well.
// wal, if not nil, is raftps with --raft-log-store wal: the 1-client put
// workload runs on it too in every pair, in a row of its own against etcd.
func (r *runner) kvSection(ctx context.Context, clusters []Cluster, wal Cluster) {
	dur, maxOps := 2*time.Second, int64(20000)
	if r.cfg.Quick {
		dur, maxOps = 1*time.Second, 10000
	}
	var opened [][]Store
	defer func() {
		for _, p := range opened {
			for _, s := range p {
				s.Close()
			}
		}
	}()
	// pool is 8 connections of c to endpoints, shared by a workload's clients.
	pool := func(c Cluster, endpoints []string) []Store {
		var p []Store
		for range 8 {
			s, err := c.NewStore(endpoints)
			if err != nil {
				r.logf("%s: %v", c.Name(), err)
				break
			}
			p = append(p, s)
		}
		opened = append(opened, p)
		return p
	}
	pools := make([][]Store, len(clusters))
	for i, c := range clusters {
		if pools[i] = pool(c, c.Endpoints()); len(pools[i]) < 8 {
			return
		}
	}
	// viaLeader: etcd reached through its leader's endpoint alone, the
	// route raftps' client takes for writes (raftstore/client/route.go);
	// the put rows compare with it too, so that the client's routing and
	// the servers are told apart.
	var viaLeader []Store
	if len(clusters) == 2 {
		if l, err := clusters[1].Leader(ctx); err != nil {
			r.logf("%s leader: %v", clusters[1].Name(), err)
		} else {
			viaLeader = pool(clusters[1], []string{clusters[1].Endpoints()[l]})
		}
	}
	var walPool []Store
	if wal != nil && len(clusters) == 2 {
		if walPool = pool(wal, wal.Endpoints()); len(walPool) < 8 {
			walPool = nil
		}
	}
	leases := make([]*sync.Map, len(clusters))
	for i := range leases {
		leases[i] = &sync.Map{}
	}
	k := &kvRun{clusters: clusters, wal: wal, pools: pools, viaLeader: viaLeader, walPool: walPool, leases: leases, dur: dur, maxOps: maxOps}
	wls := []kvWorkload{
		{func(int) Workload { return PutWorkload(1) }, "put"},
		{func(int) Workload { return PutWorkload(16) }, "put"},
		{func(int) Workload { return PutWorkload(256) }, "put"},
		{func(int) Workload { return GetWorkload(16) }, "get"},
		{func(int) Workload { return CASWorkload(16) }, "cas"},
		{func(i int) Workload { return LeaseWorkload(16, leases[i]) }, "lease"},
	}
	for _, x := range wls {
		r.kvWorkload(ctx, k, x)
	}
}

// kvWorkload is one workload of the kv section: w makes it for system i,
// key is its kind ("put", "get", "cas", "lease").
type kvWorkload struct {
	w   func(i int) Workload
	key string
}

// kvRun is what every workload of the kv section runs against: the
// clusters (raftps, etcd), their connection pools, etcd via its leader
// alone, raftps on the wal log store, and each run's bounds.
type kvRun struct {
	clusters  []Cluster
	wal       Cluster
	pools     [][]Store
	viaLeader []Store
	walPool   []Store
	leases    []*sync.Map // per system: the leases the lease workload holds
	dur       time.Duration
	maxOps    int64
}

// kvWorkload runs workload x in Pairs interleaved pairs and adds its rows.
func (r *runner) kvWorkload(ctx context.Context, k *kvRun, x kvWorkload) {
	clusters, pools, viaLeader, walPool, wal, leases, dur, maxOps := k.clusters, k.pools, k.viaLeader, k.walPool, k.wal, k.leases, k.dur, k.maxOps
	// figures[m][i][p]: metric m (throughput, p50, p99) of system i in pair p.
	var figures [3][2][]float64
	var errs [2]int64
	var name string
	res := make([][]LoadResult, len(clusters))
	for i := range clusters { // a short warm-up each
		_, _ = RunLoad(ctx, pools[i], x.w(i), 300*time.Millisecond, 1000)
		if x.key == "lease" {
			revokeAll(ctx, leases[i])
		}
		name = x.w(i).Name
	}
	if x.key == "put" && len(viaLeader) > 0 {
		_, _ = RunLoad(ctx, viaLeader, x.w(1), 300*time.Millisecond, 1000)
	}
	// raftps-wal, per pair (1-client puts only): throughput and p50.
	onWAL := x.key == "put" && len(walPool) > 0 && x.w(0).Name == PutWorkload(1).Name
	var walFig [2][]float64
	if onWAL {
		_, _ = RunLoad(ctx, walPool, x.w(0), 300*time.Millisecond, 1000)
	}
	var leaderTp []float64 // etcd via its leader, per pair (puts only)
	for p := 0; p < Pairs; p++ {
		if x.w(0).Clients == 1 && len(clusters) == 2 {
			// One client: every system's puts op by op in turn (RunInterleaved).
			r.kvInterleavedPair(ctx, k, x, p, &figures, &walFig, &leaderTp, res, &errs)
			continue
		}
		if onWAL {
			tp, p50 := NA, NA
			if lr, err := RunLoad(ctx, walPool, x.w(0), dur, maxOps); err != nil {
				r.logf("%s %s pair %d: %v", wal.Name(), name, p+1, err)
			} else {
				tp, p50 = lr.Throughput(), ms(lr.P50)
				r.logf("%-7s %-36s pair %d %8.0f ops/s  p50 %6.2f ms  p99 %7.2f ms  (%d ops, %d errors)", wal.Name(), name, p+1, tp, p50, ms(lr.P99), lr.Ops, lr.Errors)
			}
			walFig[0], walFig[1] = append(walFig[0], tp), append(walFig[1], p50)
		}
		if x.key == "put" && len(viaLeader) > 0 {
			lr, err := RunLoad(ctx, viaLeader, x.w(1), dur, maxOps)
			tp := NA
			if err != nil {
				r.logf("etcd via its leader %s pair %d: %v", name, p+1, err)
			} else {
				tp = lr.Throughput()
				r.logf("%-7s %-36s pair %d %8.0f ops/s  p50 %6.2f ms  p99 %7.2f ms  (via its leader)", "etcd", name, p+1, tp, ms(lr.P50), ms(lr.P99))
			}
			leaderTp = append(leaderTp, tp)
		}
		for i := 0; i < 2; i++ {
			tp, p50, p99 := NA, NA, NA
			if i < len(clusters) {
				c := clusters[i]
				lr, err := RunLoad(ctx, pools[i], x.w(i), dur, maxOps)
				if x.key == "lease" {
					revokeAll(ctx, leases[i])
				}
				if err != nil {
					r.logf("%s %s pair %d: %v", c.Name(), name, p+1, err)
				} else {
					res[i] = append(res[i], lr)
					errs[i] += lr.Errors
					tp, p50, p99 = lr.Throughput(), ms(lr.P50), ms(lr.P99)
					r.logf("%-7s %-36s pair %d %8.0f ops/s  p50 %6.2f ms  p99 %7.2f ms  (%d ops, %d errors, extra %d)", c.Name(), name, p+1,
						tp, p50, p99, lr.Ops, lr.Errors, lr.Extra)
				}
			}
			figures[0][i] = append(figures[0][i], tp)
			figures[1][i] = append(figures[1][i], p50)
			figures[2][i] = append(figures[2][i], p99)
		}
	}
	r.raw[fmt.Sprintf("kv/%s", name)] = res
	note := ""
	if errs[0] > 0 || errs[1] > 0 {
		note = fmt.Sprintf("errors raftps %d, etcd %d", errs[0], errs[1])
	}
	r.add(pairRow(Row{Section: "metadata store", Metric: name + " throughput", Unit: "ops/s", BaseName: "etcd", Note: note}, figures[0][0], figures[0][1]))
	if len(leaderTp) > 0 {
		r.add(pairRow(Row{Section: "metadata store", Metric: name + " throughput vs etcd via its leader", Unit: "ops/s", BaseName: "etcd-leader",
			Note: "etcd's clients all on its leader's endpoint (raftps' client sends writes to the leader)"}, figures[0][0], leaderTp))
	}
	if onWAL {
		r.add(pairRow(Row{Section: "metadata store", Metric: name + " throughput " + WALSuffix, Unit: "ops/s", BaseName: "etcd",
			Note: "a second raftps cluster started with --raft-log-store wal (hashicorp/raft-wal); the row above is the default, boltdb"}, walFig[0], figures[0][1]))
		r.add(pairRow(Row{Section: "metadata store", Metric: name + " p50 " + WALSuffix, Unit: "ms", BaseName: "etcd"}, walFig[1], figures[1][1]))
	}
	r.add(pairRow(Row{Section: "metadata store", Metric: name + " p50", Unit: "ms", BaseName: "etcd"}, figures[1][0], figures[1][1]))
	r.add(pairRow(Row{Section: "metadata store", Metric: name + " p99", Unit: "ms", BaseName: "etcd"}, figures[2][0], figures[2][1]))
}

// kvInterleavedPair runs pair p of a 1-client workload op by op across
// raftps, etcd, etcd via its leader and raftps-wal (those kvRun has),
// from one client, as RunInterleaved does, and appends each system's
// figures where kvWorkload's pairs put them.
func (r *runner) kvInterleavedPair(ctx context.Context, k *kvRun, x kvWorkload, p int, figures *[3][2][]float64, walFig *[2][]float64, leaderTp *[]float64, res [][]LoadResult, errs *[2]int64) {
	stores := []Store{k.pools[0][0], k.pools[1][0]}
	names := []string{k.clusters[0].Name(), k.clusters[1].Name()}
	leader, wal := -1, -1
	if x.key == "put" && len(k.viaLeader) > 0 {
		leader = len(stores)
		stores, names = append(stores, k.viaLeader[0]), append(names, "etcd via its leader")
	}
	if x.key == "put" && len(k.walPool) > 0 {
		wal = len(stores)
		stores, names = append(stores, k.walPool[0]), append(names, k.wal.Name())
	}
	name := x.w(0).Name
	lrs, err := RunInterleaved(ctx, stores, x.w(0), time.Duration(len(stores))*k.dur, k.maxOps)
	if err != nil {
		r.logf("%s pair %d (interleaved): %v", name, p+1, err)
	}
	for i := range stores {
		tp, p50, p99 := NA, NA, NA
		if err == nil {
			lr := lrs[i]
			tp, p50, p99 = lr.Throughput(), ms(lr.P50), ms(lr.P99)
			r.logf("%-19s %-36s pair %d %8.0f ops/s  p50 %6.2f ms  p99 %7.2f ms  (%d ops, %d errors, interleaved)", names[i], name, p+1, tp, p50, p99, lr.Ops, lr.Errors)
			if i < 2 {
				res[i] = append(res[i], lr)
				errs[i] += lr.Errors
			}
		}
		switch i {
		case 0, 1:
			figures[0][i] = append(figures[0][i], tp)
			figures[1][i] = append(figures[1][i], p50)
			figures[2][i] = append(figures[2][i], p99)
		case leader:
			*leaderTp = append(*leaderTp, tp)
		case wal:
			walFig[0], walFig[1] = append(walFig[0], tp), append(walFig[1], p50)
		}
	}
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
