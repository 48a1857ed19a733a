package demo

import (
	"testing"
	"time"

	pb "github.com/raftps/raftps/api/raftpspb"

	"github.com/raftps/raftps/schema"
)

// TestRolledBackSteps: the steps a rollback event's message threw away
// (its from step minus the step of the version rolled back to), 0 for a
// message that is not a rollback (a restore, a promotion).
func TestRolledBackSteps(t *testing.T) {
	for _, tc := range []struct {
		msg  string
		want int64
	}{
		{"slot 1 on n2: rolled back from step 76 to version 2000000050 (epoch 2, step 50; slot 0 was restored)", 26},
		{"slot 0 on n3: rolled back from step 47 to version 1000000000 (epoch 1, step 0; slot 1 was restored)", 47},
		{"slot 0 on n1: version 1000000050 md5 abc from n2: checkpoint", 0},
		{"slot 0 on n2: backup promoted at epoch 31, version 120, step 120, in 14ms (no restore, no rollback)", 0},
	} {
		if got := RolledBackSteps(tc.msg); got != tc.want {
			t.Errorf("RolledBackSteps(%q) = %d, want %d", tc.msg, got, tc.want)
		}
	}
	if schema.EpochStride != 1_000_000_000 {
		t.Fatalf("schema.EpochStride is %d: the cases above assume 1e9", schema.EpochStride)
	}
}

// TestPickPrimaryOffLeader: the first fault kills the primary of the
// lowest slot whose primary is not the Raft leader; the leader only if
// it holds every primary; nothing if no slot is served.
func TestPickPrimaryOffLeader(t *testing.T) {
	slots := func(nodes ...string) []*pb.PServerSlot {
		var s []*pb.PServerSlot
		for i := len(nodes) - 1; i >= 0; i-- { // out of order on purpose
			s = append(s, &pb.PServerSlot{Index: int32(i), Node: nodes[i]})
		}
		return s
	}
	for _, tc := range []struct {
		slots  []*pb.PServerSlot
		leader string
		want   string
		ok     bool
	}{
		{slots("n1", "n2"), "n3", "n1", true},
		{slots("n1", "n2"), "n1", "n2", true},
		{slots("n1", "n1"), "n1", "n1", true},
		{slots("", "n2"), "n2", "n2", true},
		{nil, "n1", "", false},
	} {
		got, ok := PickPrimaryOffLeader(tc.slots, tc.leader)
		if got != tc.want || ok != tc.ok {
			t.Errorf("PickPrimaryOffLeader(%v, %q) = %q, %v; want %q, %v", tc.slots, tc.leader, got, ok, tc.want, tc.ok)
		}
	}
}

// TestRole: what a node holds of the job's slots.
func TestRole(t *testing.T) {
	slots := []*pb.PServerSlot{{Index: 0, Node: "n1", Backups: []string{"n2"}}, {Index: 1, Node: "n2", Backups: []string{"n3"}}}
	for node, want := range map[string]string{
		"n1": "primary of slot 0",
		"n2": "backup of slot 0, primary of slot 1",
		"n3": "backup of slot 1",
		"n4": "no slot",
	} {
		if got := Role(slots, node); got != want {
			t.Errorf("Role(%s) = %q, want %q", node, got, want)
		}
	}
}

// TestFaultAim: a fault is checked against 0.5 s unless the killed node
// was the Raft leader (1.5 s); a stall of 0 (training never resumed) is
// never met.
func TestFaultAim(t *testing.T) {
	for _, tc := range []struct {
		leader bool
		stall  time.Duration
		met    bool
	}{
		{false, 400 * time.Millisecond, true},
		{false, 600 * time.Millisecond, false},
		{true, 600 * time.Millisecond, true},
		{true, 1600 * time.Millisecond, false},
		{true, 0, false},
	} {
		f := &Fault{Leader: tc.leader, Stall: tc.stall}
		if f.Met() != tc.met {
			t.Errorf("leader %v stall %v (aim %v): met %v, want %v", tc.leader, tc.stall, f.Aim(), f.Met(), tc.met)
		}
	}
}

