package replica_test

import (
	"context"
	"fmt"
	"math/rand"
	"sync"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc"

	pb "github.com/raftps/raftps/api/raftpspb"
	"github.com/raftps/raftps/pserver"
	"github.com/raftps/raftps/pserver/replica"
	"github.com/raftps/raftps/pserver/wire"
)

// BenchmarkPushLoopback isolates what replication adds to a push: an
// async momentum push of a dense layer to a primary slot with R = 1 (no
// hook, no gate) and R = 2 (the OnUpdate report replicated to one backup
// over a Replicate stream on loopback gRPC, with the pserver's transport
// options, and the push acknowledged only once the backup acknowledged
// it: the agent's ack gate). "trainers" pushes run at once, each back to
// back (one is latency: apply, send, backup apply, ack in series; three
// is a sync-sized fan-in whose updates can overlap). Run with -cpu to
// see the cores; compare R=2 with R=1 at the same size and trainers.
// cpu-ns/op is the process's CPU per push (primary and backup), which
// other work on the machine changes far less than ns/op.
func BenchmarkPushLoopback(b *testing.B) {
	for _, params := range []int64{25_000, 1 << 20} {
		for _, trainers := range []int{1, 3} {
			for _, rep := range []int{1, 2} {
				b.Run(fmt.Sprintf("params=%d/trainers=%d/R=%d", params, trainers, rep), func(b *testing.B) {
					benchPushLoopback(b, params, trainers, rep)
				})
			}
		}
	}
}

func benchPushLoopback(b *testing.B, params int64, trainers, rep int) {
	spec := &pb.JobSpec{Name: "rep", Mode: pb.UpdateMode_UPDATE_MODE_ASYNC, Seed: 1, NumVirtualShards: 8, NumPservers: 1,
		Optimizer: &pb.OptimizerSpec{Name: "momentum", LearningRate: 0.01, Momentum: 0.9},
		Params:    []*pb.ParamSpec{{Name: "w", Shape: []int64{params}, Init: pb.Initializer_INIT_GLOROT}}}
	p, err := pserver.NewSlot(spec, 0, 1)
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if rep == 2 {
		bk, err := pserver.NewSlot(spec, 0, 1)
		if err != nil {
			b.Fatal(err)
		}
		c, _ := serveWire(b, replica.NewBackup("rep", bk, 1))
		st, err := replica.NewStream(ctx, c)
		if err != nil {
			b.Fatal(err)
		}
		g := newGate(replica.NewReplicator(1, map[string]replica.Peer{"n2": st}), p.Version())
		p.OnUpdate(g.update)
		p.SetAckGate(g.wait)
	}
	rng := rand.New(rand.NewSource(1))
	reqs := make([]*pb.PushRequest, trainers)
	for t := range reqs {
		reqs[t] = &pb.PushRequest{Job: "rep", Trainer: fmt.Sprint("t", t), Grads: denseGrads(p, rng)}
	}
	b.SetBytes(4 * params)
	b.ResetTimer()
	cpu0 := cpuTime(b)
	var wg sync.WaitGroup
	errs := make([]error, trainers)
	for t := range trainers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := t; i < b.N; i += trainers {
				r := reqs[t]
				req := &pb.PushRequest{Job: r.Job, Trainer: r.Trainer, PushId: uint64(i + 1), Grads: r.Grads}
				if _, err := p.Push(ctx, req); err != nil {
					errs[t] = err
					return
				}
			}
		}()
	}
	wg.Wait()
	b.ReportMetric(float64((cpuTime(b)-cpu0).Nanoseconds())/float64(b.N), "cpu-ns/op")
	for _, err := range errs {
		if err != nil {
			b.Fatal(err)
		}
	}
}

// cpuTime is the process's CPU time (user and system, every thread: the
// primary, the backup and gRPC), the figure a loaded machine does not
// blur as it does wall time.
func cpuTime(tb testing.TB) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		tb.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// denseGrads is a gradient for every dense block of s.
func denseGrads(s *pserver.Slot, rng *rand.Rand) []*pb.Tensor {
	var ts []*pb.Tensor
	l := s.Layout()
	for _, pl := range l.Params {
		for blk := range pl.Blocks {
			lo, hi := l.BlockRange(pl, blk)
			g := make([]float32, hi-lo)
			for i := range g {
				g[i] = float32(rng.NormFloat64())
			}
			ts = append(ts, &pb.Tensor{Name: pl.Spec.GetName(), Block: blk, Data: packed(g)})
		}
	}
	return ts
}

// serveWire is serve with the pserver's transport (wire.Listen,
// ServerOptions, DialOptions: the tensor codec, the windows, the socket
// buffers), as a node's Replica service and a primary's peer use it. It
// also returns the server, to stop it.
func serveWire(tb testing.TB, b *replica.Backup) (pb.ReplicaClient, *grpc.Server) {
	tb.Helper()
	lis, err := wire.Listen("127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	gs := grpc.NewServer(wire.ServerOptions()...)
	svc := replica.NewService()
	svc.Add("rep", b)
	pb.RegisterReplicaServer(gs, svc)
	go gs.Serve(lis)
	tb.Cleanup(gs.Stop)
	cc, err := grpc.NewClient(lis.Addr().String(), wire.DialOptions()...)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { cc.Close() })
	return pb.NewReplicaClient(cc), gs
}

// gate is the agent's replication in small (pserver/agent/replicas.go):
// each reported update is replicated in its own goroutine, and a push
// is acknowledged once every seq up to its version was.
type gate struct {
	r       *replica.Replicator
	mu      sync.Mutex
	acked   int64
	done    map[int64]bool
	err     error
	changed chan struct{}
}

func newGate(r *replica.Replicator, version int64) *gate {
	return &gate{r: r, acked: version, done: map[int64]bool{}, changed: make(chan struct{})}
}

func (g *gate) update(u *pb.ReplicateRequest) {
	go func() {
		err := g.r.Replicate(context.Background(), u)
		g.mu.Lock()
		defer g.mu.Unlock()
		if err != nil && g.err == nil {
			g.err = err
		}
		g.done[u.GetSeq()] = true
		for g.done[g.acked+1] {
			delete(g.done, g.acked+1)
			g.acked++
		}
		close(g.changed)
		g.changed = make(chan struct{})
	}()
}

func (g *gate) wait(ctx context.Context, version int64) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	for g.err == nil && g.acked < version {
		ch := g.changed
		g.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
		}
		g.mu.Lock()
		if ctx.Err() != nil {
			return ctx.Err()
		}
	}
	return g.err
}
