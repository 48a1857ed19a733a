package pserver

import (
	"context"
	"fmt"
	"io"
	"net"
	"runtime"
	"slices"
	"sync"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	pb "github.com/raftps/raftps/api/raftpspb"
	"github.com/raftps/raftps/pserver/psclient"
	"github.com/raftps/raftps/pserver/wire"
)

// cpuTime is the process's user+system CPU time.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// reportCPU adds MB per CPU-second (both ends of the connection live in
// this process): a throughput figure that other load on a shared machine
// does not distort the way wall-clock MB/s is.
func reportCPU(b *testing.B, start time.Duration, bytesPerOp int64) {
	cpu := (cpuTime() - start).Seconds()
	if cpu > 0 {
		b.ReportMetric(float64(bytesPerOp)*float64(b.N)/1e6/cpu, "MB/cpu-s")
	}
}

// benchParams is the model size of the transport benchmarks: 10M float32s (40 MB).
const benchParams = 10_000_000

// BenchmarkPushPull: one op = every trainer pulls the whole 10M-parameter
// model and pushes a full gradient (async SGD) over 2 loopback gRPC
// pservers; MB/s counts both directions of every trainer.
func BenchmarkPushPull(b *testing.B) {
	for _, mode := range []string{"unary", "stream"} {
		for _, trainers := range []int{1, 2, 4} {
			b.Run(fmt.Sprintf("%s/trainers=%d", mode, trainers), func(b *testing.B) {
				spec := &pb.JobSpec{Name: "bench", Mode: pb.UpdateMode_UPDATE_MODE_ASYNC, NumPservers: 2,
					Optimizer: &pb.OptimizerSpec{Name: "sgd", LearningRate: 1e-6},
					Params:    []*pb.ParamSpec{{Name: "w", Shape: []int64{benchParams}}}}
				addrs, _, _ := startServers(b, spec, 2)
				thr := -1
				if mode == "stream" {
					thr = 0
				}
				type tr struct {
					c      *psclient.Client
					params map[string][]float32
					g      *psclient.Grads
				}
				var ts []tr
				for i := range trainers {
					c, err := psclient.NewClient(spec, fmt.Sprint("t", i), resolverOf(addrs), psclient.WithStreamThreshold(thr))
					if err != nil {
						b.Fatal(err)
					}
					defer c.Close()
					ts = append(ts, tr{c, c.NewParams(), &psclient.Grads{Dense: map[string][]float32{"w": make([]float32, benchParams)}, Examples: 1}})
				}
				ctx := context.Background()
				b.SetBytes(int64(trainers) * 2 * 4 * benchParams)
				b.ResetTimer()
				start := cpuTime()
				defer func() { reportCPU(b, start, int64(trainers)*2*4*benchParams) }()
				for range b.N {
					var wg sync.WaitGroup
					for _, t := range ts {
						wg.Add(1)
						go func() {
							defer wg.Done()
							if err := t.c.Pull(ctx, t.params); err != nil {
								b.Error(err)
							}
							if err := t.c.Push(ctx, t.g); err != nil {
								b.Error(err)
							}
						}()
					}
					wg.Wait()
				}
			})
		}
	}
}

// rawCodec passes []byte through unchanged (no protobuf).
type rawCodec struct{}

func (rawCodec) Marshal(v any) ([]byte, error) { return *(v.(*[]byte)), nil }
func (rawCodec) Unmarshal(data []byte, v any) error {
	*(v.(*[]byte)) = append((*(v.(*[]byte)))[:0], data...)
	return nil
}
func (rawCodec) Name() string { return "raw" }

var echoDesc = grpc.ServiceDesc{
	ServiceName: "bench.Echo",
	HandlerType: (*any)(nil),
	Methods: []grpc.MethodDesc{{
		MethodName: "Echo",
		Handler: func(_ any, _ context.Context, dec func(any) error, _ grpc.UnaryServerInterceptor) (any, error) {
			var in []byte
			if err := dec(&in); err != nil {
				return nil, err
			}
			return &in, nil
		},
	}},
}

