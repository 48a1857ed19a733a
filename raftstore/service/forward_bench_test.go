package service

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	pb "github.com/raftps/raftps/api/raftpspb"
	"github.com/raftps/raftps/raftstore"
)

// BenchmarkPutFollowerVsLeader measures the forward hop: one client puts
// in turn on the leader (in process), on one follower (in process,
// forwarded on its ForwardStream) and on the other follower (forwarded
// with a ForwardApplyBatch call per put, as to a leader without the
// stream) of a 3-node cluster on loopback, so that the three paths see the
// same load. It reports each path's p50 in µs, each hop (p50 over the
// leader's) and the ratios of the means over the leader's. The bench's
// "etcd client vs raftps client" row pays the hop on 2 puts in 3.
//
//	go test -run '^$' -bench PutFollowerVsLeader -benchtime 2000x ./raftstore/service/
func BenchmarkPutFollowerVsLeader(b *testing.B) {
	c := startGRPCCluster(b, 3)
	ctx := context.Background()
	l := c.leader(b, ctx)
	var fols []*raftstore.Store
	for i, s := range c.stores {
		if s != l {
			fols = append(fols, s)
			c.fwds[i].noStream = len(fols) == 2 // before its first forward
		}
	}
	paths := []struct {
		name string
		s    *raftstore.Store
	}{{"leader", l}, {"stream", fols[0]}, {"call", fols[1]}}
	val := make([]byte, 64)
	put := func(s *raftstore.Store, i int) time.Duration {
		start := time.Now()
		if _, err := s.Put(ctx, &pb.PutRequest{Key: fmt.Appendf(nil, "/bench/%d", i%1024), Value: val}); err != nil {
			b.Fatalf("put on %s: %v", s.ID(), err)
		}
		return time.Since(start)
	}
	for i := range 50 { // connections up, streams open, the leader's batcher warm
		for _, p := range paths {
			put(p.s, i)
		}
	}
	lat := make([][]time.Duration, len(paths))
	b.ResetTimer()
	for i := range b.N {
		for k, p := range paths {
			lat[k] = append(lat[k], put(p.s, i))
		}
	}
	b.StopTimer()
	p50, mean := make([]float64, len(paths)), make([]float64, len(paths))
	for k, ds := range lat {
		var sum time.Duration
		for _, d := range ds {
			sum += d
		}
		slices.Sort(ds)
		p50[k] = float64(ds[len(ds)/2].Microseconds())
		mean[k] = float64(sum.Microseconds()) / float64(len(ds))
	}
	b.ReportMetric(p50[0], "leader-p50-µs")
	for k, p := range paths[1:] {
		b.ReportMetric(p50[k+1], p.name+"-p50-µs")
		b.ReportMetric(p50[k+1]-p50[0], p.name+"-hop-p50-µs")
		b.ReportMetric(mean[k+1]/mean[0], p.name+"/leader")
	}
}
