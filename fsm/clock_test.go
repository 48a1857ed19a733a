package fsm

import (
	"math"
	"testing"
	"time"

	"github.com/hashicorp/raft"
	"google.golang.org/protobuf/proto"

	pb "github.com/raftps/raftps/api/raftpspb"
)

// applyAt applies cmds as the next entry of term, stamped with the wall and
// monotonic clocks of its proposer, and returns the results.
func (f *testFSM) applyAt(term uint64, wall, mono int64, cmds ...*pb.Command) []*pb.Result {
	f.tb.Helper()
	data, err := proto.Marshal(&pb.Entry{NowUnixNano: wall, MonoNano: mono, Commands: cmds})
	if err != nil {
		f.tb.Fatal(err)
	}
	f.index++
	r := f.Apply(&raft.Log{Index: f.index, Term: term, Type: raft.LogCommand, Data: data}).(*ApplyResult)
	if r.Err != nil {
		f.tb.Fatal(r.Err)
	}
	return r.Results
}

func decodeResult[T proto.Message](tb testing.TB, r *pb.Result, m T) T {
	tb.Helper()
	if err := ResultError(r); err != nil {
		tb.Fatal(err)
	}
	if err := proto.Unmarshal(r.Payload, m); err != nil {
		tb.Fatal(err)
	}
	return m
}

// TestDeadlinesSurviveClockStepsAndLeaderChanges is issue 12 item 9: task
// deadlines and blacklists were compared with the leader's wall clock, so an
// NTP step on the leader, or a failover to a node whose clock is ahead,
// expired every pending task at once (and one behind kept a blacklisted
// trainer out for the skew). They are now measured in the replicated clock:
// monotonic stamps within a term, re-based (not advanced) at a new term.
// Before the fix (jobq fed Entry.now_unix_nano) the expiries below happen
// at the steps.
func TestDeadlinesSurviveClockStepsAndLeaderChanges(t *testing.T) {
	const (
		s  = int64(time.Second)
		t0 = int64(1_700_000_000) * s
	)
	f := newTestFSM(t)
	spec := testJobSpec("j")
	spec.TaskTimeoutFloorMs = 10_000 // deadline = started + 10 s
	expire := mustCmd(t, pb.CommandType_COMMAND_EXPIRE_TASKS, &pb.ExpireTasksRequest{Job: "j"})
	expired := func(r *pb.Result) int64 { return decodeResult(t, r, &pb.ExpireTasksResponse{}).Expired }

	f.applyAt(1, t0, 1*s, mustCmd(t, pb.CommandType_COMMAND_SUBMIT_JOB, &pb.SubmitJobRequest{Spec: spec}))
	task := decodeResult(t, f.applyAt(1, t0, 1*s, mustCmd(t, pb.CommandType_COMMAND_GET_TASK,
		&pb.GetTaskRequest{Job: "j", Trainer: "t1"}))[0], &pb.GetTaskResponse{}).Task
	if task == nil || f.Clock() != t0 {
		t.Fatalf("task %v, clock %d", task, f.Clock())
	}
	// The leader's wall clock steps 1 h forward; 1 s passes on its monotonic clock.
	if n := expired(f.applyAt(1, t0+3600*s, 2*s, expire)[0]); n != 0 {
		t.Fatalf("a 1 h wall-clock step on the leader expired %d tasks", n)
	}
	// Failover to a leader whose clock is 2 h ahead (another process: its own
	// monotonic origin). The new term re-bases: nothing advances.
	if n := expired(f.applyAt(2, t0+7200*s, 500*s, expire)[0]); n != 0 {
		t.Fatalf("a failover to a leader 2 h ahead expired %d tasks", n)
	}
	if got := f.Clock(); got != t0+1*s {
		t.Fatalf("clock after the failover %d, want t0+1s", got-t0)
	}
	// 8 s on the new leader: 9 s since the hand-out, not yet due.
	if n := expired(f.applyAt(2, t0-3600*s, 508*s, expire)[0]); n != 0 {
		t.Fatalf("expired %d tasks 9 s into a 10 s timeout", n)
	}
	// 2 s more: due, whatever the wall clock says.
	if n := expired(f.applyAt(2, 0, 510*s, expire)[0]); n != 1 {
		t.Fatalf("expired %d tasks 11 s into a 10 s timeout, want 1", n)
	}

	// Blacklist: three failures in a row blacklist t2 for 1 s; the leader's
	// wall clock then steps 1 h back while 2 s pass: t2 gets a task.
	fail := func(mono int64) {
		r := decodeResult(t, f.applyAt(2, t0, mono, mustCmd(t, pb.CommandType_COMMAND_GET_TASK,
			&pb.GetTaskRequest{Job: "j", Trainer: "t2"}))[0], &pb.GetTaskResponse{})
		if r.Task == nil {
			t.Fatalf("no task for t2: %v", r)
		}
		f.applyAt(2, t0, mono, mustCmd(t, pb.CommandType_COMMAND_TASK_FAILED,
			&pb.TaskFailedRequest{Job: "j", TaskId: r.Task.Id, Epoch: r.Task.Epoch, Reason: "boom"}))
	}
	fail(511 * s)
	fail(511 * s)
	fail(511 * s)
	r := decodeResult(t, f.applyAt(2, t0, 511*s, mustCmd(t, pb.CommandType_COMMAND_GET_TASK,
		&pb.GetTaskRequest{Job: "j", Trainer: "t2"}))[0], &pb.GetTaskResponse{})
	if r.Result != pb.GetTaskResponse_WAIT {
		t.Fatalf("t2 not blacklisted after 3 failures: %v", r)
	}
	r = decodeResult(t, f.applyAt(2, t0-3600*s, 513*s, mustCmd(t, pb.CommandType_COMMAND_GET_TASK,
		&pb.GetTaskRequest{Job: "j", Trainer: "t2"}))[0], &pb.GetTaskResponse{})
	if r.Result != pb.GetTaskResponse_TASK {
		t.Fatalf("t2 still kept out 2 s into a 1 s blacklist after a wall-clock step back: %v", r)
	}
}

