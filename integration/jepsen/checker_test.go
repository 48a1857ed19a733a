package jepsen

import (
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"

	pb "github.com/raftps/raftps/api/raftpspb"
)

// These tests feed each checker an honest history and a doctored one and
// show the verdict flips from ok to violation. No root, no processes.

const ms = int64(time.Millisecond)

func mustVerdict(tb testing.TB, r Result, want Verdict) {
	tb.Helper()
	if r.Verdict != want {
		tb.Fatalf("%s: verdict %s, want %s; violations: %v; notes: %v", r.Checker, r.Verdict, want, r.Violations, r.Notes)
	}
	tb.Logf("%s: %s %v", r.Checker, r.Verdict, r.Violations)
}

func wr(p int, key, v string, call, ret int64) RegisterOp {
	return RegisterOp{Process: p, Kind: RegWrite, Key: key, Value: v, Status: StatusOK, Call: call * ms, Return: ret * ms}
}
func rd(p int, key, v string, call, ret int64) RegisterOp {
	return RegisterOp{Process: p, Kind: RegRead, Key: key, Result: v, Status: StatusOK, Call: call * ms, Return: ret * ms}
}
func cas(p int, key, from, to string, ok bool, call, ret int64) RegisterOp {
	return RegisterOp{Process: p, Kind: RegCAS, Key: key, Expect: from, Value: to, OK: ok, Status: StatusOK, Call: call * ms, Return: ret * ms}
}

func TestCheckRegisters(t *testing.T) {
	honest := []RegisterOp{
		wr(0, "a", "1", 0, 10),
		rd(1, "a", "1", 11, 20),
		cas(2, "a", "1", "2", true, 21, 30),
		rd(0, "a", "2", 31, 40),
		wr(1, "b", "7", 0, 5),
		rd(2, "b", "7", 6, 8),
		// Concurrent write and read: either value is fine.
		wr(3, "a", "3", 41, 60),
		rd(4, "a", "2", 42, 50),
		rd(4, "a", "3", 61, 70),
		// A failed read is dropped, whatever it claims.
		{Process: 5, Kind: RegRead, Key: "a", Result: "999", Status: StatusFail, Call: 71 * ms, Return: 72 * ms},
	}
	tests := []struct {
		name string
		ops  []RegisterOp
		want Verdict
	}{
		{"honest", honest, VerdictOK},
		{"stale read", append(append([]RegisterOp(nil), honest...),
			// After "3" was acknowledged, a read returns the old "2".
			rd(6, "a", "2", 80, 90)), VerdictViolation},
		{"lost write", []RegisterOp{
			wr(0, "k", "1", 0, 10),
			wr(1, "k", "2", 11, 20),
			// The acknowledged write of "2" is gone.
			rd(2, "k", "1", 21, 30),
		}, VerdictViolation},
		{"read of a never-written value", []RegisterOp{
			wr(0, "k", "1", 0, 10),
			rd(1, "k", "5", 11, 20),
		}, VerdictViolation},
		{"cas succeeded on wrong value", []RegisterOp{
			wr(0, "k", "1", 0, 10),
			cas(1, "k", "9", "2", true, 11, 20),
		}, VerdictViolation},
		{"indeterminate write seen later is fine", []RegisterOp{
			wr(0, "k", "1", 0, 10),
			{Process: 1, Kind: RegWrite, Key: "k", Value: "2", Status: StatusInfo, Call: 11 * ms, Return: 12 * ms, Err: "deadline exceeded"},
			rd(2, "k", "1", 20, 30),
			rd(2, "k", "2", 500, 510),
		}, VerdictOK},
		{"indeterminate write that never happened is fine", []RegisterOp{
			wr(0, "k", "1", 0, 10),
			{Process: 1, Kind: RegWrite, Key: "k", Value: "2", Status: StatusInfo, Call: 11 * ms, Return: 12 * ms},
			rd(2, "k", "1", 500, 510),
		}, VerdictOK},
		{"indeterminate write cannot be un-done", []RegisterOp{
			wr(0, "k", "1", 0, 10),
			{Process: 1, Kind: RegWrite, Key: "k", Value: "2", Status: StatusInfo, Call: 11 * ms, Return: 12 * ms},
			rd(2, "k", "2", 500, 510),
			rd(2, "k", "1", 520, 530),
		}, VerdictViolation},
		{"unobserved indeterminate write does not excuse a stale read", []RegisterOp{
			wr(0, "k", "1", 0, 10),
			{Process: 1, Kind: RegWrite, Key: "k", Value: "2", Status: StatusInfo, Call: 11 * ms, Return: 12 * ms},
			wr(3, "k", "3", 20, 30),
			rd(2, "k", "1", 40, 50),
		}, VerdictViolation},
		{"value read before it was written", []RegisterOp{
			wr(0, "k", "1", 0, 10),
			rd(2, "k", "2", 20, 30),
			{Process: 1, Kind: RegWrite, Key: "k", Value: "2", Status: StatusInfo, Call: 40 * ms, Return: 50 * ms},
		}, VerdictViolation},
		{"indeterminate cas", []RegisterOp{
			wr(0, "k", "1", 0, 10),
			{Process: 1, Kind: RegCAS, Key: "k", Expect: "1", Value: "2", Status: StatusInfo, Call: 11 * ms, Return: 12 * ms},
			rd(2, "k", "1", 20, 30),
			rd(2, "k", "2", 40, 50),
		}, VerdictOK},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			res, info := CheckRegisters(tc.ops, 10*time.Second)
			mustVerdict(t, res, tc.want)
			// The patched history (unobserved indeterminate writes dropped,
			// observed ones closed at their first observation) gives the same
			// verdict as the unpatched one (open until +inf).
			raw := porcupine.CheckOperations(RegisterModel, unpatchedInfinite(tc.ops))
			if raw != (tc.want == VerdictOK) {
				t.Fatalf("unpatched history: linearizable=%v, want %v", raw, tc.want == VerdictOK)
			}
			if err := WriteVisualization(filepath.Join(t.TempDir(), "lin.html"), info, []Fault{{Type: FaultKillLeader, Target: "n1", Start: 1 * ms, End: 5 * ms}}); err != nil {
				t.Fatalf("visualize: %v", err)
			}
		})
	}
}

