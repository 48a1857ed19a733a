package bench

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"path/filepath"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	pb "github.com/raftps/raftps/api/raftpspb"
	"github.com/raftps/raftps/pserver"
	"github.com/raftps/raftps/pserver/checkpoint"
	"github.com/raftps/raftps/raftstore"
	"github.com/raftps/raftps/schema"
)

// heapInUse is the live heap after a full GC.
func heapInUse() float64 {
	runtime.GC()
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return float64(m.HeapAlloc)
}

// memCurve measures the live heap held by n objects made by add (n over
// counts), from an empty start each time: y is bytes per object, the
// slope of the total is reported through the per-object curve (0: each
// object costs the same however many there are).
//
// A first round at counts[0] is made and released unmeasured: the heap
// left by what ran before (the previous curve's release, the store's
// first commands) settles in it. Without it the first point of the
// per-job curve read 0.03-0.1 bytes per job in every run (and 21.8 KB
// from 100 jobs on), a "superlinear" slope of 5-6 from nothing.
func memCurve(c Curve, counts []int, add func(n int) (release func(), err error)) (Curve, error) {
	release, err := add(counts[0])
	if err != nil {
		return c, fmt.Errorf("%s warm-up at %d: %w", c.Name, counts[0], err)
	}
	release()
	for _, n := range counts {
		h0 := heapInUse()
		release, err := add(n)
		if err != nil {
			return c, fmt.Errorf("%s at %d: %w", c.Name, n, err)
		}
		h1 := heapInUse()
		release()
		c.Points = append(c.Points, Point{float64(n), max(h1-h0, 1) / float64(n)})
	}
	return c, nil
}

// memoryCurves: heap bytes per registered trainer, per job and per slot
// replica (the replicated FSM state of one, on a single-node store), and
// per gRPC connection (client and server side, in this process).
func memoryCurves(ctx context.Context, dir string, quick bool) ([]Curve, error) {
	counts := []int{10, 100, 1000}
	s, err := openScalingStore(ctx, dir)
	if err != nil {
		return nil, err
	}
	defer s.Close()
	lease, err := s.LeaseGrant(ctx, &pb.LeaseGrantRequest{Ttl: 600})
	if err != nil {
		return nil, err
	}
	var curves []Curve
	round := 0
	// From 100: 10 registrations (4 KiB) are within the heap's noise (the
	// store's own goroutines allocate meanwhile): one run read 0.1 bytes
	// per trainer at 10, a slope of 1.81 from nothing.
	trainers, err := memCurve(Curve{Name: "mem-per-trainer", Title: "heap per registered trainer (FSM key with lease)", XLabel: "trainers", YLabel: "bytes per trainer",
		Expect: "0: a key and a lease attachment each"}, []int{100, 1000, 10000}, func(n int) (func(), error) {
		round++
		job := fmt.Sprintf("m%d", round)
		for i := range n {
			if _, err := s.Put(ctx, &pb.PutRequest{Key: []byte(schema.TrainerKey(job, fmt.Sprintf("t%d", i))), Value: []byte(`{"node":"n1","incarnation":"1"}`), Lease: lease.Id}); err != nil {
				return nil, err
			}
		}
		return func() {
			_, _ = s.DeleteRange(ctx, &pb.DeleteRangeRequest{Key: []byte(schema.TrainerPrefix(job)), RangeEnd: prefixEnd(schema.TrainerPrefix(job))})
		}, nil
	})
	curves = append(curves, trainers)
	if err != nil {
		return curves, err
	}
	jobs, err := memCurve(Curve{Name: "mem-per-job", Title: "heap per job (1000 tasks, FSM)", XLabel: "jobs", YLabel: "bytes per job",
		Expect: "0: a job's state is its spec and task table"}, []int{30, 100, 300}, func(n int) (func(), error) {
		round++
		for i := range n {
			if _, err := s.SubmitJob(ctx, &pb.SubmitJobRequest{Spec: scalingJob(fmt.Sprintf("j%d-%d", round, i), 1000)}); err != nil {
				return nil, err
			}
		}
		return func() {}, nil // jobs stay: each point's delta is its own
	})
	curves = append(curves, jobs)
	if err != nil {
		return curves, err
	}
	slots, err := memCurve(Curve{Name: "mem-per-slot", Title: "heap per slot replica (1024 params, momentum)", XLabel: "slots", YLabel: "bytes per slot",
		Expect: "0: params, optimizer state and bookkeeping of one slot"}, counts, func(n int) (func(), error) {
		held := make([]*pserver.Slot, n)
		for i := range held {
			sl, err := pserver.NewSlot(scalingSpec(1024, 1), 0, 1)
			if err != nil {
				return nil, err
			}
			held[i] = sl
		}
		return func() { runtime.KeepAlive(held) }, nil
	})
	curves = append(curves, slots)
	if err != nil {
		return curves, err
	}
	conns, err := memCurve(Curve{Name: "mem-per-conn", Title: "heap per gRPC connection (client + server side)", XLabel: "connections", YLabel: "bytes per connection",
		Expect: "0: buffers and HTTP/2 state of one connection"}, counts[:2], grpcConns)
	curves = append(curves, conns)
	return curves, err
}

