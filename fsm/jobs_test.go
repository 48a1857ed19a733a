package fsm

import (
	"slices"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/proto"

	pb "github.com/raftps/raftps/api/raftpspb"
)

// TestJobCommands checks the FSM's wiring of the job commands: dispatch,
// the stamped time, responses, errors with nothing changed, JobsChanged and
// the job reader. The queue semantics are package jobq's tests.
func TestJobCommands(t *testing.T) {
	f := newTestFSM(t)
	rec := &recorder{}
	f.SetObserver(rec)
	const now = int64(1_700_000_000_000_000_000)
	steps := []struct {
		name     string
		typ      pb.CommandType
		req      proto.Message
		resp     proto.Message
		wantCode codes.Code
		wantJobs []string
		check    func(t *testing.T, resp proto.Message)
	}{
		{
			name: "submit", typ: pb.CommandType_COMMAND_SUBMIT_JOB,
			req: &pb.SubmitJobRequest{Spec: testJobSpec("mnist")}, resp: &pb.SubmitJobResponse{},
			wantJobs: []string{"mnist"},
			check: func(t *testing.T, resp proto.Message) {
				st := resp.(*pb.SubmitJobResponse).Status
				if st.GetName() != "mnist" || st.GetSubmittedUnixNano() != now || st.GetTotalTasks() != 10 {
					t.Fatalf("status %v", st)
				}
			},
		},
		{
			name: "submit again", typ: pb.CommandType_COMMAND_SUBMIT_JOB,
			req: &pb.SubmitJobRequest{Spec: testJobSpec("mnist")}, wantCode: codes.AlreadyExists,
		},
		{
			name: "submit invalid", typ: pb.CommandType_COMMAND_SUBMIT_JOB,
			req: &pb.SubmitJobRequest{}, wantCode: codes.InvalidArgument,
		},
		{
			name: "get task", typ: pb.CommandType_COMMAND_GET_TASK,
			req: &pb.GetTaskRequest{Job: "mnist", Trainer: "t0"}, resp: &pb.GetTaskResponse{},
			wantJobs: []string{"mnist"},
			check: func(t *testing.T, resp proto.Message) {
				r := resp.(*pb.GetTaskResponse)
				if r.Result != pb.GetTaskResponse_TASK || r.Task.GetStartedUnixNano() != now || r.Task.GetDeadlineUnixNano() <= now {
					t.Fatalf("get task %v", r)
				}
			},
		},
		{
			name: "task finished", typ: pb.CommandType_COMMAND_TASK_FINISHED,
			req: &pb.TaskFinishedRequest{Job: "mnist", TaskId: 0, Epoch: 1, Trainer: "t0", Metrics: &pb.TaskMetrics{Loss: 1, Examples: 100}}, resp: &pb.TaskFinishedResponse{},
			wantJobs: []string{"mnist"},
			check: func(t *testing.T, resp proto.Message) {
				if !resp.(*pb.TaskFinishedResponse).Accepted {
					t.Fatal("not accepted")
				}
			},
		},
		{
			name: "task failed (stale)", typ: pb.CommandType_COMMAND_TASK_FAILED,
			req: &pb.TaskFailedRequest{Job: "mnist", TaskId: 0, Epoch: 1, Trainer: "t0"}, resp: &pb.TaskFailedResponse{},
			wantJobs: []string{"mnist"},
		},
		{
			name: "expire tasks", typ: pb.CommandType_COMMAND_EXPIRE_TASKS,
			req: &pb.ExpireTasksRequest{Job: "mnist"}, resp: &pb.ExpireTasksResponse{},
			wantJobs: []string{"mnist"},
		},
		{
			name: "requeue trainer", typ: pb.CommandType_COMMAND_REQUEUE_TRAINER,
			req: &pb.RequeueTrainerRequest{Job: "mnist", Trainer: "t9", Reason: "dead"}, resp: &pb.RequeueTrainerResponse{},
			wantJobs: []string{"mnist"},
		},
		{
			name: "job event", typ: pb.CommandType_COMMAND_JOB_EVENT,
			req: &pb.JobEvent{Job: "mnist", Type: pb.JobEvent_CHECKPOINT_COMMITTED, Version: 3}, resp: &pb.JobEvent{},
			wantJobs: []string{"mnist"},
			check: func(t *testing.T, resp proto.Message) {
				ev := resp.(*pb.JobEvent)
				if ev.Seq == 0 || ev.UnixNano != now {
					t.Fatalf("event %v", ev)
				}
			},
		},
		{
			name: "cancel unknown", typ: pb.CommandType_COMMAND_CANCEL_JOB,
			req: &pb.CancelJobRequest{Name: "nope"}, wantCode: codes.NotFound,
		},
		{
			name: "cancel", typ: pb.CommandType_COMMAND_CANCEL_JOB,
			req: &pb.CancelJobRequest{Name: "mnist"}, resp: &pb.CancelJobResponse{},
			wantJobs: []string{"mnist"},
			check: func(t *testing.T, resp proto.Message) {
				if resp.(*pb.CancelJobResponse).Status.GetState() != pb.JobState_JOB_CANCELLED {
					t.Fatalf("%v", resp)
				}
			},
		},
	}
	for _, tc := range steps {
		t.Run(tc.name, func(t *testing.T) {
			before := dumpState(t, f.FSM)
			r := f.apply(now, mustCmd(t, tc.typ, tc.req))[0]
			err := ResultError(r)
			if Code(err) != tc.wantCode {
				t.Fatalf("error %v (%v), want %v", err, Code(err), tc.wantCode)
			}
			if n := rec.notes[len(rec.notes)-1]; !slices.Equal(n.JobsChanged, tc.wantJobs) || n.NowUnixNano != now {
				t.Fatalf("notification %+v", n)
			}
			if err != nil {
				after := dumpState(t, f.FSM)
				after.Applied = before.Applied
				if !equalDump(before, after) {
					t.Fatal("rejected command changed the state")
				}
				return
			}
			if err := proto.Unmarshal(r.Payload, tc.resp); err != nil {
				t.Fatal(err)
			}
			if tc.check != nil {
				tc.check(t, tc.resp)
			}
		})
	}
	t.Run("reader", func(t *testing.T) {
		j := f.Jobs()
		st, ok := j.Job("mnist")
		if !ok || st.State != pb.JobState_JOB_CANCELLED || len(j.Jobs()) != 1 || len(j.Tasks("mnist")) == 0 {
			t.Fatalf("job %v %v", st, ok)
		}
		evs, err := j.Events("mnist", 1, 100)
		if err != nil || len(evs) == 0 || j.EventSeq("mnist") != evs[len(evs)-1].Seq {
			t.Fatalf("events %v %v seq %d", evs, err, j.EventSeq("mnist"))
		}
	})
	t.Run("kv revision untouched", func(t *testing.T) {
		if f.Revision() != 1 {
			t.Fatalf("revision %d", f.Revision())
		}
	})
	t.Run("several jobs in one entry are sorted and unique", func(t *testing.T) {
		f.apply(now,
			mustCmd(t, pb.CommandType_COMMAND_SUBMIT_JOB, &pb.SubmitJobRequest{Spec: testJobSpec("zeta")}),
			mustCmd(t, pb.CommandType_COMMAND_SUBMIT_JOB, &pb.SubmitJobRequest{Spec: testJobSpec("alpha")}),
			mustCmd(t, pb.CommandType_COMMAND_GET_TASK, &pb.GetTaskRequest{Job: "zeta", Trainer: "t"}))
		if n := rec.notes[len(rec.notes)-1]; !slices.Equal(n.JobsChanged, []string{"alpha", "zeta"}) {
			t.Fatalf("jobs changed %v", n.JobsChanged)
		}
	})
}
