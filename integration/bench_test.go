package integration

import (
	"context"
	"fmt"
	"sort"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	pb "github.com/raftps/raftps/api/raftpspb"
)

// BenchmarkGetTaskFinished3Node: 64 concurrent trainers each loop GetTask +
// TaskFinished against a 3-node cluster of real processes on loopback (a
// job of 1,000,000 tasks; the trainers spread over the three endpoints, so
// two thirds of the calls are forwarded by followers). Reports tasks/s and
// the p50/p99 of one GetTask+TaskFinished round trip.
func BenchmarkGetTaskFinished3Node(b *testing.B) {
	c := NewCluster(b, binPath, 3, "--roles", "server")
	c.StartAll()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	if _, err := c.Leader(ctx); err != nil {
		b.Fatal(err)
	}
	spec := &pb.JobSpec{Name: "bench", Model: &pb.ModelSpec{Name: "softmax"},
		Dataset:        &pb.DatasetSpec{Path: datasetDir(nil), Format: "fashion-mnist", Records: 1_000_000},
		RecordsPerTask: 1, Passes: 1, BatchSize: 1, NumPservers: 1,
		Optimizer: &pb.OptimizerSpec{Name: "sgd", LearningRate: 0.1}}
	if _, err := c.Client().Master.SubmitJob(ctx, &pb.SubmitJobRequest{Spec: spec}); err != nil {
		b.Fatal(err)
	}
	const trainers = 64
	var (
		left = int64(b.N)
		mu   sync.Mutex
		lat  []time.Duration
		wg   sync.WaitGroup
	)
	b.ResetTimer()
	start := time.Now()
	for i := 0; i < trainers; i++ {
		wg.Add(1)
		cl := c.Client(c.Procs[i%3])
		go func(id string) {
			defer wg.Done()
			var mine []time.Duration
			for atomic.AddInt64(&left, -1) >= 0 {
				t0 := time.Now()
				r, err := cl.Master.GetTask(ctx, &pb.GetTaskRequest{Job: "bench", Trainer: id})
				if err != nil || r.Result != pb.GetTaskResponse_TASK {
					b.Errorf("GetTask: %v %v", r, err)
					return
				}
				if _, err := cl.Master.TaskFinished(ctx, &pb.TaskFinishedRequest{Job: "bench", TaskId: r.Task.Id, Epoch: r.Task.Epoch, Trainer: id}); err != nil {
					b.Errorf("TaskFinished: %v", err)
					return
				}
				mine = append(mine, time.Since(t0))
			}
			mu.Lock()
			lat = append(lat, mine...)
			mu.Unlock()
		}(fmt.Sprintf("t%d", i))
	}
	wg.Wait()
	elapsed := time.Since(start)
	b.StopTimer()
	sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
	if len(lat) == 0 {
		return
	}
	b.ReportMetric(float64(len(lat))/elapsed.Seconds(), "tasks/s")
	b.ReportMetric(float64(lat[len(lat)/2].Microseconds())/1000, "p50-ms")
	b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds())/1000, "p99-ms")
}