func honestWatch() ([]WatcherRun, []AckedPut) {
	acked := []AckedPut{{"/j/a", "1", 5}, {"/j/b", "2", 6}, {"/j/a", "3", 8}}
	ev := func(w int, typ, k, v string, rev int64) WatchEvent {
		return WatchEvent{Watcher: w, Type: typ, Key: k, Value: v, ModRevision: rev}
	}
	runs := []WatcherRun{
		{ID: 0, StartRevision: 5, EndRevision: 9, Events: []WatchEvent{
			ev(0, "put", "/j/a", "1", 5), ev(0, "put", "/j/b", "2", 6),
			ev(0, "put", "/j/c", "x", 7), // a write whose ack was lost: fine
			ev(0, "put", "/j/a", "3", 8), ev(0, "delete", "/j/c", "", 9),
		}},
		// Watcher 1 resumed at 7 after a stream error.
		{ID: 1, StartRevision: 5, EndRevision: 9, Resumes: 1, Events: []WatchEvent{
			ev(1, "put", "/j/a", "1", 5), ev(1, "put", "/j/b", "2", 6),
			ev(1, "put", "/j/c", "x", 7), ev(1, "put", "/j/a", "3", 8), ev(1, "delete", "/j/c", "", 9),
		}},
		// Watcher 2 started late.
		{ID: 2, StartRevision: 8, EndRevision: 9, Events: []WatchEvent{
			ev(2, "put", "/j/a", "3", 8), ev(2, "delete", "/j/c", "", 9),
		}},
	}
	return runs, acked
}

