package jobq

import (
	"bytes"
	"testing"

	pb "github.com/raftps/raftps/api/raftpspb"
)

// FuzzUnmarshalBinary: any input either fails with the queue unchanged, or
// restores a state that passes the invariant check, re-encodes canonically
// and survives every command.
func FuzzUnmarshalBinary(f *testing.F) {
	for seed := range uint64(3) {
		rngQueue := New()
		s := testSpec("a", 7, 2)
		s.EvalEachPass = seed == 1
		s.Passes = 2
		mustSubmit(f, rngQueue, t0, s)
		now := t0
		for i := range 5 + int(seed)*3 {
			now += sec
			r := mustGet(f, rngQueue, now, "a", "t"+string(rune('0'+i%3)))
			if r.Result == pb.GetTaskResponse_TASK && i%2 == 0 {
				mustFinish(f, rngQueue, now, "a", r.Task.Id, r.Task.Epoch, &pb.TaskMetrics{Loss: 1, Examples: 2, Step: int64(i)})
			}
		}
		f.Add(mustMarshal(f, rngQueue))
	}
	f.Add([]byte("JOBQ\x01\x00"))
	f.Fuzz(func(t *testing.T, b []byte) {
		q := New()
		if err := q.UnmarshalBinary(b); err != nil {
			if len(q.jobs) != 0 {
				t.Fatal("a failed restore changed the queue")
			}
			return
		}
		mustCheck(t, q)
		enc := mustMarshal(t, q)
		q2 := New()
		if err := q2.UnmarshalBinary(enc); err != nil {
			t.Fatalf("re-encoded snapshot does not restore: %v", err)
		}
		if !bytes.Equal(enc, mustMarshal(t, q2)) {
			t.Fatal("encoding is not canonical")
		}
		for _, st := range q.Jobs() {
			now := st.SubmittedUnixNano + sec
			for i := range 4 {
				tr := "t" + string(rune('0'+i))
				if r, err := q.GetTask(now, &pb.GetTaskRequest{Job: st.Name, Trainer: tr}); err == nil && r.Task != nil {
					q.TaskFinished(now, &pb.TaskFinishedRequest{Job: st.Name, TaskId: r.Task.Id, Epoch: r.Task.Epoch})
				}
				mustCheck(t, q)
			}
			q.TaskFailed(now, &pb.TaskFailedRequest{Job: st.Name, TaskId: 0, Epoch: 1})
			q.ExpireTasks(now+3600*sec, &pb.ExpireTasksRequest{})
			q.RequeueTrainer(now, &pb.RequeueTrainerRequest{Trainer: "t1"})
			q.Cancel(now, &pb.CancelJobRequest{Name: st.Name})
			q.Events(st.Name, 0, 10)
			q.Tasks(st.Name)
			mustCheck(t, q)
		}
	})
}
