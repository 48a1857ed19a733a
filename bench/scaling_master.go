package bench

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/raft"
	raftboltdb "github.com/hashicorp/raft-boltdb/v2"

	pb "github.com/raftps/raftps/api/raftpspb"
	"github.com/raftps/raftps/fsm"
	"github.com/raftps/raftps/raftstore"
)

// openScalingStore starts a single-node raftstore (raft-boltdb, fsync on)
// in dir, as the leader of a one-node cluster, with snapshots off so that
// every entry stays in the log for logWindow.
func openScalingStore(ctx context.Context, dir string) (*raftstore.Store, error) {
	cfg := raftstore.DefaultConfig()
	cfg.ID, cfg.DataDir, cfg.RaftAddr, cfg.Bootstrap = "n1", dir, "127.0.0.1:0", true
	cfg.SnapshotThreshold, cfg.TrailingLogs = 1<<40, 1<<40
	cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	s, err := raftstore.New(cfg, fsm.New(cfg.Logger), nil)
	if err != nil {
		return nil, err
	}
	if err := s.Open(); err != nil {
		return nil, err
	}
	for !s.IsLeader() {
		select {
		case <-ctx.Done():
			s.Close()
			return nil, ctx.Err()
		case <-time.After(10 * time.Millisecond):
		}
	}
	if err := s.LinearizableRead(ctx); err != nil {
		s.Close()
		return nil, err
	}
	return s, nil
}

// logWindow is the number of Raft log entries in (from, to] and their
// bytes (each entry's data), read from the closed store's raft-boltdb
// file in dir.
func logWindow(dir string, from, to uint64) (entries, bytes int64, err error) {
	st, err := raftboltdb.NewBoltStore(filepath.Join(dir, "raft", "raft.db"))
	if err != nil {
		return 0, 0, err
	}
	defer st.Close()
	var l raft.Log
	for i := from + 1; i <= to; i++ {
		if err := st.GetLog(i, &l); err != nil {
			return entries, bytes, fmt.Errorf("log entry %d: %w", i, err)
		}
		entries, bytes = entries+1, bytes+int64(len(l.Data))
	}
	return entries, bytes, nil
}

// scalingJob is a job of tasks tasks per pass (1 record each) and enough
// passes never to end during the bench.
func scalingJob(name string, tasks int64) *pb.JobSpec {
	return &pb.JobSpec{Name: name, Model: &pb.ModelSpec{Name: "softmax"},
		Dataset:        &pb.DatasetSpec{Path: "/data/none", Records: tasks},
		RecordsPerTask: 1, Passes: 1000, BatchSize: 1, NumPservers: 1,
		Optimizer: &pb.OptimizerSpec{Name: "sgd", LearningRate: 0.1}}
}

// taskCounts counts a phase's task calls: every GetTask and TaskFinished
// answered (each one Raft command), and the tasks finished.
type taskCounts struct{ calls, done atomic.Int64 }

// taskLoop is one simulated trainer: GetTask then TaskFinished, every
// call's latency into lat, until stop says so. stop is checked before each
// call, and calls run under ctx, not cancelled by stop: every command
// committed in a phase is a call counted in n.
func taskLoop(ctx context.Context, s *raftstore.Store, job, trainer string, lat *[]time.Duration, n *taskCounts, stop func() bool) {
	for !stop() {
		t0 := time.Now()
		r, err := s.GetTask(ctx, &pb.GetTaskRequest{Job: job, Trainer: trainer})
		if err != nil {
			return
		}
		*lat = append(*lat, time.Since(t0))
		n.calls.Add(1)
		if r.Result != pb.GetTaskResponse_TASK {
			time.Sleep(5 * time.Millisecond)
			continue
		}
		t1 := time.Now()
		if _, err := s.TaskFinished(ctx, &pb.TaskFinishedRequest{Job: job, TaskId: r.Task.Id, Epoch: r.Task.Epoch, Trainer: trainer}); err != nil {
			return
		}
		*lat = append(*lat, time.Since(t1))
		n.calls.Add(1)
		n.done.Add(1)
	}
}

// taskPhase runs trainers simulated trainers on job until stop, and
// returns their counts, call latencies (sorted), wall time and the Raft
// log window (from, to] they wrote.
func taskPhase(ctx context.Context, s *raftstore.Store, job string, trainers int, stop func(*taskCounts) bool) (*taskCounts, []time.Duration, time.Duration, logSpan) {
	var n taskCounts
	lats := make([][]time.Duration, trainers)
	from := s.Stats().LastLogIndex
	t0 := time.Now()
	var wg sync.WaitGroup
	for i := range trainers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			taskLoop(ctx, s, job, fmt.Sprintf("%s-t%d", job, i), &lats[i], &n, func() bool { return ctx.Err() != nil || stop(&n) })
		}()
	}
	wg.Wait()
	el := time.Since(t0)
	var all []time.Duration
	for _, l := range lats {
		all = append(all, l...)
	}
	slices.Sort(all)
	return &n, all, el, logSpan{from, s.Stats().LastLogIndex, n.calls.Load()}
}

