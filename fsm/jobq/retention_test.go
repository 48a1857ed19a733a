package jobq

import (
	"encoding/binary"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/raftps/raftps/api/errs"
	pb "github.com/raftps/raftps/api/raftpspb"
)

// TestDeleteJob is issue 12 item 8: jobs could never be deleted. A running
// job is refused (cancel first), an unknown one is NotFound, a finished one
// goes with its tasks and events, and the state still round-trips.
func TestDeleteJob(t *testing.T) {
	q := New()
	mustSubmit(t, q, t0, testSpec("a", 100, 10))
	mustSubmit(t, q, t0, testSpec("b", 100, 10))
	if _, err := q.Delete(t0, &pb.DeleteJobRequest{Name: "a"}); !errors.Is(err, errs.ErrFailedPrecondition) {
		t.Fatalf("delete of a running job: %v, want ErrFailedPrecondition", err)
	}
	if _, err := q.Delete(t0, &pb.DeleteJobRequest{Name: "zz"}); !errors.Is(err, errs.ErrNotFound) {
		t.Fatalf("delete of an unknown job: %v, want ErrNotFound", err)
	}
	if _, err := q.Cancel(t0+sec, &pb.CancelJobRequest{Name: "a"}); err != nil {
		t.Fatal(err)
	}
	r, err := q.Delete(t0+2*sec, &pb.DeleteJobRequest{Name: "a"})
	if err != nil || r.Status.GetState() != pb.JobState_JOB_CANCELLED {
		t.Fatalf("delete of a cancelled job: %v, %v", r, err)
	}
	if _, ok := q.Job("a"); ok {
		t.Fatal("deleted job still there")
	}
	if _, err := q.Events("a", 0, 0); !errors.Is(err, errs.ErrNotFound) {
		t.Fatalf("events of a deleted job: %v", err)
	}
	if js := q.Jobs(); len(js) != 1 || js[0].Name != "b" {
		t.Fatalf("jobs after delete: %v", js)
	}
	roundTrip(t, q)
	// The name is free again.
	mustSubmit(t, q, t0+3*sec, testSpec("a", 100, 10))
}

// TestPruneJobs: retention by age (measured with the command's time, so
// every replica prunes the same jobs) and by count; running jobs stay.
func TestPruneJobs(t *testing.T) {
	q := New()
	for i, name := range []string{"old", "mid", "new", "run"} {
		mustSubmit(t, q, t0, testSpec(name, 100, 10))
		if name != "run" {
			if _, err := q.Cancel(t0+int64(i)*100*sec, &pb.CancelJobRequest{Name: name}); err != nil {
				t.Fatal(err)
			}
		}
	}
	if _, err := q.Prune(t0, &pb.PruneJobsRequest{MaxAgeMs: -1}); !errors.Is(err, errs.ErrInvalid) {
		t.Fatalf("negative age: %v", err)
	}
	// At t0+250 s with max age 200 s only "old" (finished at t0) is too old.
	r, err := q.Prune(t0+250*sec, &pb.PruneJobsRequest{MaxAgeMs: 200_000})
	if err != nil || strings.Join(r.Deleted, ",") != "old" {
		t.Fatalf("prune by age: %v, %v", r, err)
	}
	r, err = q.Prune(t0+250*sec, &pb.PruneJobsRequest{KeepFinished: 1})
	if err != nil || strings.Join(r.Deleted, ",") != "mid" {
		t.Fatalf("prune by count: %v, %v", r, err)
	}
	r, err = q.Prune(t0+1e6*sec, &pb.PruneJobsRequest{MaxAgeMs: 1})
	if err != nil || strings.Join(r.Deleted, ",") != "new" {
		t.Fatalf("prune all finished: %v, %v", r, err)
	}
	if js := q.Jobs(); len(js) != 1 || js[0].Name != "run" {
		t.Fatalf("running job pruned: %v", js)
	}
	roundTrip(t, q)
}

// TestSubmitKeepsAtMostMaxJobs: the number of jobs is bounded; a submit at
// the bound deletes the oldest finished job, or is refused when all run.
func TestSubmitKeepsAtMostMaxJobs(t *testing.T) {
	q := New()
	for i := range MaxJobs {
		if _, err := q.Submit(t0, &pb.SubmitJobRequest{Spec: testSpec(fmt.Sprintf("j%04d", i), 10, 10)}); err != nil {
			t.Fatal(err)
		}
	}
	_, err := q.Submit(t0, &pb.SubmitJobRequest{Spec: testSpec("extra", 10, 10)})
	if !errors.Is(err, errs.ErrFailedPrecondition) {
		t.Fatalf("submit beyond MaxJobs running jobs: %v", err)
	}
	for _, name := range []string{"j0007", "j0003"} {
		if _, err := q.Cancel(t0+sec, &pb.CancelJobRequest{Name: name}); err != nil {
			t.Fatal(err)
		}
	}
	mustSubmit(t, q, t0+2*sec, testSpec("extra", 10, 10))
	if len(q.Jobs()) != MaxJobs {
		t.Fatalf("%d jobs, want %d", len(q.Jobs()), MaxJobs)
	}
	// Both finished at the same time: the first by name goes.
	if _, ok := q.Job("j0003"); ok {
		t.Fatal("j0003 (oldest finished, first by name) kept")
	}
	if _, ok := q.Job("j0007"); !ok {
		t.Fatal("j0007 deleted too")
	}
}

