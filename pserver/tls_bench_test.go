package pserver

import (
	"context"
	"net"
	"testing"

	"google.golang.org/grpc"

	pb "github.com/raftps/raftps/api/raftpspb"
	"github.com/raftps/raftps/pserver/psclient"
	"github.com/raftps/raftps/pserver/wire"
	"github.com/raftps/raftps/security"
)

// BenchmarkPushPullTLS: one trainer's pull+push of benchParams float32s
// against 2 pservers, plaintext and mutual TLS 1.3 in the same run (the
// node's transport: security.Material credentials on both ends).
func BenchmarkPushPullTLS(b *testing.B) {
	dir := b.TempDir()
	files, _, err := security.Dev(dir, []string{"p0", "p1"})
	if err != nil {
		b.Fatal(err)
	}
	for _, secure := range []bool{false, true} {
		name := "plaintext"
		if secure {
			name = "tls"
		}
		b.Run(name, func(b *testing.B) {
			spec := &pb.JobSpec{Name: "bench", Mode: pb.UpdateMode_UPDATE_MODE_ASYNC, NumPservers: 2,
				Optimizer: &pb.OptimizerSpec{Name: "sgd", LearningRate: 1e-6},
				Params:    []*pb.ParamSpec{{Name: "w", Shape: []int64{benchParams}}}}
			var addrs []string
			var clientOpts []psclient.ClientOption
			for i := range int32(2) {
				lis, err := net.Listen("tcp", "127.0.0.1:0")
				if err != nil {
					b.Fatal(err)
				}
				opts := wire.ServerOptions()
				if secure {
					m, err := security.Load(files[[]string{"p0", "p1"}[i]], nil)
					if err != nil {
						b.Fatal(err)
					}
					opts = append(opts, grpc.Creds(m.ServerCredentials()))
					if i == 0 {
						clientOpts = append(clientOpts, psclient.WithDialOptions(m.DialOptions()...))
					}
				}
				gs := grpc.NewServer(opts...)
				srv := NewServer()
				srv.Host(spec.GetName(), i, mustSlot(b, spec, i, 2))
				pb.RegisterPServerServer(gs, srv)
				go gs.Serve(lis)
				b.Cleanup(gs.Stop)
				addrs = append(addrs, lis.Addr().String())
			}
			c, err := psclient.NewClient(spec, "t0", resolverOf(addrs), append(clientOpts, psclient.WithStreamThreshold(0))...)
			if err != nil {
				b.Fatal(err)
			}
			defer c.Close()
			params, g := c.NewParams(), &psclient.Grads{Dense: map[string][]float32{"w": make([]float32, benchParams)}, Examples: 1}
			ctx := context.Background()
			b.SetBytes(2 * 4 * benchParams)
			b.ResetTimer()
			for range b.N {
				if err := c.Pull(ctx, params); err != nil {
					b.Fatal(err)
				}
				if err := c.Push(ctx, g); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
