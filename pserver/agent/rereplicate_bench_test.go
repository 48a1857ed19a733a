package agent

import (
	"context"
	"flag"
	"fmt"
	"os"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	pb "github.com/raftps/raftps/api/raftpspb"
	"github.com/raftps/raftps/pserver"
	"github.com/raftps/raftps/pserver/wire"
)

var rereplicateParams = flag.Int64("rereplicate.params", 0,
	"BenchmarkRereplicate: parameters of the slot (0: $"+RereplicateParamsEnv+", else 1M and 10M)")

// RereplicateParamsEnv names the environment variable that sets
// BenchmarkRereplicate's slot size when -rereplicate.params does not
// (raftps-bench's row: go test's own flags come before the package there).
const RereplicateParamsEnv = "RAFTPS_BENCH_REREPLICATE_PARAMS"

// BenchmarkRereplicate measures re-replication (issue 34) of one
// momentum slot of N float32 parameters (values and momentum: 8N bytes)
// on three loopback nodes: a trainer pushes gradients (of the whole
// slot, at most benchPushParams parameters; paced above bigSlotParams)
// to the primary (replicas 2, its backup built from the initializer), the
// backup's node dies (dropped at the next push), and a third node joins
// the live members: the primary builds a new backup there from its
// snapshot while the trainer keeps pushing. It reports build_s (from the
// third node's arrival to the record naming it), and the trainer's
// pushes per second before the kill (R = 2), during the build, and after
// the join. -rereplicate.params=N (or $RAFTPS_BENCH_REREPLICATE_PARAMS)
// runs one size.
func BenchmarkRereplicate(b *testing.B) {
	sizes := []int64{1 << 20, 10 << 20}
	n := *rereplicateParams
	if v := os.Getenv(RereplicateParamsEnv); n == 0 && v != "" {
		var err error
		if n, err = strconv.ParseInt(v, 10, 64); err != nil || n <= 0 {
			b.Fatalf("%s=%q: want a positive number of parameters", RereplicateParamsEnv, v)
		}
	}
	if n > 0 {
		sizes = []int64{n}
	}
	for _, n := range sizes {
		b.Run(fmt.Sprintf("params=%d", n), func(b *testing.B) {
			for range b.N {
				benchRereplicate(b, n)
			}
		})
	}
}

