package jepsen

import (
	"strings"
	"testing"

	pb "github.com/raftps/raftps/api/raftpspb"
)

// honestSlots is a hand-made replicated-slot history: slot 0 failed over
// from n1 (epoch 10) to n2 (epoch 20); push 1 was acknowledged by n1
// before the promotion, push 2 by n2 after it, push 3 is indeterminate
// and took effect, push 4 is indeterminate and did not; slot 1 (n3,
// epoch 11) has one acknowledged push. Element 3 of slot 0 and element 1
// of slot 1 were never pushed.
func honestSlots() ([]SlotPush, []SlotFinal) {
	pushes := []SlotPush{
		{Client: "c0", Slot: 0, Elem: 0, PushID: 1, Status: StatusOK, Node: "n1", Epoch: 10, Version: 1},
		{Client: "c1", Slot: 0, Elem: 1, PushID: 2, Status: StatusOK, Node: "n2", Epoch: 20, Version: 2},
		{Client: "c0", Slot: 0, Elem: 2, PushID: 3, Status: StatusInfo},
		{Client: "c1", Slot: 0, Elem: 4, PushID: 5, Status: StatusInfo},
		{Client: "c2", Slot: 1, Elem: 0, PushID: 1<<32 | 1, Status: StatusOK, Node: "n3", Epoch: 11, Version: 1},
	}
	finals := []SlotFinal{
		{Slot: 0, Primary: "n2", Epoch: 20, Node: "n2", Version: 3, Values: []float32{1, 1, 1, 0, 0}},
		{Slot: 1, Primary: "n3", Epoch: 11, Node: "n3", Version: 1, Values: []float32{1, 0}},
	}
	return pushes, finals
}

func TestCheckSlotPushes(t *testing.T) {
	p, f := honestSlots()
	r := CheckSlotPushes(p, f)
	mustVerdict(t, r, VerdictOK)
	if r.Stats["ok"] != 3 || r.Stats["info"] != 2 || r.Stats["info-applied"] != 1 || r.Stats["acked-by-deposed"] != 1 {
		t.Fatalf("stats %v, want ok 3, info 2, info-applied 1, acked-by-deposed 1", r.Stats)
	}
	tests := []struct {
		name string
		f    func(p []SlotPush, f []SlotFinal)
		want string // in a violation
	}{
		{"acked push doubled", func(_ []SlotPush, f []SlotFinal) { f[0].Values[1] = 2 }, "applied 2 times"},
		{"acked push lost", func(_ []SlotPush, f []SlotFinal) { f[1].Values[0] = 0 }, "is lost"},
		{"push acked by the deposed primary lost", func(_ []SlotPush, f []SlotFinal) { f[0].Values[0] = 0 }, "by a deposed primary (n1 at epoch 10"},
		{"push acked by the deposed primary doubled", func(_ []SlotPush, f []SlotFinal) { f[0].Values[0] = 2 }, "by a deposed primary"},
		{"indeterminate push applied twice", func(_ []SlotPush, f []SlotFinal) { f[0].Values[2] = 2 }, "indeterminate push 3"},
		{"an element no push used", func(_ []SlotPush, f []SlotFinal) { f[0].Values[3] = 1 }, "no push used it"},
		{"a fraction of a push", func(_ []SlotPush, f []SlotFinal) { f[1].Values[0] = 0.5 }, "not a whole number"},
		{"an element pushed twice by the workload", func(p []SlotPush, _ []SlotFinal) { p[1].Elem = 0 }, "pushed twice in the history"},
		{"no final state of a slot", func(p []SlotPush, _ []SlotFinal) { p[4].Slot = 2 }, "no such element"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p, f := honestSlots()
			tc.f(p, f)
			r := CheckSlotPushes(p, f)
			mustVerdict(t, r, VerdictViolation)
			if !strings.Contains(strings.Join(r.Violations, "; "), tc.want) {
				t.Fatalf("violations %v do not say %q", r.Violations, tc.want)
			}
		})
	}
	t.Run("nothing acknowledged", func(t *testing.T) {
		mustVerdict(t, CheckSlotPushes(nil, f), VerdictUnknown)
	})
}

// TestSlotElements: every element of w belongs to exactly one slot, and
// every slot holds some (so every slot is pushed and checked).
func TestSlotElements(t *testing.T) {
	spec := SlotJobSpec("j", "d", pb.UpdateMode_UPDATE_MODE_ASYNC, 2, 2, 1<<15, 256)
	elems, l, p, err := slotElements(spec)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[int64]int32{}
	for s, list := range elems {
		if len(list) == 0 {
			t.Fatalf("slot %d holds no element", s)
		}
		for _, e := range list {
			lo, hi := l.BlockRange(p, e.block)
			if e.off >= hi-lo {
				t.Fatalf("slot %d: offset %d beyond block %d", s, e.off, e.block)
			}
			g := lo + e.off
			if o, dup := seen[g]; dup {
				t.Fatalf("element %d in slots %d and %d", g, o, s)
			}
			seen[g] = int32(s)
		}
	}
	if len(seen) != 1<<15 {
		t.Fatalf("%d elements in slots, want %d", len(seen), 1<<15)
	}
}