func TestCheckWatches(t *testing.T) {
	runs, acked := honestWatch()
	mustVerdict(t, CheckWatches(runs, acked, 9), VerdictOK)

	doctor := func(f func(runs []WatcherRun)) []WatcherRun {
		r, _ := honestWatch()
		f(r)
		return r
	}
	tests := []struct {
		name string
		runs []WatcherRun
		acks []AckedPut
	}{
		{"gap: acknowledged put missing", doctor(func(r []WatcherRun) {
			r[1].Events = append(r[1].Events[:1:1], r[1].Events[2:]...) // drop rev 6
		}), acked},
		{"gap: unacknowledged event missing in one watcher", doctor(func(r []WatcherRun) {
			r[1].Events = append(r[1].Events[:2:2], r[1].Events[3:]...) // drop rev 7
		}), acked},
		{"duplicate event", doctor(func(r []WatcherRun) {
			e := r[0].Events
			r[0].Events = append(e[:3:3], append([]WatchEvent{e[2]}, e[3:]...)...) // rev 7 twice
		}), acked},
		{"out of order", doctor(func(r []WatcherRun) {
			e := r[0].Events
			e[1], e[2] = e[2], e[1]
		}), acked},
		{"wrong value", doctor(func(r []WatcherRun) {
			r[2].Events[0].Value = "42"
		}), acked},
		{"event from the future", doctor(func(r []WatcherRun) {
			r[0].Events = append(r[0].Events, WatchEvent{Type: "put", Key: "/j/z", Value: "z", ModRevision: 12})
			r[0].EndRevision = 12
		}), acked},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			mustVerdict(t, CheckWatches(tc.runs, tc.acks, 9), VerdictViolation)
		})
	}
}

var bounds = LeaseBounds{ElectionTimeout: 500 * time.Millisecond, Slack: 2 * time.Second, Margin: 100 * time.Millisecond}

func honestLeases() []LeaseRecord {
	s := int64(time.Second)
	return []LeaseRecord{
		{Kind: "grant", Role: "keeper", Lease: 1, TTL: 4, Status: StatusOK, Call: 0, Return: 10 * ms},
		{Kind: "put", Role: "keeper", Lease: 1, Key: "/l/keeper/1/0", Status: StatusOK, Call: 20 * ms, Return: 30 * ms},
		{Kind: "read", Role: "keeper", Keys: []string{"/l/keeper/1/0"}, Status: StatusOK, Call: 1 * s, Return: 1*s + 10*ms},
		{Kind: "keepalive", Role: "keeper", Lease: 1, TTL: 4, Status: StatusOK, Call: 2 * s, Return: 2*s + 10*ms},
		{Kind: "read", Role: "keeper", Keys: []string{"/l/keeper/1/0"}, Status: StatusOK, Call: 5 * s, Return: 5*s + 10*ms},
		// A failed read is no evidence.
		{Kind: "read", Role: "keeper", Status: StatusFail, Call: 5 * s, Return: 6 * s},
		// Long after the last keepalive: the lease may be gone; nothing to check.
		{Kind: "read", Role: "keeper", Keys: []string{}, Status: StatusOK, Call: 20 * s, Return: 20*s + 10*ms},

		{Kind: "grant", Role: "expirer", Lease: 2, TTL: 4, Status: StatusOK, Call: 0, Return: 10 * ms},
		{Kind: "put", Role: "expirer", Lease: 2, Key: "/l/expirer/2/0", Status: StatusOK, Call: 20 * ms, Return: 30 * ms},
		{Kind: "keepalive", Role: "expirer", Lease: 2, TTL: 4, Status: StatusOK, Call: 1 * s, Return: 1*s + 10*ms},
		{Kind: "stop", Role: "expirer", Lease: 2, Status: StatusOK, Call: 2 * s, Return: 2 * s},
		{Kind: "read", Role: "expirer", Keys: []string{"/l/expirer/2/0"}, Status: StatusOK, Call: 4 * s, Return: 4*s + 10*ms},
		{Kind: "read", Role: "expirer", Keys: []string{}, Status: StatusOK, Call: 6 * s, Return: 6*s + 10*ms},
		{Kind: "read", Role: "expirer", Keys: []string{}, Status: StatusOK, Call: 9 * s, Return: 9*s + 10*ms},
	}
}