// TestClockRules: the replicated clock's rules one by one, and its
// survival of a snapshot (a restored replica ticks on identically).
func TestClockRules(t *testing.T) {
	put := func(f *testFSM, term uint64, wall, mono int64) int64 {
		f.applyAt(term, wall, mono, putCmd(t, "k", "v"))
		return f.Clock()
	}
	f := newTestFSM(t)
	for i, c := range []struct {
		term       uint64
		wall, mono int64
		want       int64
	}{
		{1, 1000, 0, 1000},                   // first entry: starts at the wall clock
		{1, 1500, 0, 1500},                   // no mono stamps: wall difference
		{1, 1200, 0, 1500},                   // the wall clock stepped back: stands still
		{1, 1300, 0, 1600},                   // and goes on from there
		{1, 99999, 50, 100299},               // first mono stamp of the term: wall difference (98699)
		{1, 5, 80, 100329},                   // mono difference, wall ignored
		{1, 5, 70, 100329},                   // a mono stamp out of order: no double count
		{1, 5, 90, 100339},                   //
		{2, 1 << 60, 7, 100339},              // new term: re-based
		{2, 1 << 60, 17, 100349},             // then mono again
		{3, math.MinInt64, 0, 100349},        // a bogus wall stamp
		{3, math.MaxInt64, 0, math.MaxInt64}, // saturates
		{3, math.MaxInt64, 0, math.MaxInt64},
	} {
		if got := put(f, c.term, c.wall, c.mono); got != c.want {
			t.Fatalf("step %d (term %d wall %d mono %d): clock %d, want %d", i, c.term, c.wall, c.mono, got, c.want)
		}
	}
	// Snapshot mid-term; both replicas tick on the same.
	a := newTestFSM(t)
	put(a, 4, 1000, 10)
	put(a, 4, 1000, 25)
	b := New(nil)
	if err := restore(b, mustSnapshot(t, a.FSM)); err != nil {
		t.Fatal(err)
	}
	if b.Clock() != a.Clock() || b.clock != a.clock {
		t.Fatalf("restored clock %+v, want %+v", b.clock, a.clock)
	}
	bt := &testFSM{FSM: b, tb: t, index: a.index}
	if x, y := put(a, 4, 0, 40), put(bt, 4, 0, 40); x != y || x != 1030 {
		t.Fatalf("after restore: %d and %d, want 1030", x, y)
	}
}