// honestSync is a hand-made sync history of 2 trainers on 2 slots, each
// ended at step 3 (elements s·2+t): step 0 counted both trainers (0.5
// each); in step 1 trainer 1's push on slot 0 was refused as stale
// (fail) and slot 0 counted trainer 0 alone (1), while slot 1 counted
// both; in step 2 trainer 1's pushes are indeterminate: counted on slot
// 0, not on slot 1; step 3 never completed (trainer 0's pushes of it are
// indeterminate). Slot 0's primary changed from n1 to n2 after step 0.
func honestSync() ([]SlotPush, []SlotFinal) {
	ok := func(slot int32, step int64, t int, node string) SlotPush {
		return SlotPush{Client: syncTrainer(t), Slot: slot, Step: step, Elem: int(step)*2 + t, PushID: pushID(slot, int(step)*2+t),
			Status: StatusOK, Node: node, Epoch: 5, Version: step + 1}
	}
	with := func(p SlotPush, st Status) SlotPush { p.Status, p.Node, p.Version = st, "", 0; return p }
	pushes := []SlotPush{
		ok(0, 0, 0, "n1"), ok(0, 0, 1, "n1"), ok(1, 0, 0, "n3"), ok(1, 0, 1, "n3"),
		ok(0, 1, 0, "n2"), with(ok(0, 1, 1, ""), StatusFail), ok(1, 1, 0, "n3"), ok(1, 1, 1, "n3"),
		ok(0, 2, 0, "n2"), with(ok(0, 2, 1, ""), StatusInfo), ok(1, 2, 0, "n3"), with(ok(1, 2, 1, ""), StatusInfo),
		with(ok(0, 3, 0, ""), StatusInfo), with(ok(1, 3, 0, ""), StatusInfo),
	}
	finals := []SlotFinal{
		{Slot: 0, Primary: "n2", Epoch: 9, Version: 3, Values: []float32{0.5, 0.5, 1, 0, 0.5, 0.5, 0, 0, 0, 0}},
		{Slot: 1, Primary: "n3", Epoch: 6, Version: 3, Values: []float32{0.5, 0.5, 0.5, 0.5, 1, 0, 0, 0, 0, 0}},
	}
	return pushes, finals
}

func TestCheckSyncSteps(t *testing.T) {
	p, f := honestSync()
	r := CheckSyncSteps(p, f, 2)
	mustVerdict(t, r, VerdictOK)
	if r.Stats["steps"] != 6 || r.Stats["ok"] != 9 || r.Stats["info"] != 4 || r.Stats["fail"] != 1 || r.Stats["acked-by-deposed"] != 2 {
		t.Fatalf("stats %v, want steps 6, ok 9, info 4, fail 1, acked-by-deposed 2", r.Stats)
	}
	tests := []struct {
		name string
		f    func(p []SlotPush, f []SlotFinal)
		want string
	}{
		{"unequal steps", func(_ []SlotPush, f []SlotFinal) { f[1].Version = 4; f[1].Values[6], f[1].Values[7] = 0.5, 0.5 }, "different steps"},
		{"an acknowledged push not counted", func(_ []SlotPush, f []SlotFinal) { f[1].Values[2], f[1].Values[3] = 1, 0 }, "slot 1 step 1"},
		{"a step applied twice", func(_ []SlotPush, f []SlotFinal) { f[0].Values[0], f[0].Values[1] = 1, 1 }, "slot 0 step 0"},
		{"a failed push counted", func(_ []SlotPush, f []SlotFinal) { f[0].Values[2], f[0].Values[3] = 0.5, 0.5 }, "slot 0 step 1"},
		{"a step beyond the slot's", func(_ []SlotPush, f []SlotFinal) { f[0].Values[6] = 1 }, "a step beyond"},
		{"an acknowledged push of a step never completed", func(p []SlotPush, _ []SlotFinal) {
			p[12].Status, p[12].Node, p[12].Version = StatusOK, "n2", 4
		}, "ended at step 3"},
		{"an acknowledgement with the wrong version", func(p []SlotPush, _ []SlotFinal) { p[0].Version = 7 }, "with version 7, want 1"},
		{"a push whose element is another step's", func(p []SlotPush, _ []SlotFinal) { p[0].Step = 1 }, "not step 1's"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p, f := honestSync()
			tc.f(p, f)
			r := CheckSyncSteps(p, f, 2)
			mustVerdict(t, r, VerdictViolation)
			if !strings.Contains(strings.Join(r.Violations, "; "), tc.want) {
				t.Fatalf("violations %v do not say %q", r.Violations, tc.want)
			}
		})
	}
}
