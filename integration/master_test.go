package integration

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	pb "github.com/raftps/raftps/api/raftpspb"
)

func validSpec(t *testing.T, name string) *pb.JobSpec {
	return &pb.JobSpec{Name: name, Model: &pb.ModelSpec{Name: "softmax"},
		Dataset:        &pb.DatasetSpec{Path: datasetDir(t), Format: "fashion-mnist", Records: 60000},
		RecordsPerTask: 1000, Passes: 1, BatchSize: 64, NumPservers: 1,
		Optimizer: &pb.OptimizerSpec{Name: "sgd", LearningRate: 0.1}}
}

// TestSubmitJobBadInput: every bad spec is InvalidArgument naming its
// field, and creates nothing.
func TestSubmitJobBadInput(t *testing.T) {
	c := NewCluster(t, binPath, 1, "--roles", "server")
	c.StartAll()
	mustLeader(t, c, 20*time.Second)
	cl := c.Client()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := cl.Master.SubmitJob(ctx, &pb.SubmitJobRequest{Spec: validSpec(t, "taken")}); err != nil {
		t.Fatalf("valid spec: %v", err)
	}
	cases := []struct {
		name, field string
		mut         func(*pb.JobSpec)
	}{
		{"zero records per task", "records_per_task", func(s *pb.JobSpec) { s.RecordsPerTask = 0 }},
		{"missing dataset", "dataset", func(s *pb.JobSpec) { s.Dataset.Path = "/nonexistent/fashion" }},
		{"unknown model", "model", func(s *pb.JobSpec) { s.Model.Name = "transformer" }},
		{"unknown optimizer", "optimizer", func(s *pb.JobSpec) { s.Optimizer.Name = "lion" }},
		{"negative learning rate", "learning_rate", func(s *pb.JobSpec) { s.Optimizer.LearningRate = -0.1 }},
		{"duplicate name", "name", func(s *pb.JobSpec) { s.Name = "taken" }},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			spec := validSpec(t, "bad-"+strings.ReplaceAll(tc.name, " ", "-"))
			tc.mut(spec)
			_, err := cl.Master.SubmitJob(ctx, &pb.SubmitJobRequest{Spec: proto.Clone(spec).(*pb.JobSpec)})
			if status.Code(err) != codes.InvalidArgument {
				t.Fatalf("code %v (%v), want InvalidArgument", status.Code(err), err)
			}
			if !strings.Contains(status.Convert(err).Message(), tc.field) {
				t.Fatalf("message %q does not name %q", status.Convert(err).Message(), tc.field)
			}
			if spec.Name != "taken" {
				if _, err := cl.Master.GetJob(ctx, &pb.GetJobRequest{Name: spec.Name}); status.Code(err) != codes.NotFound {
					t.Fatalf("rejected job was created: %v", err)
				}
			}
		})
	}
	resp, err := cl.Master.ListJobs(ctx, &pb.ListJobsRequest{})
	if err != nil || len(resp.Jobs) != 1 {
		t.Fatalf("jobs after bad submissions: %v %v", resp, err)
	}
}

// TestMasterFailover: several trainers take and finish tasks through a
// 3-node cluster while the leader is SIGKILLed; tasks flow again within
// 3 s, and at the end every task was done exactly once.
func TestMasterFailover(t *testing.T) {
	c := NewCluster(t, binPath, 3, "--roles", "server")
	c.StartAll()
	mustLeader(t, c, 20*time.Second)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	spec := validSpec(t, "failover")
	spec.RecordsPerTask = 100 // 600 tasks
	if _, err := c.Client().Master.SubmitJob(ctx, &pb.SubmitJobRequest{Spec: spec}); err != nil {
		t.Fatal(err)
	}
	var (
		mu       sync.Mutex
		finishes = map[int64]int{}
		lastDone time.Time
		killedAt time.Time
		gap      time.Duration
	)
	cl := c.Client()
	var wg sync.WaitGroup
	for i := 0; i < 6; i++ {
		wg.Add(1)
		go func(id string) {
			defer wg.Done()
			for ctx.Err() == nil {
				cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
				r, err := cl.Master.GetTask(cctx, &pb.GetTaskRequest{Job: "failover", Trainer: id})
				cancel()
				if err != nil {
					time.Sleep(50 * time.Millisecond)
					continue
				}
				switch r.Result {
				case pb.GetTaskResponse_JOB_OVER:
					return
				case pb.GetTaskResponse_TASK:
				default:
					time.Sleep(time.Duration(r.RetryAfterMs+10) * time.Millisecond)
					continue
				}
				time.Sleep(10 * time.Millisecond) // "training"
				for ctx.Err() == nil {
					cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
					f, err := cl.Master.TaskFinished(cctx, &pb.TaskFinishedRequest{Job: "failover", TaskId: r.Task.Id, Epoch: r.Task.Epoch, Trainer: id,
						Metrics: &pb.TaskMetrics{Examples: r.Task.End - r.Task.Begin}})
					cancel()
					if err != nil {
						time.Sleep(50 * time.Millisecond)
						continue // retry: a finish is idempotent by epoch
					}
					if f.Accepted {
						mu.Lock()
						finishes[r.Task.Id]++
						now := time.Now()
						if !killedAt.IsZero() && !lastDone.IsZero() && now.Sub(lastDone) > gap {
							gap = now.Sub(lastDone)
						}
						lastDone = now
						mu.Unlock()
					}
					break
				}
			}
		}("t" + string(rune('a'+i)))
	}
	waitFor(t, time.Minute, "100 tasks done", func() bool { mu.Lock(); defer mu.Unlock(); return len(finishes) >= 100 })
	leader := mustLeader(t, c, 10*time.Second)
	mu.Lock()
	killedAt = time.Now()
	lastDone = killedAt
	mu.Unlock()
	c.Kill(leader)
	t.Logf("leader %s SIGKILLed", leader.ID)
	wg.Wait()
	mu.Lock()
	defer mu.Unlock()
	t.Logf("longest time without a finished task after the kill: %v", gap)
	if gap > 3*time.Second {
		t.Errorf("tasks stood still %v after the leader kill, want < 3s", gap)
	}
	// Accepted replies can only undercount (a finish applied just before the
	// failover may lose its reply; its retry is then a stale no-op), so the
	// authority is the job's event stream: every task done exactly once.
	for id, n := range finishes {
		if n > 1 {
			t.Errorf("task %d accepted %d times", id, n)
		}
	}
	ev := &jobEvents{}
	ev.follow(ctx, c, "failover")
	done := map[int64]int{}
	for _, e := range ev.snapshot() {
		if e.Type == pb.JobEvent_TASK_DONE {
			done[e.TaskId]++
		}
	}
	for id := int64(0); id < 600; id++ {
		if done[id] != 1 {
			t.Errorf("task %d done %d times in the event stream", id, done[id])
		}
	}
}
