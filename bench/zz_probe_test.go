package bench

import (
	"context"
	"os"
	"testing"
	"time"
)

func TestZZProbeEtcd1(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	rc, err := newRaftpsCluster("../bin/raftps", dir, 3, os.Getenv("LS"))
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	if err := rc.Start(ctx); err != nil {
		t.Fatal(err)
	}
	l, _ := rc.Leader(ctx)
	var others []int
	for i := 0; i < 3; i++ {
		if i != l {
			others = append(others, i)
		}
	}
	mk := func(name string, f func() (Store, error)) (string, Store) {
		s, err := f()
		if err != nil {
			t.Fatal(err)
		}
		return name, s
	}
	type sys struct {
		n string
		s Store
	}
	var ss []sys
	for _, x := range []struct {
		n string
		f func() (Store, error)
	}{
		{"raftps-client", func() (Store, error) { return newRaftpsStore(rc.Endpoints()) }},
		{"etcd-client-all", func() (Store, error) { return newEtcdClientStore(rc.Endpoints()) }},
		{"etcd-client-leader", func() (Store, error) { return newEtcdClientStore(rc.Endpoints(others...)) }},
		{"etcd-client-follower", func() (Store, error) { return newEtcdClientStore(rc.Endpoints(l, others[0])) }},
	} {
		n, s := mk(x.n, x.f)
		ss = append(ss, sys{n, s})
	}
	for _, s := range ss {
		RunLoad(ctx, []Store{s.s}, PutWorkload(1), 300*time.Millisecond, 1000)
	}
	for p := 0; p < 4; p++ {
		for _, s := range ss {
			lr, err := RunLoad(ctx, []Store{s.s}, PutWorkload(1), 2*time.Second, 20000)
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("%-22s %6.0f ops/s p50 %.3f ms p99 %.3f", s.n, lr.Throughput(), ms(lr.P50), ms(lr.P99))
		}
	}
}
