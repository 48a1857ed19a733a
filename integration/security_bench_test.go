package integration

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	pb "github.com/raftps/raftps/api/raftpspb"
	"github.com/raftps/raftps/internal/testing/localcluster"
	"github.com/raftps/raftps/raftstore/client"
)

// BenchmarkPuts16: 16 clients putting through a 3-node cluster of
// processes, plaintext (--insecure) and mutual TLS with encrypted gossip
// (localcluster's default) in the same run; each
// sub-benchmark reports puts/s over b.N puts.
func BenchmarkPuts16(b *testing.B) {
	for _, secure := range []bool{false, true} {
		name := "plaintext"
		if secure {
			name = "tls"
		}
		b.Run(name, func(b *testing.B) {
			dir := b.TempDir()
			var extra []string
			if !secure {
				extra = append(extra, "--insecure")
			}
			nodes, err := localcluster.New(binPath, dir, 3, extra...)
			if err != nil {
				b.Fatal(err)
			}
			for _, n := range nodes {
				if err := n.Start(); err != nil {
					b.Fatal(err)
				}
				b.Cleanup(n.Kill)
			}
			var eps []string
			for _, n := range nodes {
				eps = append(eps, n.GRPC)
			}
			opts, err := localcluster.DialOptions(nodes[0].Admin) // zero on --insecure: plaintext
			if err != nil {
				b.Fatal(err)
			}
			newClient := func() *client.Client {
				cl, err := client.New(eps, opts...)
				if err != nil {
					b.Fatal(err)
				}
				b.Cleanup(func() { cl.Close() })
				return cl
			}
			// Wait for a leader.
			probe := newClient()
			deadline := time.Now().Add(60 * time.Second)
			for {
				ctx, cancel := context.WithTimeout(context.Background(), time.Second)
				st, err := probe.Cluster.Status(ctx, &pb.StatusRequest{})
				cancel()
				if err == nil && st.Leader != "" {
					break
				}
				if time.Now().After(deadline) {
					b.Fatalf("no leader: %v", err)
				}
				time.Sleep(100 * time.Millisecond)
			}
			const clients = 16
			cls := make([]*client.Client, clients)
			for i := range cls {
				cls[i] = newClient()
			}
			var next atomic.Int64
			b.ResetTimer()
			start := time.Now()
			var wg sync.WaitGroup
			for i := range clients {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for next.Add(1) <= int64(b.N) {
						ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
						_, err := cls[i].KV.Put(ctx, &pb.PutRequest{Key: []byte(fmt.Sprintf("/bench/%d", i)), Value: []byte("v")})
						cancel()
						if err != nil {
							b.Error(err)
							return
						}
					}
				}()
			}
			wg.Wait()
			b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "puts/s")
		})
	}
}