func benchRereplicate(b *testing.B, n int64) {
	meta := newFakeMeta()
	spec := &pb.JobSpec{Name: "bench", Mode: pb.UpdateMode_UPDATE_MODE_ASYNC, NumPservers: 1, Replicas: 2, Seed: 7,
		NumVirtualShards: 4, DenseBlockSize: 1 << 20,
		Optimizer: &pb.OptimizerSpec{Name: "momentum", LearningRate: 0.01, Momentum: 0.9},
		Params:    []*pb.ParamSpec{{Name: "w", Shape: []int64{n}, Init: pb.Initializer_INIT_ZEROS}}}
	meta.setJobs(running(spec))
	nodes, mem := startReplicaNodes(b, meta, 0, "n1", "n2", "n3")
	third := mem.PServerPeers()[2]
	mem.remove("n3")
	nodes[0].start()
	nodes[1].start()
	nodes[2].start()
	wait := func(what string, cond func() bool) {
		deadline := time.Now().Add(10 * time.Minute)
		for !cond() {
			if time.Now().After(deadline) {
				b.Fatalf("timed out waiting for %s", what)
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	var prim, back *replicaNode
	wait("a primary and its backup", func() bool {
		r, ok := replicaRecord(b, meta, "bench", 0)
		if !ok || len(r.Backups) != 1 {
			return false
		}
		prim, back = nodeByID(nodes, r.Primary.Node), nodeByID(nodes, r.Backups[0].Node)
		_, serving := prim.ta.served("bench", 0)
		return serving && back.ta.backupOf("bench", 0) != nil
	})
	s, _ := prim.ta.served("bench", 0)
	maxParams, every := int64(benchPushParams), time.Duration(0)
	if n > bigSlotParams {
		maxParams, every = bigSlotPushParams, bigSlotPushEvery
	}
	req := fullGradient(s, maxParams)
	var pushes atomic.Int64
	stop, done := make(chan struct{}), make(chan struct{})
	var pushErr atomic.Pointer[error]
	go func() {
		defer close(done)
		for id := uint64(1); ; id++ {
			select {
			case <-stop:
				return
			default:
			}
			r := &pb.PushRequest{Trainer: "t1", PushId: id, Examples: 1, Grads: req}
			if _, err := s.Push(context.Background(), r); err != nil {
				pushErr.Store(&err)
				return
			}
			pushes.Add(1)
			time.Sleep(every)
		}
	}()
	rate := func(d time.Duration) float64 {
		p0, t0 := pushes.Load(), time.Now()
		time.Sleep(d)
		return float64(pushes.Load()-p0) / time.Since(t0).Seconds()
	}
	before := rate(3 * time.Second)
	back.kill(mem)
	wait("the dead backup dropped", func() bool { r, _ := replicaRecord(b, meta, "bench", 0); return len(r.Backups) == 0 })
	mem.mu.Lock()
	mem.mem = append(mem.mem, third)
	mem.mu.Unlock()
	start := time.Now()
	p0 := pushes.Load()
	wait("the new backup joined", func() bool { r, _ := replicaRecord(b, meta, "bench", 0); return len(r.Backups) == 1 })
	build := time.Since(start)
	during := float64(pushes.Load()-p0) / build.Seconds()
	after := rate(3 * time.Second)
	close(stop)
	<-done
	if e := pushErr.Load(); e != nil {
		b.Fatalf("push: %v", *e)
	}
	b.ReportMetric(build.Seconds(), "build_s")
	b.ReportMetric(before, "push/s_before")
	b.ReportMetric(during, "push/s_during")
	b.ReportMetric(after, "push/s_after")
	b.Logf("params %d (%d MiB of values and momentum): build %v; trainer pushes/s: %.1f before (R=2), %.1f during the build, %.1f after the join",
		n, 8*n>>20, build.Round(time.Millisecond), before, during, after)
}

// benchPushParams caps the parameters one push of BenchmarkRereplicate
// covers: a full push of a 100M-parameter slot holds the slot's lock for
// seconds on a 2-core machine and the figures would be of the optimizer.
const benchPushParams = 8 << 20

// Slots above bigSlotParams are pushed at most every bigSlotPushEvery
// with gradients of at most bigSlotPushParams parameters (5 MiB/s of
// updates): back-to-back pushes of 8M parameters (hundreds of MiB/s)
// arrive faster than a 100M-parameter install completes on this machine,
// so the learner's bounded buffer (learnerMaxBytes) overflows and every
// build is abandoned (measured: 60 attempts in 5 minutes).
const (
	bigSlotParams     = 16 << 20
	bigSlotPushParams = 1 << 20
	bigSlotPushEvery  = 200 * time.Millisecond
)

// fullGradient is a gradient for the blocks of slot s, in order, up to
// maxParams parameters (all of a slot up to that size), every element
// 1e-3.
func fullGradient(s *pserver.Slot, maxParams int64) []*pb.Tensor {
	l := s.Layout()
	var ts []*pb.Tensor
	var n int64
	for _, p := range l.Params {
		for blk := int64(0); blk < p.Blocks && n < maxParams; blk++ {
			if l.SlotOfBlock(p, blk) != s.Index() {
				continue
			}
			lo, hi := l.BlockRange(p, blk)
			g := make([]float32, hi-lo)
			n += hi - lo
			for i := range g {
				g[i] = 1e-3
			}
			ts = append(ts, &pb.Tensor{Name: p.Spec.GetName(), Block: blk, Data: wire.Float32Bytes(g)})
		}
	}
	return ts
}