// openPhases opens the single-node store of a scaling section and gives
// the length of each timed phase (1.5 s; quick: 0.7 s). closeStore closes
// the store once: the curves read its log after closing it, and the
// deferred call covers the early returns.
func openPhases(ctx context.Context, dir string, quick bool) (s *raftstore.Store, dur time.Duration, closeStore func() error, err error) {
	dur = 1500 * time.Millisecond
	if quick {
		dur = 700 * time.Millisecond
	}
	if s, err = openScalingStore(ctx, dir); err != nil {
		return nil, 0, nil, err
	}
	closed := false
	return s, dur, func() error {
		if closed {
			return nil
		}
		closed = true
		return s.Close()
	}, nil
}

// logSpan is a window (from, to] of the Raft log and the task calls that
// wrote it (0 where a curve divides by time instead).
type logSpan struct {
	from, to uint64
	calls    int64
}

// perCall reads span's entries and bytes from the closed store in dir and
// divides them by its calls.
func (w logSpan) perCall(dir string) (entries, bytes float64, err error) {
	e, b, err := logWindow(dir, w.from, w.to)
	if err != nil {
		return 0, 0, err
	}
	c := float64(max(w.calls, 1))
	return float64(e) / c, float64(b) / c, nil
}

// masterVsTrainers: the master's task calls (GetTask + TaskFinished, each
// one Raft command) from 1 to 1000 trainers in a loop on one job of a
// single-node store: tasks per second, p99 call latency, and Raft log
// entries and bytes per call; then bytes per call as a job's finished
// tasks grow.
func masterVsTrainers(ctx context.Context, dir string, quick bool) ([]Curve, error) {
	s, dur, closeStore, err := openPhases(ctx, dir, quick)
	if err != nil {
		return nil, err
	}
	defer closeStore()
	tp := Curve{Name: "master-tasks-vs-trainers", Title: "master tasks/s (GetTask+TaskFinished), 1 job", XLabel: "trainers", YLabel: "tasks per second",
		Expect: "~0 once the log's fsync is saturated: calls batch into shared entries"}
	p99 := Curve{Name: "master-p99-vs-trainers", Title: "master call p99 latency", XLabel: "trainers", YLabel: "p99 ms",
		Expect: "1 once saturated (queueing: more callers share the same throughput)"}
	var wins []logSpan
	ns := []int{1, 10, 100, 1000}
	for i, n := range ns {
		job := fmt.Sprintf("scale%d", i)
		if _, err := s.SubmitJob(ctx, &pb.SubmitJobRequest{Spec: scalingJob(job, 20000)}); err != nil {
			return nil, err
		}
		deadline := time.Now().Add(dur)
		c, lats, el, w := taskPhase(ctx, s, job, n, func(*taskCounts) bool { return time.Now().After(deadline) })
		if c.done.Load() == 0 {
			return nil, fmt.Errorf("%d trainers finished no task", n)
		}
		tp.Points = append(tp.Points, Point{float64(n), float64(c.done.Load()) / el.Seconds()})
		p99.Points = append(p99.Points, Point{float64(n), ms(Percentile(lats, 0.99))})
		wins = append(wins, w)
	}
	// Bytes per call as a job's finished tasks grow (doubling chunks, 10
	// trainers: x = 500, 1500, 3500, 7500): what the log carries per step
	// must not grow with steps.
	stepsCurve := Curve{Name: "raft-bytes-per-call-vs-tasks-done", Title: "Raft log bytes per task call as the job's finished tasks grow (10 trainers)",
		XLabel: "tasks finished in the job", YLabel: "bytes per call",
		Expect: "0: a task's commands and the state they touch do not grow with the job's steps"}
	if _, err := s.SubmitJob(ctx, &pb.SubmitJobRequest{Spec: scalingJob("steps", 20000)}); err != nil {
		return nil, err
	}
	var stepWins []logSpan
	var stepX []float64
	total := int64(0)
	chunks := []int64{500, 1000, 2000, 4000}
	if quick {
		chunks = chunks[:3]
	}
	for _, c := range chunks {
		cctx, cancel := context.WithTimeout(ctx, 60*time.Second)
		n, _, _, w := taskPhase(cctx, s, "steps", 10, func(n *taskCounts) bool { return n.done.Load() >= c })
		cancel()
		total += n.done.Load()
		stepWins = append(stepWins, w)
		stepX = append(stepX, float64(total))
	}
	if err := closeStore(); err != nil {
		return nil, err
	}
	for i, w := range stepWins {
		_, b, err := w.perCall(dir)
		if err != nil {
			return nil, err
		}
		stepsCurve.Points = append(stepsCurve.Points, Point{stepX[i], b})
	}
	ent := Curve{Name: "raft-entries-per-call-vs-trainers", Title: "Raft log entries per task call (GetTask or TaskFinished)", XLabel: "trainers", YLabel: "entries per call",
		Expect: "<= 0: one command per call, batched into fewer entries as callers grow"}
	byt := Curve{Name: "raft-bytes-per-call-vs-trainers", Title: "Raft log bytes per task call", XLabel: "trainers", YLabel: "bytes per call",
		Expect: "~0: a call's command does not depend on how many trainers there are"}
	for i, w := range wins {
		e, b, err := w.perCall(dir)
		if err != nil {
			return []Curve{tp, p99}, err
		}
		ent.Points = append(ent.Points, Point{float64(ns[i]), e})
		byt.Points = append(byt.Points, Point{float64(ns[i]), b})
	}
	return []Curve{tp, p99, ent, byt, stepsCurve}, nil
}
