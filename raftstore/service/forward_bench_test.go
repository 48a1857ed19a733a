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
// alternately on the leader (in process) and on a follower (in process,
// forwarded to the leader by the Forwarder over loopback gRPC) of a
// 3-node cluster, so that both paths see the same load, and reports each
// path's p50 and mean in µs, the hop (follower p50 - leader p50) and the
// ratio follower/leader of the means. The bench's "etcd client vs raftps
// client" row pays this hop on 2 puts in 3.
//
//	go test -run '^$' -bench PutFollowerVsLeader -benchtime 2000x ./raftstore/service/
func BenchmarkPutFollowerVsLeader(b *testing.B) {
	c := startGRPCCluster(b, 3)
	ctx := context.Background()
	l, f := c.leader(b, ctx), c.follower(b, ctx)
	val := make([]byte, 64)
	put := func(s *raftstore.Store, i int) time.Duration {
		start := time.Now()
		if _, err := s.Put(ctx, &pb.PutRequest{Key: fmt.Appendf(nil, "/bench/%d", i%1024), Value: val}); err != nil {
			b.Fatalf("put on %s: %v", s.ID(), err)
		}
		return time.Since(start)
	}
	for i := range 50 { // warm the connections and the leader's batcher
		put(l, i)
		put(f, i)
	}
	lat := [2][]time.Duration{make([]time.Duration, 0, b.N), make([]time.Duration, 0, b.N)}
	b.ResetTimer()
	for i := range b.N {
		lat[0] = append(lat[0], put(l, i))
		lat[1] = append(lat[1], put(f, i))
	}
	b.StopTimer()
	var p50, mean [2]float64
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
	b.ReportMetric(p50[1], "follower-p50-µs")
	b.ReportMetric(p50[1]-p50[0], "hop-p50-µs")
	b.ReportMetric(mean[1]/mean[0], "follower/leader")
}