// TestStallFromCommitTimes: the stall is measured on the events' commit
// times, not on when the demo received them (a follower's watch catching
// up after an election delivers a burst at once), from the kill to the
// first finished task past every step made before it: a task that only
// finishes after the kill (its step no higher than the steps of the
// tasks finished before or than the promoted backup's step) is not
// progress. A task done before the kill counts in Before; the later gaps
// are After, which ends at the restart, and a pass's end and evaluation
// are progress in it; a promotion after the restart is not the fault's.
func TestStallFromCommitTimes(t *testing.T) {
	at := time.Now().Add(-time.Minute)
	s := &Schedule{total: 1000}
	done := func(d time.Duration, step int64) {
		s.OnEvent(&pb.JobEvent{Type: pb.JobEvent_TASK_DONE, UnixNano: at.Add(d).UnixNano(), Version: step})
	}
	done(-RestartAfter-time.Second, 10) // too old for Before
	done(-900*time.Millisecond, 40)
	done(-100*time.Millisecond, 50)
	// The kill, as kill records it.
	f := &Fault{At: at, Before: longestGap(s.recent, at), StepBefore: s.maxStep}
	s.faults, s.pending = []*Fault{f}, f
	done(time.Millisecond, 54)     // released before the kill: the promotion says so
	done(-50*time.Millisecond, 51) // committed before the kill, seen after it
	s.OnEvent(&pb.JobEvent{Type: pb.JobEvent_PSERVER_PROMOTED, UnixNano: at.Add(200 * time.Millisecond).UnixNano(),
		Message: "slot 0 on n2: backup promoted at epoch 42, version 55, step 55, in 10ms (no restore, no rollback)"})
	done(250*time.Millisecond, 55) // no step past the promoted one
	done(300*time.Millisecond, 56)
	done(400*time.Millisecond, 60)
	done(1000*time.Millisecond, 70)
	// The pause between passes is progress (the end, the evaluation)...
	s.OnEvent(&pb.JobEvent{Type: pb.JobEvent_PASS_ENDED, UnixNano: at.Add(1500 * time.Millisecond).UnixNano()})
	s.OnEvent(&pb.JobEvent{Type: pb.JobEvent_EVAL_REPORTED, UnixNano: at.Add(2100 * time.Millisecond).UnixNano()})
	done(2700*time.Millisecond, 80)
	// ... and the restart ends the window, for promotions too.
	done(RestartAfter+time.Second, 200)
	s.OnEvent(&pb.JobEvent{Type: pb.JobEvent_PSERVER_PROMOTED, UnixNano: at.Add(RestartAfter + 2*time.Second).UnixNano(),
		Message: "slot 1 on n3: backup promoted at epoch 50, version 190, step 190, in 10ms (no restore, no rollback)"})
	if f.Stall != 300*time.Millisecond || f.DoneAt != time.Millisecond || f.PromotedAt != 200*time.Millisecond || f.StepBefore != 55 {
		t.Fatalf("stall %v, first done +%v, promoted +%v, step before %d; want 300ms, +1ms, +200ms, 55", f.Stall, f.DoneAt, f.PromotedAt, f.StepBefore)
	}
	if f.After != 600*time.Millisecond || f.Before != 800*time.Millisecond {
		t.Fatalf("after %v, before %v; want 600ms, 800ms", f.After, f.Before)
	}
	if len(f.Promoted) != 1 {
		t.Fatalf("promotions %q, want the one before the restart", f.Promoted)
	}
}

// TestPromotedStep: the step of a promotion event's message.
func TestPromotedStep(t *testing.T) {
	if step, ok := PromotedStep("slot 1 on n2: backup promoted at epoch 42, version 592, step 592, in 10ms (no restore, no rollback)"); !ok || step != 592 {
		t.Errorf("PromotedStep = %d, %v; want 592, true", step, ok)
	}
	if _, ok := PromotedStep("slot 0 on n1: version 1200 md5 c4 from n1: newest"); ok {
		t.Error("PromotedStep of a restore: ok")
	}
}

// TestCheckSteps: every slot must end at the step the trainers were
// released on; a slot missing from the final version (it ended at
// another step) or at another step fails.
func TestCheckSteps(t *testing.T) {
	st := func(released int64, ptrs ...[2]int64) *pb.JobStatus {
		s := &pb.JobStatus{Spec: &pb.JobSpec{NumPservers: 2, Checkpoint: &pb.CheckpointPolicy{EverySteps: 50}}, Metrics: []*pb.PassMetric{{Pass: 0, Step: 10}, {Pass: 1, Step: released}}}
		for _, p := range ptrs {
			s.Checkpoints = append(s.Checkpoints, &pb.CheckpointPointer{Version: p[0], Step: p[1]})
		}
		return s
	}
	unchecked := st(1650)
	unchecked.Spec.Checkpoint = nil
	if c := CheckSteps(unchecked); !c.Unchecked || c.Err() != nil {
		t.Errorf("a job without checkpoints: %+v, %v; want unchecked, no error", c, c.Err())
	}
	ok := st(1650, [2]int64{1600, 1600}, [2]int64{1600, 1600}, [2]int64{1650, 1650}, [2]int64{1650, 1650})
	if err := CheckSteps(ok).Err(); err != nil {
		t.Errorf("equal steps: %v", err)
	}
	for name, s := range map[string]*pb.JobStatus{
		"a slot ended a step ahead": st(1650, [2]int64{1650, 1650}, [2]int64{1651, 1651}),
		"slots short of released":   st(1651, [2]int64{1650, 1650}, [2]int64{1650, 1650}),
		"no checkpoint":             st(1650),
	} {
		if err := CheckSteps(s).Err(); err == nil {
			t.Errorf("%s: no error", name)
		}
	}
}

// TestRestoresCounted: every restore from a checkpoint and every
// rollback of the run is kept, in a fault's window or not (a restore 16 s
// after a fault, once its node was back, lost steps in a loaded run and
// the fault's "steps lost" said 0); a slot's first claim (version 0, the
// initializer) is not a restore.
func TestRestoresCounted(t *testing.T) {
	s := &Schedule{total: 100}
	for _, ev := range []*pb.JobEvent{
		{Type: pb.JobEvent_PSERVER_RESTORED, Message: "slot 0 on n1: version 0 md5  from : initializer"},
		{Type: pb.JobEvent_PSERVER_RESTORED, Version: 1200, Message: "slot 1 on n3: version 1200 md5 c4 from n1: newest"},
		{Type: pb.JobEvent_PSERVER_RESTORED, Version: 1000001200, Message: "slot 0 on n1: rolled back from step 1247 to version 1000001200 (epoch 1, step 1200; slot 1 was restored)"},
		{Type: pb.JobEvent_PSERVER_PROMOTED, Message: "slot 0 on n2: backup promoted"},
	} {
		ev.UnixNano = time.Now().UnixNano()
		s.OnEvent(ev)
	}
	if got := s.Restores(); len(got) != 2 {
		t.Fatalf("restores %q, want the two after the first claims", got)
	}
}