func prefixEnd(p string) []byte {
	b := []byte(p)
	b[len(b)-1]++
	return b
}

// grpcConns opens n client connections to one loopback gRPC server, each
// ready with one health check done.
func grpcConns(n int) (func(), error) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	srv := grpc.NewServer()
	healthpb.RegisterHealthServer(srv, health.NewServer())
	go srv.Serve(lis)
	var ccs []*grpc.ClientConn
	release := func() {
		for _, c := range ccs {
			c.Close()
		}
		srv.Stop()
	}
	for range n {
		cc, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			release()
			return nil, err
		}
		ccs = append(ccs, cc)
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		_, err = healthpb.NewHealthClient(cc).Check(ctx, &healthpb.HealthCheckRequest{})
		cancel()
		if err != nil {
			release()
			return nil, err
		}
	}
	return release, nil
}

// metadataVsJobs: N jobs (1, 4, 16) train at once on a single-node store,
// each with 4 simulated trainers and 1 pserver slot doing what theirs do
// against the metadata store, at a fixed pace: register (a put with a
// lease), renew the lease every 100 ms, take and finish a task every
// 20 ms, and the slot writes its checkpoint pointer every 200 ms. y is the
// Raft log entries and bytes per second.
func metadataVsJobs(ctx context.Context, dir string, quick bool) ([]Curve, error) {
	s, dur, closeStore, err := openPhases(ctx, dir, quick)
	if err != nil {
		return nil, err
	}
	defer closeStore()
	ent := Curve{Name: "raft-entries-vs-jobs", Title: "Raft entries/s, N jobs x 4 trainers (keepalive 100 ms, task 20 ms, pointer 200 ms)",
		XLabel: "concurrent jobs", YLabel: "entries per second", Expect: "<= 1: each job writes at its own pace; batching shares entries"}
	byt := Curve{Name: "raft-bytes-vs-jobs", Title: "Raft bytes/s, N jobs x 4 trainers", XLabel: "concurrent jobs", YLabel: "bytes per second",
		Expect: "1: each job's writes are the same size"}
	var wins []logSpan
	var secs []float64
	ns := []int{1, 4, 16}
	for round, n := range ns {
		for j := range n {
			if _, err := s.SubmitJob(ctx, &pb.SubmitJobRequest{Spec: scalingJob(fmt.Sprintf("r%d-%d", round, j), 5000)}); err != nil {
				return nil, err
			}
			if _, err := s.Put(ctx, &pb.PutRequest{Key: []byte(schema.SlotKey(fmt.Sprintf("r%d-%d", round, j), 0)), Value: []byte(`{"node":"n1","incarnation":1}`)}); err != nil {
				return nil, err
			}
		}
		from := s.Stats().LastLogIndex
		lctx, cancel := context.WithTimeout(ctx, dur)
		t0 := time.Now()
		var wg sync.WaitGroup
		var failed atomic.Value
		for j := range n {
			job := fmt.Sprintf("r%d-%d", round, j)
			for t := range 4 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					if err := simTrainer(lctx, s, job, fmt.Sprintf("t%d", t)); err != nil && lctx.Err() == nil {
						failed.Store(err)
					}
				}()
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				for v := int64(1); lctx.Err() == nil; v++ {
					ptr := fmt.Sprintf(`{"version":%d,"step":%d,"manifest":"0123456789abcdef0123456789abcdef","replicas":["n1"],"incarnation":1}`, v, v)
					if _, err := s.Put(lctx, &pb.PutRequest{Key: []byte(schema.CheckpointKey(job, 0)), Value: []byte(ptr)}); err != nil && lctx.Err() == nil {
						failed.Store(err)
					}
					sleepCtx(lctx, 200*time.Millisecond)
				}
			}()
		}
		wg.Wait()
		cancel()
		if err, _ := failed.Load().(error); err != nil {
			return nil, fmt.Errorf("%d jobs: %w", n, err)
		}
		secs = append(secs, time.Since(t0).Seconds())
		wins = append(wins, logSpan{from: from, to: s.Stats().LastLogIndex})
	}
	if err := closeStore(); err != nil {
		return nil, err
	}
	for i, w := range wins {
		e, b, err := logWindow(dir, w.from, w.to)
		if err != nil {
			return nil, err
		}
		ent.Points = append(ent.Points, Point{float64(ns[i]), float64(e) / secs[i]})
		byt.Points = append(byt.Points, Point{float64(ns[i]), float64(b) / secs[i]})
	}
	return []Curve{ent, byt}, nil
}

