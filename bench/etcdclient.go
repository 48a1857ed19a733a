package bench

import (
	"context"
	"fmt"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

// etcdClientStore is Store over etcd's Go client (go.etcd.io/etcd/client/v3),
// the client PaddlePaddle's master and pserver were written against: the
// "etcd client" section drives raftps' etcd API (raftstore/etcdapi) and
// etcd with it, so the two columns differ only in the server.
type etcdClientStore struct{ c *clientv3.Client }

var _ Store = (*etcdClientStore)(nil)

func newEtcdClientStore(endpoints []string) (Store, error) {
	c, err := clientv3.New(clientv3.Config{Endpoints: endpoints, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		return nil, fmt.Errorf("etcd client %v: %w", endpoints, err)
	}
	return &etcdClientStore{c}, nil
}

func (s *etcdClientStore) Put(ctx context.Context, key string, val []byte) error {
	_, err := s.c.Put(ctx, key, string(val))
	return err
}

func (s *etcdClientStore) Get(ctx context.Context, key string) error {
	_, err := s.c.Get(ctx, key)
	return err
}

func (s *etcdClientStore) Version(ctx context.Context, key string) (int64, error) {
	r, err := s.c.Get(ctx, key)
	if err != nil || len(r.Kvs) == 0 {
		return 0, err
	}
	return r.Kvs[0].Version, nil
}

func (s *etcdClientStore) CAS(ctx context.Context, key string, version int64, val []byte) (bool, error) {
	r, err := s.c.Txn(ctx).If(clientv3.Compare(clientv3.Version(key), "=", version)).
		Then(clientv3.OpPut(key, string(val))).Commit()
	if err != nil {
		return false, err
	}
	return r.Succeeded, nil
}

func (s *etcdClientStore) LeaseGrantKeepAlive(ctx context.Context, ttl int64) (int64, error) {
	g, err := s.c.Grant(ctx, ttl)
	if err != nil {
		return 0, err
	}
	k, err := s.c.KeepAliveOnce(ctx, g.ID)
	if err != nil {
		return int64(g.ID), err
	}
	if k.TTL <= 0 {
		return int64(g.ID), errKeepAlive
	}
	return int64(g.ID), nil
}

func (s *etcdClientStore) Revoke(ctx context.Context, id int64) error {
	_, err := s.c.Revoke(ctx, clientv3.LeaseID(id))
	return err
}

func (s *etcdClientStore) Close() error { return s.c.Close() }

// etcdClientSection runs put, get, CAS and lease workloads with etcd's Go
// client against raftps (clusters[0]) and etcd (clusters[1]), interleaved
// in Pairs pairs like kvSection (1-client puts op by op, RunInterleaved),
// into the "etcd client" rows.
func (r *runner) etcdClientSection(ctx context.Context, clusters []Cluster) {
	dur, maxOps := 2*time.Second, int64(20000)
	if r.cfg.Quick {
		dur, maxOps = 1*time.Second, 10000
	}
	pools := make([][]Store, len(clusters))
	defer func() {
		for _, p := range pools {
			for _, s := range p {
				s.Close()
			}
		}
	}()
	for i, c := range clusters {
		for range 8 { // 8 clients (connections) per system, as kvSection
			s, err := newEtcdClientStore(c.Endpoints())
			if err != nil {
				r.note(fmt.Sprintf("etcd client section: %s: %v", c.Name(), err))
				return
			}
			pools[i] = append(pools[i], s)
		}
	}
	leases := make([]*sync.Map, len(clusters))
	for i := range leases {
		leases[i] = &sync.Map{}
	}
	wls := []func(i int) Workload{
		func(int) Workload { return PutWorkload(1) },
		func(int) Workload { return PutWorkload(16) },
		func(int) Workload { return GetWorkload(16) },
		func(int) Workload { return CASWorkload(16) },
		func(i int) Workload { return LeaseWorkload(16, leases[i]) },
	}
	r.etcdClientVsOwn(ctx, clusters[0], dur, maxOps)
	for k, mk := range wls {
		// tp[i][p], p99[i][p]: system i in pair p (raftps, etcd, raftps, ...).
		var tp, p99 [2][]float64
		var name string
		var errs [2]int64
		for i := range clusters {
			_, _ = RunLoad(ctx, pools[i], mk(i), 300*time.Millisecond, 1000)
			name = mk(i).Name
		}
		for p := 0; p < Pairs; p++ {
			if mk(0).Clients == 1 && len(clusters) == 2 {
				// One client: raftps and etcd op by op in turn (RunInterleaved).
				lrs, err := RunInterleaved(ctx, []Store{pools[0][0], pools[1][0]}, mk(0), 2*dur, maxOps)
				for i, c := range clusters {
					t, q := NA, NA
					if err != nil {
						r.logf("etcd client → %s %s pair %d: %v", c.Name(), name, p+1, err)
					} else {
						lr := lrs[i]
						r.logf("etcd client → %-7s %-36s pair %d %8.0f ops/s  p50 %6.2f ms  p99 %7.2f ms  (%d ops, %d errors, interleaved)", c.Name(), name, p+1,
							lr.Throughput(), ms(lr.P50), ms(lr.P99), lr.Ops, lr.Errors)
						t, q, errs[i] = lr.Throughput(), ms(lr.P99), errs[i]+lr.Errors
						r.raw[fmt.Sprintf("etcdclient/%s/%s/%d", c.Name(), name, p+1)] = lr
					}
					tp[i], p99[i] = append(tp[i], t), append(p99[i], q)
				}
				continue
			}
			for i := 0; i < 2; i++ {
				t, q := NA, NA
				if i < len(clusters) {
					c := clusters[i]
					lr, err := RunLoad(ctx, pools[i], mk(i), dur, maxOps)
					if k == len(wls)-1 {
						revokeAll(ctx, leases[i])
					}
					if err != nil {
						r.logf("etcd client → %s %s pair %d: %v", c.Name(), name, p+1, err)
					} else {
						r.logf("etcd client → %-7s %-36s pair %d %8.0f ops/s  p50 %6.2f ms  p99 %7.2f ms  (%d ops, %d errors)", c.Name(), name, p+1,
							lr.Throughput(), ms(lr.P50), ms(lr.P99), lr.Ops, lr.Errors)
						t, q, errs[i] = lr.Throughput(), ms(lr.P99), errs[i]+lr.Errors
						r.raw[fmt.Sprintf("etcdclient/%s/%s/%d", c.Name(), name, p+1)] = lr
					}
				}
				tp[i], p99[i] = append(tp[i], t), append(p99[i], q)
			}
		}
		note := ""
		if errs[0] > 0 || errs[1] > 0 {
			note = fmt.Sprintf("errors raftps %d, etcd %d", errs[0], errs[1])
		}
		r.add(pairRow(Row{Section: "etcd client", Metric: name + " throughput", Unit: "ops/s", BaseName: "etcd", Note: note}, tp[0], tp[1]))
		r.add(pairRow(Row{Section: "etcd client", Metric: name + " p99", Unit: "ms", BaseName: "etcd"}, p99[0], p99[1]))
	}
}

// EtcdClientVsOwnRow names the row of 1-client puts to raftps with etcd's
// Go client over raftps' own client; via is "" (every endpoint, etcd's
// round-robin) or "leader" (the leader's endpoint only).
func EtcdClientVsOwnRow(via string) string {
	if via == "" {
		return PutWorkload(1).Name + ": etcd client vs raftps client"
	}
	return PutWorkload(1).Name + ": etcd client on the " + via + "'s endpoint vs raftps client"
}

// etcdClientVsOwn puts with 1 client to raftps (c) with raftps' own client
// (which sends writes to the leader), etcd's Go client on every endpoint
// (round-robin: two puts in three reach a follower, which forwards them
// to the leader in one more gRPC round trip), and etcd's Go client on the
// leader's endpoint alone, op by op (RunInterleaved: one put on each in
// turn, so the three see the same moments of a shared machine) in Pairs
// rounds, into two rows of ratios over raftps' client: the whole
// difference, and the etcd API's own (no forward).
func (r *runner) etcdClientVsOwn(ctx context.Context, c Cluster, dur time.Duration, maxOps int64) {
	leader, err := c.Leader(ctx)
	if err != nil {
		r.note(fmt.Sprintf("etcd client vs raftps client: %v", err))
		return
	}
	var others []int
	for i := range len(c.Members()) {
		if i != leader {
			others = append(others, i)
		}
	}
	mk := []func() (Store, error){
		func() (Store, error) { return newRaftpsStore(c.Endpoints()) },
		func() (Store, error) { return newEtcdClientStore(c.Endpoints()) },
		func() (Store, error) { return newEtcdClientStore(c.Endpoints(others...)) },
	}
	names := []string{"raftps client", "etcd client", "etcd client via leader"}
	stores := make([]Store, len(mk))
	for i, f := range mk {
		s, err := f()
		if err != nil {
			r.note(fmt.Sprintf("etcd client vs raftps client: %s: %v", names[i], err))
			return
		}
		defer s.Close()
		stores[i] = s
	}
	w := PutWorkload(1)
	tp := make([][]float64, len(stores))
	_, _ = RunInterleaved(ctx, stores, w, 300*time.Millisecond, 1000)
	for p := 0; p < Pairs; p++ {
		// dur and maxOps each: as long as the three runs one after the other were
		lrs, err := RunInterleaved(ctx, stores, w, time.Duration(len(stores))*dur, maxOps)
		if err != nil {
			r.logf("etcd client vs raftps client %s round %d: %v", w.Name, p+1, err)
		}
		for i, lr := range lrs {
			t := NA
			if err == nil {
				t = lr.Throughput()
				r.logf("%-22s → raftps %s round %d %8.0f ops/s  p50 %6.2f ms  p99 %7.2f ms  (%d ops, interleaved)", names[i], w.Name, p+1, t, ms(lr.P50), ms(lr.P99), lr.Ops)
				r.raw[fmt.Sprintf("etcdclient-vs-own/%s/%d", names[i], p+1)] = lr
			}
			tp[i] = append(tp[i], t)
		}
	}
	r.add(pairRow(Row{Section: "etcd client", Metric: EtcdClientVsOwnRow(""), Unit: "ops/s", BaseName: "raftps client",
		Note: "round-robin endpoints: 2 of 3 puts reach a follower and are forwarded to the leader (one more gRPC round trip); raftps' client sends writes to the leader"}, tp[1], tp[0]))
	r.add(pairRow(Row{Section: "etcd client", Metric: EtcdClientVsOwnRow("leader"), Unit: "ops/s", BaseName: "raftps client",
		Note: "the etcd API's own cost (translation, header), no forward"}, tp[2], tp[0]))
}