// TestClockEstimator: between entries the estimate runs on from the FSM's
// value with the local monotonic clock, restarts when the value changes,
// and never runs backwards past a new value.
func TestClockEstimator(t *testing.T) {
	var e ClockEstimator
	if got := e.Now(1000); got < 1000 || got > 1000+int64(time.Second) {
		t.Fatalf("first estimate %d for clock 1000", got)
	}
	time.Sleep(20 * time.Millisecond)
	if got := e.Now(1000); got < 1000+int64(20*time.Millisecond) {
		t.Fatalf("estimate %d did not advance 20 ms past 1000", got)
	}
	if got := e.Now(5000); got < 5000 || got > 5000+int64(time.Second) {
		t.Fatalf("estimate %d after the clock moved to 5000", got)
	}
	e.Reset()
	if got := e.Now(5000); got > 5000+int64(time.Second) {
		t.Fatalf("estimate %d after Reset", got)
	}
	if got := e.Now(math.MaxInt64); got != math.MaxInt64 {
		t.Fatalf("estimate %d at the saturated clock", got)
	}
}

// TestShownTimesAreTheProposersWallClock (issue 37): what users read of a
// job (its events' unix_nano, submitted_unix_nano, finished_unix_nano) is
// the wall clock its proposer stamped into the entry, so a leaderless
// period, which the cluster clock skips, does not put them behind: a job
// cancelled 10 s after its submission across a leader change shows 10 s,
// not 0 s, while the cluster clock (deadlines, retention) re-based. The
// stamps survive a snapshot and restore; an entry without a wall stamp (an
// older proposer's) shows cluster time.
func TestShownTimesAreTheProposersWallClock(t *testing.T) {
	const (
		s  = int64(time.Second)
		t0 = int64(1_700_000_000) * s
	)
	f := newTestFSM(t)
	f.applyAt(1, t0, 1*s, mustCmd(t, pb.CommandType_COMMAND_SUBMIT_JOB, &pb.SubmitJobRequest{Spec: testJobSpec("j")}))
	// 10 s without a leader, then a new leader (term 2) cancels the job.
	f.applyAt(2, t0+10*s, 700*s, mustCmd(t, pb.CommandType_COMMAND_CANCEL_JOB, &pb.CancelJobRequest{Name: "j"}))
	if got := f.Clock(); got != t0 {
		t.Fatalf("cluster clock %+d s from t0 after the leaderless period, want 0 (re-based)", (got-t0)/s)
	}
	// An entry of an older proposer: no wall stamp.
	f.applyAt(2, 0, 702*s, mustCmd(t, pb.CommandType_COMMAND_JOB_EVENT,
		&pb.JobEvent{Job: "j", Type: pb.JobEvent_TRAINER_LEFT, Trainer: "t1"}))
	check := func(when string, r JobReader) {
		t.Helper()
		st, ok := r.Job("j")
		if !ok {
			t.Fatalf("%s: job gone", when)
		}
		if st.SubmittedUnixNano != t0 || st.FinishedUnixNano != t0+10*s {
			t.Errorf("%s: submitted %+d s, finished %+d s from t0; want 0 and 10 (the proposers' wall clocks)",
				when, (st.SubmittedUnixNano-t0)/s, (st.FinishedUnixNano-t0)/s)
		}
		evs, err := r.Events("j", 1, 10)
		if err != nil {
			t.Fatal(err)
		}
		want := map[pb.JobEvent_Type]int64{pb.JobEvent_JOB_SUBMITTED: t0, pb.JobEvent_JOB_ENDED: t0 + 10*s, pb.JobEvent_TRAINER_LEFT: t0 + 2*s}
		for _, ev := range evs {
			if w, ok := want[ev.Type]; ok && ev.UnixNano != w {
				t.Errorf("%s: %v at %+.0f s from t0, want %+d", when, ev.Type, float64(ev.UnixNano-t0)/float64(s), (w-t0)/s)
			}
			delete(want, ev.Type)
		}
		if len(want) > 0 {
			t.Errorf("%s: events missing: %v", when, want)
		}
	}
	check("applied", f.Jobs())
	g := newTestFSM(t)
	if err := restore(g.FSM, mustSnapshot(t, f.FSM)); err != nil {
		t.Fatal(err)
	}
	check("restored", g.Jobs())
}