func TestCheckLeases(t *testing.T) {
	mustVerdict(t, CheckLeases(honestLeases(), bounds), VerdictOK)

	t.Run("key vanished while kept alive", func(t *testing.T) {
		recs := honestLeases()
		recs[4].Keys = []string{} // read at 5s, promise until 6s
		mustVerdict(t, CheckLeases(recs, bounds), VerdictViolation)
	})
	t.Run("key outlived its abandoned lease", func(t *testing.T) {
		recs := honestLeases()
		recs[len(recs)-1].Keys = []string{"/l/expirer/2/0"} // 9s > 1s+4s+0.5s+2s
		mustVerdict(t, CheckLeases(recs, bounds), VerdictViolation)
	})
	t.Run("a keepalive that timed out may have renewed the lease", func(t *testing.T) {
		s := int64(time.Second)
		recs := honestLeases()
		// Sent at 1.5 s, timed out at 1.9 s: it may have renewed the lease
		// until 5.9 s, so the key may be there until 5.9+0.5+2 = 8.4 s.
		recs = append(recs,
			LeaseRecord{Kind: "keepalive", Role: "expirer", Lease: 2, Status: StatusFail, Call: 1500 * ms, Return: 1900 * ms},
			LeaseRecord{Kind: "read", Role: "expirer", Keys: []string{"/l/expirer/2/0"}, Status: StatusOK, Call: 8 * s, Return: 8*s + 10*ms})
		mustVerdict(t, CheckLeases(recs, bounds), VerdictOK)
		recs[len(honestLeases())-1].Keys = []string{"/l/expirer/2/0"} // at 9 s: beyond 8.4 s
		mustVerdict(t, CheckLeases(recs, bounds), VerdictViolation)
	})
	t.Run("a leader change during the expiry window extends the lease", func(t *testing.T) {
		recs := honestLeases()
		recs[len(recs)-1].Keys = []string{"/l/expirer/2/0"}
		b := bounds
		b.Faults = []Fault{{Type: FaultKillLeader, Start: 3 * int64(time.Second), End: 5 * int64(time.Second)}}
		// 9s < 5s + 4s + 0.5s + 2s: the key may still be there.
		mustVerdict(t, CheckLeases(recs, b), VerdictOK)
	})
}

func ev(seq int64, typ pb.JobEvent_Type, pass int32, task int64) *pb.JobEvent {
	return &pb.JobEvent{Seq: seq, Type: typ, Pass: pass, TaskId: task, Job: "j"}
}

func honestTraining() TrainingHistory {
	var evs []*pb.JobEvent
	seq := int64(0)
	add := func(typ pb.JobEvent_Type, pass int32, task int64) {
		seq++
		evs = append(evs, ev(seq, typ, pass, task))
	}
	add(pb.JobEvent_JOB_SUBMITTED, 0, 0)
	for pass := int32(0); pass < 2; pass++ {
		add(pb.JobEvent_TASK_DONE, pass, 0)
		add(pb.JobEvent_TASK_REQUEUED, pass, 2) // a trainer died: requeued, done later
		add(pb.JobEvent_TASK_DONE, pass, 1)
		add(pb.JobEvent_TASK_DONE, pass, 2)
		add(pb.JobEvent_PASS_ENDED, pass, 0)
	}
	add(pb.JobEvent_JOB_ENDED, 1, 0)
	return TrainingHistory{
		Job: "j", Events: evs, TasksPerPass: 3,
		Pointers: []PointerRecord{{Slot: 0, Version: 1, MD5: "aa"}, {Slot: 0, Version: 2, MD5: "bb"}, {Slot: 1, Version: 1, MD5: "cc"}},
		Restores: []*pb.RestoreRecord{
			{Slot: 0, Version: 2, Md5: "bb", Reason: "newest"},
			{Slot: 1, Version: 1, Md5: "cc", Reason: "fallback: version 2 md5 mismatch"},
			{Slot: 2, Reason: "initializer: no checkpoint"},
		},
		Final: &pb.JobStatus{Name: "j", State: pb.JobState_JOB_SUCCEEDED},
	}
}

