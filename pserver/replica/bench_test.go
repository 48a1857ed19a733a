package replica_test

import (
	"context"
	"math/rand"
	"testing"

	pb "github.com/raftps/raftps/api/raftpspb"
	"github.com/raftps/raftps/pserver"
	"github.com/raftps/raftps/pserver/replica"
)

// BenchmarkReplicatedPush measures an async momentum push of a 1M-param
// dense layer on the primary alone ("primary"), with the OnUpdate report
// (a copy of the gradient) and its replication to one in-process backup
// ("replicated"; the backup applies the same update, on the same cores).
func BenchmarkReplicatedPush(b *testing.B) {
	spec := &pb.JobSpec{Name: "rep", Mode: pb.UpdateMode_UPDATE_MODE_ASYNC, Seed: 1, NumVirtualShards: 8, NumPservers: 1,
		Optimizer: &pb.OptimizerSpec{Name: "momentum", LearningRate: 0.01, Momentum: 0.9},
		Params:    []*pb.ParamSpec{{Name: "w", Shape: []int64{1024, 1024}, Init: pb.Initializer_INIT_GLOROT}}}
	for _, rep := range []bool{false, true} {
		name := map[bool]string{false: "primary", true: "replicated"}[rep]
		b.Run(name, func(b *testing.B) {
			p, err := pserver.NewSlot(spec, 0, 1)
			if err != nil {
				b.Fatal(err)
			}
			bk, err := pserver.NewSlot(spec, 0, 1)
			if err != nil {
				b.Fatal(err)
			}
			r := replica.NewReplicator(1, map[string]replica.Peer{"n2": replica.NewBackup("rep", bk, 1)})
			var last *pb.ReplicateRequest
			if rep {
				p.OnUpdate(func(u *pb.ReplicateRequest) { last = u })
			}
			var ts []*pb.Tensor
			l := p.Layout()
			rng := rand.New(rand.NewSource(1))
			for _, pl := range l.Params {
				for blk := range pl.Blocks {
					lo, hi := l.BlockRange(pl, blk)
					g := make([]float32, hi-lo)
					for i := range g {
						g[i] = float32(rng.NormFloat64())
					}
					ts = append(ts, &pb.Tensor{Name: "w", Block: blk, Data: packed(g)})
				}
			}
			ctx := context.Background()
			b.SetBytes(4 << 20)
			b.ResetTimer()
			for i := range b.N {
				if _, err := p.Push(ctx, &pb.PushRequest{Trainer: "t", PushId: uint64(i + 1), Grads: ts}); err != nil {
					b.Fatal(err)
				}
				if rep {
					if err := r.Replicate(ctx, last); err != nil {
						b.Fatal(err)
					}
				}
			}
		})
	}
}
