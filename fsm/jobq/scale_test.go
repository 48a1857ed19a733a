package jobq

import (
	"fmt"
	"runtime"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	pb "github.com/raftps/raftps/api/raftpspb"
	"github.com/raftps/raftps/jobspec"
)

const million = 1_000_000

// mustBigQueue returns a queue with one job of n one-record tasks, the first
// done of them finished and pending more handed out to 16 trainers.
func mustBigQueue(tb testing.TB, n, done, pending int) *Queue {
	tb.Helper()
	q := New()
	s := testSpec("big", int64(n), 1)
	s.Passes = 1000
	if _, err := q.Submit(t0, &pb.SubmitJobRequest{Spec: s}); err != nil {
		tb.Fatal(err)
	}
	now := t0
	for i := range done + pending {
		now += msNs
		r, err := q.GetTask(now, &pb.GetTaskRequest{Job: "big", Trainer: fmt.Sprintf("node-%d/trainer-0", i%16)})
		if err != nil || r.Result != pb.GetTaskResponse_TASK {
			tb.Fatalf("GetTask: %v %v", r, err)
		}
		if i < done {
			if _, err := q.TaskFinished(now, &pb.TaskFinishedRequest{Job: "big", TaskId: r.Task.Id, Epoch: r.Task.Epoch,
				Metrics: &pb.TaskMetrics{Loss: 0.3, Examples: 1, Step: int64(i)}}); err != nil {
				tb.Fatal(err)
			}
		}
	}
	return q
}

func getTaskCommandSize(tb testing.TB) int {
	tb.Helper()
	payload, err := proto.Marshal(&pb.GetTaskRequest{Job: "fashion-mnist-mlp", Trainer: "node-12/trainer-0"})
	if err != nil {
		tb.Fatal(err)
	}
	cmd, err := proto.Marshal(&pb.Command{Type: pb.CommandType_COMMAND_GET_TASK, Payload: payload})
	if err != nil {
		tb.Fatal(err)
	}
	return len(cmd)
}

func heapInUse() uint64 {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}

// TestScale1M runs a whole pass of a 1,000,000-task job and reports the
// figures asked for: command size, memory, per-command time, snapshot size
// and times.
func TestScale1M(t *testing.T) {
	if testing.Short() {
		t.Skip("1M tasks")
	}
	t.Logf("encoded GetTask command (Command{GET_TASK, GetTaskRequest{job, trainer}}): %d bytes", getTaskCommandSize(t))

	base := heapInUse()
	q := New()
	s := testSpec("big", million, 1)
	s.Passes = 2
	if _, err := q.Submit(t0, &pb.SubmitJobRequest{Spec: s}); err != nil {
		t.Fatal(err)
	}
	t.Logf("heap of a fresh 1M-task job: %.1f MB", float64(heapInUse()-base)/1e6)

	now := t0
	start := time.Now()
	for i := range million {
		now += msNs
		r, err := q.GetTask(now, &pb.GetTaskRequest{Job: "big", Trainer: "node-1/trainer-0"})
		if err != nil || r.Result != pb.GetTaskResponse_TASK || r.Task.Id != int64(i) {
			t.Fatalf("GetTask %d: %v %v", i, r, err)
		}
		ok, err := q.TaskFinished(now, &pb.TaskFinishedRequest{Job: "big", TaskId: r.Task.Id, Epoch: r.Task.Epoch,
			Metrics: &pb.TaskMetrics{Loss: 0.3, Examples: 1}})
		if err != nil || !ok.Accepted {
			t.Fatalf("TaskFinished %d: %v %v", i, ok, err)
		}
	}
	pass := time.Since(start)
	st, _ := q.Job("big")
	if st.Pass != 1 || st.Todo != million || st.State != pb.JobState_JOB_RUNNING {
		t.Fatalf("after pass 0: %v", st)
	}
	t.Logf("pass 0 of 1M tasks: %v (%.2f µs per GetTask+TaskFinished, rollover included)", pass, float64(pass.Microseconds())/million)
	t.Logf("heap with the pass done and %d events kept: %.1f MB", jobspec.MaxEvents, float64(heapInUse()-base)/1e6)

	start = time.Now()
	if err := q.check(); err != nil {
		t.Fatal(err)
	}
	t.Logf("invariant check over 1M tasks: %v", time.Since(start))

	start = time.Now()
	b, err := q.MarshalBinary()
	if err != nil {
		t.Fatal(err)
	}
	mt := time.Since(start)
	start = time.Now()
	q2 := New()
	if err := q2.UnmarshalBinary(b); err != nil {
		t.Fatal(err)
	}
	ut := time.Since(start)
	t.Logf("MarshalBinary: %d bytes (%.1f MB) in %v; UnmarshalBinary (with checks) in %v", len(b), float64(len(b))/1e6, mt, ut)
}

// BenchmarkSnapshot1M: a 1M-task job half way through a pass, 64 tasks
// pending, the event ring full.
func BenchmarkSnapshot1M(b *testing.B) {
	q := mustBigQueue(b, million, million/2, 64)
	snap, err := q.MarshalBinary()
	if err != nil {
		b.Fatal(err)
	}
	b.Run("Marshal", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := q.MarshalBinary(); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(float64(len(snap)), "bytes/snapshot")
	})
	b.Run("Unmarshal", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if err := New().UnmarshalBinary(snap); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(float64(len(snap)), "bytes/snapshot")
	})
}

// BenchmarkGetTaskFinish: one GetTask + TaskFinished pair on a 1M-task job
// (passes roll over every million ops).
func BenchmarkGetTaskFinish(b *testing.B) {
	q := mustBigQueue(b, million, 0, 0)
	b.ReportMetric(float64(getTaskCommandSize(b)), "bytes/GetTask-command")
	getReq := &pb.GetTaskRequest{Job: "big", Trainer: "node-1/trainer-0"}
	finReq := &pb.TaskFinishedRequest{Job: "big", Metrics: &pb.TaskMetrics{Loss: 0.3, Examples: 1}}
	now := t0
	b.ReportAllocs()
	for b.Loop() {
		now += msNs
		r, err := q.GetTask(now, getReq)
		if err != nil || r.Result != pb.GetTaskResponse_TASK {
			b.Fatalf("GetTask: %v %v", r, err)
		}
		finReq.TaskId, finReq.Epoch = r.Task.Id, r.Task.Epoch
		if _, err := q.TaskFinished(now, finReq); err != nil {
			b.Fatal(err)
		}
	}
}