func TestCheckTraining(t *testing.T) {
	mustVerdict(t, CheckTraining(honestTraining()), VerdictOK)
	t.Run("honest restore events and repartitioned restore", func(t *testing.T) {
		th := honestTraining()
		th.Events = append(th.Events,
			&pb.JobEvent{Seq: int64(len(th.Events) + 1), Type: pb.JobEvent_PSERVER_RESTORED, Message: "slot 0 on n2: version 1 md5 aa from n1,n3: newest"},
			&pb.JobEvent{Seq: int64(len(th.Events) + 2), Type: pb.JobEvent_PSERVER_RESTORED, Message: "slot 1 on n2: version 0 md5  from : initializer: no checkpoint pointer for job j"},
			&pb.JobEvent{Seq: int64(len(th.Events) + 3), Type: pb.JobEvent_PSERVER_RESTORED, Message: "slot 0 on n1: rolled back from step 7 to version 1 (slot 1 was restored)"})
		th.Restores = append(th.Restores, &pb.RestoreRecord{Slot: 0, Version: 1, Md5: "0:aa,1:cc", Reason: "newest"})
		r := CheckTraining(th)
		mustVerdict(t, r, VerdictOK)
		if r.Stats["restores-checked"] != 4 {
			t.Fatalf("restores-checked = %d, want 4", r.Stats["restores-checked"])
		}
	})
	tests := []struct {
		name string
		f    func(th *TrainingHistory)
	}{
		{"task done twice", func(th *TrainingHistory) {
			// The 2nd event (pass 0 TASK_DONE task 0) is repeated as a new event.
			th.Events = append(th.Events, ev(int64(len(th.Events)+1), pb.JobEvent_TASK_DONE, 0, 0))
		}},
		{"missing task", func(th *TrainingHistory) {
			th.Events[3].Type = pb.JobEvent_TASK_REQUEUED // pass 0 task 1 never done
		}},
		{"event seq gap", func(th *TrainingHistory) {
			th.Events = append(th.Events[:2:2], th.Events[3:]...) // seq 3 (a requeue) lost
		}},
		{"restore md5 mismatch", func(th *TrainingHistory) {
			th.Restores[0].Md5 = "ff"
		}},
		{"restore of an uncommitted version", func(th *TrainingHistory) {
			th.Restores[0].Version = 3
		}},
		{"restore event with a torn checkpoint", func(th *TrainingHistory) {
			th.Events = append(th.Events, &pb.JobEvent{Seq: int64(len(th.Events) + 1), Type: pb.JobEvent_PSERVER_RESTORED,
				Message: "slot 0 on n2: version 1 md5 ab from n1,n3: newest"})
		}},
		{"repartitioned restore with one wrong part", func(th *TrainingHistory) {
			th.Restores = append(th.Restores, &pb.RestoreRecord{Slot: 0, Version: 1, Md5: "0:aa,1:xx", Reason: "newest"})
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			th := honestTraining()
			tc.f(&th)
			r := CheckTraining(th)
			mustVerdict(t, r, VerdictViolation)
			if tc.name == "missing task" && !strings.Contains(strings.Join(r.Violations, ";"), "task(s) 1") {
				t.Fatalf("want task 1 named missing, got %v", r.Violations)
			}
		})
	}
}