// TestEventMessagesBounded: event messages (a trainer's failure reason, a
// recorded event) were stored whole, so one report could add megabytes to
// every snapshot. They are cut at MaxEventMessage bytes on a rune boundary
// (valid UTF-8, so the events still encode); over-long trainer ids are
// refused. Before the fix the 1 MB messages were kept.
func TestEventMessagesBounded(t *testing.T) {
	q := New()
	mustSubmit(t, q, t0, testSpec("a", 100, 10))
	long := strings.Repeat("é", 1<<19) // 1 MiB of 2-byte runes
	task := mustTask(t, q, t0, "a", "t1")
	if _, err := q.TaskFailed(t0+sec, &pb.TaskFailedRequest{Job: "a", TaskId: task.Id, Epoch: task.Epoch, Reason: long}); err != nil {
		t.Fatal(err)
	}
	if _, err := q.RecordEvent(t0+sec, &pb.JobEvent{Job: "a", Type: pb.JobEvent_TRAINER_JOINED, Trainer: "t1", Message: "x" + long}); err != nil {
		t.Fatal(err)
	}
	for _, ev := range mustEvents(t, q, "a") {
		if len(ev.Message) > MaxEventMessage || !utf8.ValidString(ev.Message) {
			t.Fatalf("event %d (%v): message of %d bytes (valid UTF-8: %v)", ev.Seq, ev.Type, len(ev.Message), utf8.ValidString(ev.Message))
		}
	}
	big := strings.Repeat("t", MaxTrainerLen+1)
	if _, err := q.GetTask(t0, &pb.GetTaskRequest{Job: "a", Trainer: big}); !errors.Is(err, errs.ErrInvalid) {
		t.Fatalf("GetTask with a %d-byte trainer: %v", len(big), err)
	}
	if _, err := q.RecordEvent(t0, &pb.JobEvent{Job: "a", Type: pb.JobEvent_TRAINER_JOINED, Trainer: big}); !errors.Is(err, errs.ErrInvalid) {
		t.Fatalf("RecordEvent with a %d-byte trainer: %v", len(big), err)
	}
	if _, err := q.RequeueTrainer(t0, &pb.RequeueTrainerRequest{Job: "a", Trainer: big}); !errors.Is(err, errs.ErrInvalid) {
		t.Fatalf("RequeueTrainer with a %d-byte trainer: %v", len(big), err)
	}
	roundTrip(t, q)
}

// TestMarshalJobsOneRecordPerJob: the snapshot form is one record per job,
// sorted, each restorable on its own terms, and identical after a round
// trip; a corrupt or unsorted record set is refused and changes nothing.
func TestMarshalJobsOneRecordPerJob(t *testing.T) {
	q := New()
	for _, name := range []string{"c", "a", "b"} {
		mustSubmit(t, q, t0, testSpec(name, 1000, 10))
		mustTask(t, q, t0, name, "t1")
	}
	recs, err := q.MarshalJobs()
	if err != nil || len(recs) != 3 {
		t.Fatalf("MarshalJobs: %d records, %v", len(recs), err)
	}
	r := New()
	if err := r.UnmarshalJobs(recs); err != nil {
		t.Fatal(err)
	}
	if string(mustMarshal(t, r)) != string(mustMarshal(t, q)) {
		t.Fatal("UnmarshalJobs(MarshalJobs) differs")
	}
	keep := mustMarshal(t, r)
	for _, bad := range [][][]byte{
		{recs[1], recs[0], recs[2]},
		{recs[0], recs[0]},
		{recs[0], recs[1][:len(recs[1])-1]},
		{append([]byte{9}, recs[0][1:]...)},
	} {
		if err := r.UnmarshalJobs(bad); !errors.Is(err, errs.ErrMalformed) {
			t.Fatalf("bad record set accepted: %v", err)
		}
		if string(mustMarshal(t, r)) != string(keep) {
			t.Fatal("a refused record set changed the queue")
		}
	}
}

// TestJobRecordKeepsWallFinish (issue 37): a job record (version 2) keeps
// the wall-clock finish time SetEntryWall gave, apart from the cluster
// finish time retention measures; a version 1 record (before it) reads
// back showing its cluster finish time.
func TestJobRecordKeepsWallFinish(t *testing.T) {
	const sec = int64(time.Second)
	q := New()
	q.SetEntryWall(t0)
	mustSubmit(t, q, t0, testSpec("a", 1000, 10))
	q.SetEntryWall(t0 + 30*sec) // 30 s of wall time the cluster clock skipped
	if _, err := q.Cancel(t0+sec, &pb.CancelJobRequest{Name: "a"}); err != nil {
		t.Fatal(err)
	}
	recs, err := q.MarshalJobs()
	if err != nil {
		t.Fatal(err)
	}
	r := New()
	if err := r.UnmarshalJobs(recs); err != nil {
		t.Fatal(err)
	}
	if st, _ := r.Job("a"); st.FinishedUnixNano != t0+30*sec {
		t.Fatalf("restored finish %+d ns from t0, want the wall clock's +30 s", st.FinishedUnixNano-t0)
	}
	// Retention still counts from the cluster finish (t0+1s): 5 s later it is due.
	if pr, err := r.Prune(t0+6*sec, &pb.PruneJobsRequest{MaxAgeMs: 4000}); err != nil || len(pr.Deleted) != 1 {
		t.Fatalf("prune 5 s after the cluster finish with max age 4 s: %v, %v", pr, err)
	}
	// Version 1: the same record without the trailing wall finish.
	old := append([]byte{1}, recs[0][1:]...)
	old = old[:len(old)-len(binary.AppendVarint(nil, t0+30*sec))]
	if err := r.UnmarshalJobs([][]byte{old}); err != nil {
		t.Fatalf("version 1 record: %v", err)
	}
	if st, _ := r.Job("a"); st.FinishedUnixNano != t0+sec {
		t.Fatalf("version 1 record shows finish %+d ns from t0, want its cluster finish +1 s", st.FinishedUnixNano-t0)
	}
}