func sleepCtx(ctx context.Context, d time.Duration) {
	select {
	case <-ctx.Done():
	case <-time.After(d):
	}
}

// simTrainer registers trainer (a key under a 10 s lease), then renews the
// lease every 100 ms and takes and finishes a task every 20 ms until ctx
// ends.
func simTrainer(ctx context.Context, s *raftstore.Store, job, trainer string) error {
	g, err := s.LeaseGrant(ctx, &pb.LeaseGrantRequest{Ttl: 10})
	if err != nil {
		return err
	}
	if _, err := s.Put(ctx, &pb.PutRequest{Key: []byte(schema.TrainerKey(job, trainer)), Value: []byte(`{"node":"n1","incarnation":"1"}`), Lease: g.Id}); err != nil {
		return err
	}
	next := time.Now()
	for ctx.Err() == nil {
		if time.Now().After(next) {
			if _, err := s.LeaseKeepAlive(ctx, g.Id); err != nil {
				return err
			}
			next = time.Now().Add(100 * time.Millisecond)
		}
		r, err := s.GetTask(ctx, &pb.GetTaskRequest{Job: job, Trainer: trainer})
		if err != nil {
			return err
		}
		sleepCtx(ctx, 20*time.Millisecond)
		if r.Result == pb.GetTaskResponse_TASK && ctx.Err() == nil {
			if _, err := s.TaskFinished(ctx, &pb.TaskFinishedRequest{Job: job, TaskId: r.Task.Id, Epoch: r.Task.Epoch, Trainer: trainer}); err != nil {
				return err
			}
		}
	}
	return nil
}

// checkpointVsParams: a slot of 1M to 100M params (10M quick) snapshotted,
// encoded into vshard blobs and checkpointed (local Pebble, synced, and
// the pointer committed through a single-node Raft store), the way a
// pserver does: seconds and bytes per checkpoint.
func checkpointVsParams(ctx context.Context, dir string, quick bool) ([]Curve, error) {
	sizes := []int64{1 << 20, 4 << 20, 16 << 20, 100 << 20}
	if quick {
		sizes = sizes[:3]
	}
	s, err := openScalingStore(ctx, filepath.Join(dir, "meta"))
	if err != nil {
		return nil, err
	}
	defer s.Close()
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	st, err := checkpoint.Open(filepath.Join(dir, "ckpt"), logger)
	if err != nil {
		return nil, err
	}
	defer st.Close()
	mgr, err := checkpoint.New(checkpoint.Config{NodeID: "n1", Store: st, Meta: s, Logger: logger})
	if err != nil {
		return nil, err
	}
	tm := Curve{Name: "checkpoint-time-vs-params", Title: "checkpoint time (snapshot + encode + write + pointer), 1 slot", XLabel: "params", YLabel: "seconds",
		Expect: "1: every byte is written once (fsync'd)"}
	by := Curve{Name: "checkpoint-bytes-vs-params", Title: "checkpoint bytes, 1 slot", XLabel: "params", YLabel: "bytes",
		Expect: "1: 4 bytes per param plus optimizer state"}
	for i, n := range sizes {
		job := fmt.Sprintf("c%d", i)
		if _, err := s.Put(ctx, &pb.PutRequest{Key: []byte(schema.SlotKey(job, 0)), Value: []byte(`{"node":"n1","incarnation":1}`)}); err != nil {
			return nil, err
		}
		spec := scalingSpec(n, 1)
		spec.Name = job
		sl, err := pserver.NewSlot(spec, 0, 1)
		if err != nil {
			return nil, err
		}
		t0 := time.Now()
		snap := sl.Snapshot()
		blobs := map[int32][]byte{}
		var total int64
		for v := range snap.VShards {
			b, err := pserver.EncodeVShard(snap, v)
			if err != nil {
				return nil, err
			}
			blobs[v], total = b, total+int64(len(b))
		}
		if _, err := mgr.Writer(job, 0).Checkpoint(ctx, checkpoint.WriteRequest{Job: job, Slot: 0, NumPservers: 1,
			Version: 1, Step: 1, Incarnation: 1, Blobs: blobs, Policy: &pb.CheckpointPolicy{KeepMax: 1, Replicas: 1}}); err != nil {
			return nil, fmt.Errorf("%d params: %w", n, err)
		}
		tm.Points = append(tm.Points, Point{float64(n), time.Since(t0).Seconds()})
		by.Points = append(by.Points, Point{float64(n), float64(total)})
		runtime.KeepAlive(sl)
	}
	tm.fit()
	if len(tm.Points) > 0 {
		last := tm.Points[len(tm.Points)-1]
		tm.Note = fmt.Sprintf("1B params on paper, from the slope: %.3g s", last.Y*pow(1e9/last.X, tm.Slope))
	}
	return []Curve{tm, by}, nil
}