// promotedTraining is honestTraining with slot 3 of a replicated job
// failed over twice: promoted at version 57 (epoch 40), then at 80 (epoch
// 52), its record naming the second promotion (no checkpoint, no md5).
func promotedTraining() TrainingHistory {
	th := honestTraining()
	n := int64(len(th.Events))
	th.Events = append(th.Events,
		&pb.JobEvent{Seq: n + 1, Type: pb.JobEvent_PSERVER_PROMOTED, Version: 57,
			Message: "slot 3 on n2: backup promoted at epoch 40, version 57, step 57, in 3ms (no restore, no rollback)"},
		&pb.JobEvent{Seq: n + 2, Type: pb.JobEvent_PSERVER_PROMOTED, Version: 80,
			Message: "slot 3 on n3: backup promoted at epoch 52, version 80, step 80, in 2ms (no restore, no rollback)"})
	th.Restores = append(th.Restores, &pb.RestoreRecord{Slot: 3, Version: 80, Source: PromotedSource,
		Reason: "backup promoted at epoch 52 with version 80, step 80 (no restore, no rollback)"})
	return th
}

// TestCheckTrainingPromotion: a promoted backup's record names a version
// no checkpoint pointer names (it restored nothing) and is valid; a
// promotion that went back (a rollback) is not, nor a "promoted" record
// that names a checkpoint no pointer has. Before checkPromotions, the
// honest history was reported "slot 3 restored version 80 of slot 3 that
// no committed pointer names".
func TestCheckTrainingPromotion(t *testing.T) {
	r := CheckTraining(promotedTraining())
	mustVerdict(t, r, VerdictOK)
	if r.Stats["promotions"] != 2 {
		t.Fatalf("promotions = %d, want 2", r.Stats["promotions"])
	}
	t.Run("a restore between promotions allows going back", func(t *testing.T) {
		th := promotedTraining()
		last := th.Events[len(th.Events)-1]
		last.Seq++
		last.Message = "slot 3 on n3: backup promoted at epoch 52, version 20, step 20, in 2ms (no restore, no rollback)"
		th.Restores[len(th.Restores)-1].Version = 20
		th.Events = append(th.Events[:len(th.Events)-1],
			&pb.JobEvent{Seq: last.Seq - 1, Type: pb.JobEvent_PSERVER_RESTORED, Message: "slot 3 on n1: version 0 md5  from : initializer: no checkpoint pointer for job j"},
			last)
		mustVerdict(t, CheckTraining(th), VerdictOK)
	})
	tests := []struct {
		name string
		f    func(th *TrainingHistory)
		want string
	}{
		{"a promotion that went back", func(th *TrainingHistory) {
			th.Events[len(th.Events)-1].Message = "slot 3 on n3: backup promoted at epoch 52, version 50, step 50, in 2ms (no restore, no rollback)"
			th.Restores[len(th.Restores)-1].Version = 50
		}, "below version 57"},
		{"a promoted record behind its promotion", func(th *TrainingHistory) {
			th.Restores[len(th.Restores)-1].Version = 79
		}, "promoted record at version 79"},
		{"a promoted record naming a checkpoint no pointer has", func(th *TrainingHistory) {
			th.Restores[len(th.Restores)-1].Md5 = "dd"
		}, "no committed pointer names"},
		{"a promotion event that does not parse", func(th *TrainingHistory) {
			th.Events[len(th.Events)-1].Message = "slot 3 promoted"
		}, "does not parse"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			th := promotedTraining()
			tc.f(&th)
			r := CheckTraining(th)
			mustVerdict(t, r, VerdictViolation)
			if !strings.Contains(strings.Join(r.Violations, "; "), tc.want) {
				t.Fatalf("violations %v do not say %q", r.Violations, tc.want)
			}
		})
	}
}
