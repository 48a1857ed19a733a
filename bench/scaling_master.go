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

// taskLoop is one simulated trainer: GetTask then TaskFinished until ctx
// ends (or done reaches limit, if limit > 0), every call's latency into
// lat, every finished task counted in done.
func taskLoop(ctx context.Context, s *raftstore.Store, job, trainer string, lat *[]time.Duration, done *atomic.Int64, limit int64) {
	for ctx.Err() == nil && (limit <= 0 || done.Load() < limit) {
		t0 := time.Now()
		r, err := s.GetTask(ctx, &pb.GetTaskRequest{Job: job, Trainer: trainer})
		if err != nil {
			return
		}
		*lat = append(*lat, time.Since(t0))
		if r.Result != pb.GetTaskResponse_TASK {
			time.Sleep(5 * time.Millisecond)
			continue
		}
		t1 := time.Now()
		if _, err := s.TaskFinished(ctx, &pb.TaskFinishedRequest{Job: job, TaskId: r.Task.Id, Epoch: r.Task.Epoch, Trainer: trainer}); err != nil {
			return
		}
		*lat = append(*lat, time.Since(t1))
		done.Add(1)
	}
}

// masterVsTrainers: the master's task calls (GetTask + TaskFinished, each
// one Raft command) from 1 to 1000 trainers in a loop on one job of a
// single-node store: tasks per second, p99 call latency, and Raft log
// entries and bytes per task.
func masterVsTrainers(ctx context.Context, dir string, quick bool) ([]Curve, error) {
	dur := 1500 * time.Millisecond
	if quick {
		dur = 700 * time.Millisecond
	}
	s, err := openScalingStore(ctx, dir)
	if err != nil {
		return nil, err
	}
	closed := false
	defer func() {
		if !closed {
			s.Close()
		}
	}()
	if _, err := s.SubmitJob(ctx, &pb.SubmitJobRequest{Spec: scalingJob("scale", 20000)}); err != nil {
		return nil, err
	}
	tp := Curve{Name: "master-tasks-vs-trainers", Title: "master tasks/s (GetTask+TaskFinished), 1 job", XLabel: "trainers", YLabel: "tasks per second",
		Expect: "~0 once the log's fsync is saturated: calls batch into shared entries"}
	p99 := Curve{Name: "master-p99-vs-trainers", Title: "master call p99 latency", XLabel: "trainers", YLabel: "p99 ms",
		Expect: "1 once saturated (queueing: more callers share the same throughput)"}
	type window struct {
		from, to uint64
		tasks    int64
	}
	var wins []window
	ns := []int{1, 10, 100, 1000}
	for _, n := range ns {
		from := s.Stats().LastLogIndex
		var done atomic.Int64
		lats := make([][]time.Duration, n)
		lctx, cancel := context.WithTimeout(ctx, dur)
		t0 := time.Now()
		var wg sync.WaitGroup
		for i := range n {
			wg.Add(1)
			go func() {
				defer wg.Done()
				taskLoop(lctx, s, "scale", fmt.Sprintf("t%d", i), &lats[i], &done, 0)
			}()
		}
		wg.Wait()
		cancel()
		el := time.Since(t0)
		var all []time.Duration
		for _, l := range lats {
			all = append(all, l...)
		}
		slices.Sort(all)
		if done.Load() == 0 {
			return nil, fmt.Errorf("%d trainers finished no task", n)
		}
		tp.Points = append(tp.Points, Point{float64(n), float64(done.Load()) / el.Seconds()})
		p99.Points = append(p99.Points, Point{float64(n), ms(Percentile(all, 0.99))})
		wins = append(wins, window{from, s.Stats().LastLogIndex, done.Load()})
	}
	// Bytes per task as the job's finished tasks grow (doubling chunks, 10
	// trainers): what the log carries per step must not grow with steps.
	stepsCurve := Curve{Name: "raft-bytes-per-task-vs-tasks-done", Title: "Raft log bytes per task as the job's finished tasks grow (10 trainers)",
		XLabel: "tasks finished in the job", YLabel: "bytes per task",
		Expect: "0: a task's commands and the state they touch do not grow with the job's steps"}
	var stepWins []window
	var stepX []float64
	total := int64(0)
	for _, w := range wins {
		total += w.tasks
	}
	chunks := []int64{500, 1000, 2000, 4000}
	if quick {
		chunks = chunks[:3]
	}
	for _, c := range chunks {
		from := s.Stats().LastLogIndex
		var done atomic.Int64
		lctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		var wg sync.WaitGroup
		for i := range 10 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				var lat []time.Duration
				taskLoop(lctx, s, "scale", fmt.Sprintf("s%d", i), &lat, &done, c)
			}()
		}
		wg.Wait()
		cancel()
		total += done.Load()
		stepWins = append(stepWins, window{from, s.Stats().LastLogIndex, done.Load()})
		stepX = append(stepX, float64(total))
	}
	closed = true
	if err := s.Close(); err != nil {
		return nil, err
	}
	for i, w := range stepWins {
		_, b, err := logWindow(dir, w.from, w.to)
		if err != nil {
			return nil, err
		}
		stepsCurve.Points = append(stepsCurve.Points, Point{stepX[i], float64(b) / float64(max(w.tasks, 1))})
	}
	ent := Curve{Name: "raft-entries-per-task-vs-trainers", Title: "Raft log entries per task", XLabel: "trainers", YLabel: "entries per task",
		Expect: "<= 0: 2 commands per task, batched into fewer entries as callers grow"}
	byt := Curve{Name: "raft-bytes-per-task-vs-trainers", Title: "Raft log bytes per task", XLabel: "trainers", YLabel: "bytes per task",
		Expect: "~0: a task's two commands do not depend on how many trainers there are"}
	for i, w := range wins {
		e, b, err := logWindow(dir, w.from, w.to)
		if err != nil {
			return []Curve{tp, p99}, err
		}
		ent.Points = append(ent.Points, Point{float64(ns[i]), float64(e) / float64(w.tasks)})
		byt.Points = append(byt.Points, Point{float64(ns[i]), float64(b) / float64(w.tasks)})
	}
	return []Curve{tp, p99, ent, byt, stepsCurve}, nil
}