// BenchmarkGRPCEcho: the same 40 MB echoed by a default-config gRPC
// service (only the message size limits raised) with a raw bytes codec.
func BenchmarkGRPCEcho(b *testing.B) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	gs := grpc.NewServer(grpc.ForceServerCodec(rawCodec{}), grpc.MaxRecvMsgSize(wire.MaxMessageSize), grpc.MaxSendMsgSize(wire.MaxMessageSize))
	gs.RegisterService(&echoDesc, struct{}{})
	go gs.Serve(lis)
	defer gs.Stop()
	cc, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.ForceCodec(rawCodec{}), grpc.MaxCallRecvMsgSize(wire.MaxMessageSize), grpc.MaxCallSendMsgSize(wire.MaxMessageSize)))
	if err != nil {
		b.Fatal(err)
	}
	defer cc.Close()
	in := make([]byte, 4*benchParams)
	var out []byte
	b.SetBytes(2 * 4 * benchParams)
	b.ResetTimer()
	start := cpuTime()
	defer func() { reportCPU(b, start, 2*4*benchParams) }()
	for range b.N {
		if err := cc.Invoke(context.Background(), "/bench.Echo/Echo", &in, &out); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkRawTCP: the same 40 MB sent and echoed back over one loopback
// TCP connection with the pserver's sockets (wire.Listen, wire.Dial).
func BenchmarkRawTCP(b *testing.B) {
	lis, err := wire.Listen("127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	defer lis.Close()
	const n = 4 * benchParams
	go func() {
		c, err := lis.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		buf := make([]byte, n)
		for {
			if _, err := io.ReadFull(c, buf); err != nil {
				return
			}
			if _, err := c.Write(buf); err != nil {
				return
			}
		}
	}()
	c, err := wire.Dial(context.Background(), lis.Addr().String())
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	out, in := make([]byte, n), make([]byte, n)
	b.SetBytes(2 * n)
	b.ResetTimer()
	start := cpuTime()
	defer func() { reportCPU(b, start, 2*n) }()
	for range b.N {
		done := make(chan error, 1)
		go func() { _, err := c.Write(out); done <- err }()
		if _, err := io.ReadFull(c, in); err != nil {
			b.Fatal(err)
		}
		if err := <-done; err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkMemcpy: the same 40 MB copied there and back in memory.
func BenchmarkMemcpy(b *testing.B) {
	x, y := make([]byte, 4*benchParams), make([]byte, 4*benchParams)
	b.SetBytes(2 * 4 * benchParams)
	start := cpuTime()
	defer func() { reportCPU(b, start, 2*4*benchParams) }()
	for range b.N {
		copy(y, x)
		copy(x, y)
	}
}

// BenchmarkSyncPush: one op = one sync step of one trainer on one slot
// (Slot.Push, no gRPC) of a 101,770-parameter MLP (784x128, 128x10 and
// biases, the trainer bench's model) with momentum: parse and check the
// gradient, then the update. cpu-us/op is the process's CPU per step, less
// distorted by other load than ns/op.
func BenchmarkSyncPush(b *testing.B) {
	s, ts := soloSlot(b, mlpSpec())
	ctx := context.Background()
	b.ResetTimer()
	c0 := cpuTime()
	for i := 0; i < b.N; i++ {
		v := s.Version()
		if _, err := s.Push(ctx, &pb.PushRequest{Job: "j", Trainer: "t", Version: v, Step: v, Grads: ts, Examples: 64, PushId: uint64(i + 1)}); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64((cpuTime()-c0).Microseconds())/float64(b.N), "cpu-us/op")
}

// mlpSpec is a sync job of the trainer bench's MLP (784x128, 128x10 and
// biases: 101,770 float32s, 407 KB) with momentum, on one pserver.
func mlpSpec() *pb.JobSpec {
	return &pb.JobSpec{Name: "j", Mode: pb.UpdateMode_UPDATE_MODE_SYNC, Seed: 1, NumPservers: 1,
		Optimizer: &pb.OptimizerSpec{Name: "momentum", LearningRate: 0.05, Momentum: 0.9},
		Params: []*pb.ParamSpec{
			{Name: "w1", Shape: []int64{784, 128}, Init: pb.Initializer_INIT_NORMAL},
			{Name: "b1", Shape: []int64{128}},
			{Name: "w2", Shape: []int64{128, 10}, Init: pb.Initializer_INIT_NORMAL},
			{Name: "b2", Shape: []int64{10}},
		}}
}

// BenchmarkPushPullMLP: one op = one sync step of one trainer through the
// real client and a loopback gRPC pserver (Client.PushPull: the gradient
// out, the step's update, the parameters back) on the MLP of mlpSpec: what
// a trainer waits for between two steps. BenchmarkSyncPush is the
// pserver's share of it. cpu-us/op counts both ends (one process).
//
// Every third op first keeps the calling goroutine busy for 2 ms (the
// trainer's forward and backward pass on this model take about that), so
// that the threads serving the call have gone idle when it starts, as
// they have in a trainer. cold-us is the mean round trip of those ops (the
// busy time not counted), warm-us that of the ops two after them (the
// third op of each cycle, whose predecessor was back to back too);
// cold/warm is their ratio: what waking idle threads adds to a round trip
// on this machine. ns/op includes the busy time.
func BenchmarkPushPullMLP(b *testing.B) {
	spec := mlpSpec()
	addrs, _, slots := startServers(b, spec, 1)
	slots[0].SetTrainers([]string{"t"})
	c, err := psclient.NewClient(spec, "t", resolverOf(addrs))
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	params := c.NewParams()
	g := &psclient.Grads{Dense: map[string][]float32{}, Examples: 64}
	for name, w := range params {
		x := make([]float32, len(w))
		for i := range x {
			x[i] = float32(i%7-3) * 1e-3
		}
		g.Dense[name] = x
	}
	ctx := context.Background()
	if err := c.Pull(ctx, params); err != nil {
		b.Fatal(err)
	}
	var rtt [3]time.Duration // by i%3: cold, after cold (not reported), warm
	var n [3]int
	var busy time.Duration
	b.ResetTimer()
	c0 := cpuTime()
	for i := range b.N {
		k := i % 3
		if k == 0 {
			t := time.Now()
			spin(2 * time.Millisecond)
			busy += time.Since(t)
		}
		t := time.Now()
		if err := c.PushPull(ctx, g, params); err != nil {
			b.Fatal(err)
		}
		rtt[k] += time.Since(t)
		n[k]++
	}
	b.StopTimer()
	b.ReportMetric(float64((cpuTime()-c0-busy).Microseconds())/float64(b.N), "cpu-us/op")
	if v := slots[0].Version(); v != int64(b.N) {
		b.Fatalf("slot at version %d after %d steps", v, b.N)
	}
	if n[2] > 0 {
		cold := float64(rtt[0].Microseconds()) / float64(n[0])
		warm := float64(rtt[2].Microseconds()) / float64(n[2])
		b.ReportMetric(warm, "warm-us")
		b.ReportMetric(cold, "cold-us")
		b.ReportMetric(cold/warm, "cold/warm")
	}
}

// spin keeps the calling goroutine busy for d without touching memory.
func spin(d time.Duration) {
	for t := time.Now(); time.Since(t) < d; {
		for i := 0; i < 1000; i++ {
			runtime.KeepAlive(i)
		}
	}
}

// BenchmarkSyncPushCores: one op = two sync steps of one trainer on one
// slot (Slot.Push, no gRPC) of an 8.4M-parameter dense layer (4096x2048)
// with momentum, one with the update in chunks on every core (runChunks)
// and one with every chunk on the calling goroutine, in turn (the order
// alternates per op). Reported: parallel-ms/op and serial-ms/op, the same
// as parameters updated per second (parallel-Mparams/s, serial-Mparams/s),
// and speedup, the median of the per-op ratios serial/parallel (min and
// max beside it).
func BenchmarkSyncPushCores(b *testing.B) {
	spec := mlpSpec()
	spec.Params = []*pb.ParamSpec{{Name: "w", Shape: []int64{4096, 2048}, Init: pb.Initializer_INIT_NORMAL}}
	s, ts := soloSlot(b, spec)
	ctx := context.Background()
	id := uint64(0)
	push := func(bool) time.Duration {
		id++
		v := s.Version()
		t0 := time.Now()
		if _, err := s.Push(ctx, &pb.PushRequest{Job: "j", Trainer: "t", Version: v, Step: v, Grads: ts, Examples: 64, PushId: id}); err != nil {
			b.Fatal(err)
		}
		return time.Since(t0)
	}
	push(false) // first touch of the optimizer state
	coresVsOne(b, 4096*2048, push)
}

// coresVsOne runs op on every core and on one (serialChunks) alternately,
// b.N times each, starting with the other side each time, and reports
// parallel-ms/op and serial-ms/op, params updated per second
// (parallel-Mparams/s, serial-Mparams/s; params per op), and speedup, the
// median of the per-op ratios serial/parallel (min and max beside it).
func coresVsOne(b *testing.B, params float64, op func(serial bool) time.Duration) {
	run := func(serial bool) time.Duration {
		serialChunks.Store(serial)
		defer serialChunks.Store(false)
		return op(serial)
	}
	var par, ser time.Duration
	var ratios []float64
	b.ResetTimer()
	for i := range b.N {
		var p, q time.Duration
		if i%2 == 0 {
			p, q = run(false), run(true)
		} else {
			q, p = run(true), run(false)
		}
		par, ser = par+p, ser+q
		ratios = append(ratios, q.Seconds()/p.Seconds())
	}
	slices.Sort(ratios)
	b.ReportMetric(par.Seconds()*1e3/float64(b.N), "parallel-ms/op")
	b.ReportMetric(ser.Seconds()*1e3/float64(b.N), "serial-ms/op")
	n := float64(b.N) * params / 1e6
	b.ReportMetric(n/par.Seconds(), "parallel-Mparams/s")
	b.ReportMetric(n/ser.Seconds(), "serial-Mparams/s")
	b.ReportMetric(ratios[len(ratios)/2], "speedup")
	b.ReportMetric(ratios[0], "speedup-min")
	b.ReportMetric(ratios[len(ratios)-1], "speedup-max")
}

// soloSlot is slot 0 of spec (one pserver) with trainer "t" as its only
// trainer, and a gradient for every dense block of it.
func soloSlot(b *testing.B, spec *pb.JobSpec) (*Slot, []*pb.Tensor) {
	s, err := NewSlot(spec, 0, 1)
	if err != nil {
		b.Fatal(err)
	}
	s.SetTrainers([]string{"t"})
	return s, constGrads(s.layout)
}

// constGrads is a gradient for every dense block of layout.
func constGrads(layout *wire.Layout) []*pb.Tensor {
	var ts []*pb.Tensor
	for _, p := range layout.Params {
		for blk := int64(0); blk < p.Blocks; blk++ {
			lo, hi := layout.BlockRange(p, blk)
			g := make([]float32, hi-lo)
			for i := range g {
				g[i] = float32(i%7-3) * 1e-3
			}
			ts = append(ts, &pb.Tensor{Name: p.Spec.GetName(), Block: blk, Data: wire.Float32Bytes(g)})
		}
	}
	return ts
}

// BenchmarkSyncStepTrainers: one op = one sync step of an 8.4M-param layer
// (momentum) to which 2 trainers push at once: the last push completes the
// step (the weighted mean of both gradients, then the update). Parallel
// and one-core steps alternate (as in BenchmarkSyncPushCores); ms/op is
// the step's wall time, from both pushes sent to both answered, and
// Mparams/s the params updated per second of it.
func BenchmarkSyncStepTrainers(b *testing.B) {
	spec := mlpSpec()
	spec.Params = []*pb.ParamSpec{{Name: "w", Shape: []int64{4096, 2048}, Init: pb.Initializer_INIT_NORMAL}}
	s, err := NewSlot(spec, 0, 1)
	if err != nil {
		b.Fatal(err)
	}
	trainers := []string{"t1", "t2"}
	s.SetTrainers(trainers)
	ts := constGrads(s.layout)
	ctx := context.Background()
	id := uint64(0)
	step := func(bool) time.Duration {
		id++
		v := s.Version()
		errs := make([]error, len(trainers))
		var wg sync.WaitGroup
		t0 := time.Now()
		for i, t := range trainers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				_, errs[i] = s.Push(ctx, &pb.PushRequest{Job: "j", Trainer: t, Version: v, Step: v, Grads: ts, Examples: 64, PushId: id})
			}()
		}
		wg.Wait()
		d := time.Since(t0)
		for _, err := range errs {
			if err != nil {
				b.Fatal(err)
			}
		}
		if s.Version() != v+1 {
			b.Fatalf("version %d after a step from %d", s.Version(), v)
		}
		return d
	}
	step(false) // first touch of the optimizer state
	coresVsOne(b, 4096*2048, step)
}
