package jepsen

import (
	"math/rand/v2"
	"testing"
	"time"

	"google.golang.org/grpc/codes"

	pb "github.com/raftps/raftps/api/raftpspb"
)

// probeRun makes probes of one slot on node every 100 ms from..to (ms),
// answered with incarnation inc (0: refused with NotFound).
func probeRun(node string, inc int64, from, to int64) []ServeProbe {
	var out []ServeProbe
	for at := from; at <= to; at += 100 {
		p := ServeProbe{Node: node, Job: "j", Slot: 0, Call: at * ms, Return: (at + 5) * ms}
		if inc != 0 {
			p.OK, p.Incarnation = true, inc
		} else {
			p.Code = codes.NotFound.String()
		}
		out = append(out, p)
	}
	return out
}

// TestCheckSlotServing: an honest hand-over (n1 serves, is isolated at
// 10 s, fenced at 13.3 s; n2 claims at 16 s) passes with the fence time
// measured; n1 still serving when n2 starts (split brain) is an overlap
// violation; n1 fenced only after the TTL is a fence violation; an
// isolated node that never stops serving is a violation.
func TestCheckSlotServing(t *testing.T) {
	f := Fault{Type: "partition-follower-3ttl", Target: "n1", Start: 10000 * ms, End: 25000 * ms}
	b := SlotServingBounds{TTL: 5 * time.Second, ProbeSlack: 300 * time.Millisecond, Isolated: []Fault{f}}
	var honest []ServeProbe
	honest = append(honest, probeRun("n1", 1, 0, 13300)...)
	honest = append(honest, probeRun("n1", 0, 13400, 30000)...)
	honest = append(honest, probeRun("n2", 0, 0, 15900)...)
	honest = append(honest, probeRun("n2", 2, 16000, 30000)...)
	r := CheckSlotServing(honest, b)
	if r.Verdict != VerdictOK {
		t.Fatalf("honest hand-over: %s %v", r.Verdict, r.Violations)
	}
	if got := r.Stats["fence-ms-max"]; got < 3300 || got > 3500 {
		t.Errorf("fence-ms-max = %d, want about 3405", got)
	}
	if got := r.Stats["min-gap-ms"]; got < 2500 || got > 2800 {
		t.Errorf("min-gap-ms = %d, want about 2705", got)
	}

	var split []ServeProbe
	split = append(split, probeRun("n1", 1, 0, 13300)...)
	split = append(split, probeRun("n1", 0, 13400, 30000)...)
	split = append(split, probeRun("n2", 0, 0, 11900)...)
	split = append(split, probeRun("n2", 2, 12000, 30000)...)
	if r := CheckSlotServing(split, b); r.Verdict != VerdictViolation {
		t.Errorf("two servers for one slot 12.0-13.3 s: verdict %s, want violation", r.Verdict)
	}

	var late []ServeProbe
	late = append(late, probeRun("n1", 1, 0, 16000)...)
	late = append(late, probeRun("n1", 0, 16100, 30000)...)
	late = append(late, probeRun("n2", 2, 17000, 30000)...)
	if r := CheckSlotServing(late, b); r.Verdict != VerdictViolation {
		t.Errorf("fenced 6 s after the partition (TTL 5 s): verdict %s, want violation", r.Verdict)
	}

	// Last answered at 4.9 s but the first refusal only at 5.5 s: the
	// fence may have come after the TTL and the probes cannot tell.
	var unsure []ServeProbe
	unsure = append(unsure, probeRun("n1", 1, 0, 14900)...)
	unsure = append(unsure, probeRun("n1", 0, 15500, 30000)...)
	if r := CheckSlotServing(unsure, b); r.Verdict != VerdictViolation {
		t.Errorf("refused only 5.5 s after the partition: verdict %s, want violation", r.Verdict)
	}

	never := probeRun("n1", 1, 0, 30000)
	if r := CheckSlotServing(never, b); r.Verdict != VerdictViolation {
		t.Errorf("never fenced: verdict %s, want violation", r.Verdict)
	}

	// The same node re-claiming under a new incarnation after its fence
	// is two claims that do not overlap.
	var again []ServeProbe
	again = append(again, probeRun("n1", 1, 0, 13300)...)
	again = append(again, probeRun("n1", 0, 13400, 25900)...)
	again = append(again, probeRun("n1", 3, 26000, 30000)...)
	if r := CheckSlotServing(again, b); r.Verdict != VerdictOK || r.Stats["claims"] != 2 {
		t.Errorf("re-claim after heal: verdict %s, claims %d, %v", r.Verdict, r.Stats["claims"], r.Violations)
	}
}

// TestCheckSpecFuzz: refusals with InvalidArgument/ResourceExhausted and
// accepted jobs with tasks pass; an Internal error, a crashed node
// (Unavailable) or an accepted job without tasks (issue 12 item 2's
// RUNNING job with 0 tasks) is a violation.
func TestCheckSpecFuzz(t *testing.T) {
	good := []SpecOutcome{
		{Mutation: "a", Code: codes.InvalidArgument.String()},
		{Mutation: "b", Code: codes.ResourceExhausted.String()},
		{Mutation: "c", Code: codes.OK.String(), State: "JOB_RUNNING", Tasks: 30},
	}
	if r := CheckSpecFuzz(good); r.Verdict != VerdictOK || r.Stats["refused"] != 2 || r.Stats["accepted"] != 1 {
		t.Fatalf("good outcomes: %s %v %v", r.Verdict, r.Stats, r.Violations)
	}
	for _, bad := range []SpecOutcome{
		{Mutation: "overflow", Code: codes.OK.String(), State: "JOB_RUNNING", Tasks: 0},
		{Mutation: "panic", Code: codes.Internal.String()},
		{Mutation: "crash", Code: codes.Unavailable.String()},
	} {
		if r := CheckSpecFuzz(append(append([]SpecOutcome(nil), good...), bad)); r.Verdict != VerdictViolation {
			t.Errorf("%s: verdict %s, want violation", bad.Mutation, r.Verdict)
		}
	}
}

// TestCheckCompleteVersions: the race (keep_max 1, slot A ends at
// {v3, kept v1}, slot B at {v2}) is a violation; a history where every
// moment has a common version passes.
func TestCheckCompleteVersions(t *testing.T) {
	ok := []PointerRecord{
		{Slot: 0, Version: 1}, {Slot: 1, Version: 1},
		{Slot: 0, Version: 2, Kept: []int64{1}}, {Slot: 1, Version: 2, Kept: []int64{1}},
		{Slot: 0, Version: 3, Kept: []int64{2}}, {Slot: 1, Version: 3, Kept: []int64{2}},
	}
	if r := CheckCompleteVersions(ok, 2); r.Verdict != VerdictOK || r.Stats["moments"] != 5 {
		t.Fatalf("honest: %s %v %v", r.Verdict, r.Stats, r.Violations)
	}
	race := []PointerRecord{
		{Slot: 0, Version: 1}, {Slot: 1, Version: 1},
		{Slot: 1, Version: 2, Kept: []int64{1}},
		{Slot: 0, Version: 3, Kept: []int64{1}},
		{Slot: 1, Version: 2}, // B dropped v1 from a stale view of A's pointer
	}
	if r := CheckCompleteVersions(race, 2); r.Verdict != VerdictViolation || r.Stats["incomplete"] != 1 {
		t.Errorf("keep_max race: %s %v, want one incomplete moment", r.Verdict, r.Stats)
	}
	if r := CheckCompleteVersions(ok[:1], 2); r.Verdict != VerdictUnknown {
		t.Errorf("one slot only: %s, want unknown", r.Verdict)
	}
}

// TestSpecMutations: every mutation applies to a fresh copy (the base is
// not modified) and the random ones are reproducible from the seed.
func TestSpecMutations(t *testing.T) {
	base := &pb.JobSpec{Model: &pb.ModelSpec{Name: "mlp", Hidden: []int32{16}}, Dataset: &pb.DatasetSpec{Records: 100}, RecordsPerTask: 10}
	a := SpecMutations(rand.New(rand.NewPCG(7, 12)), 20)
	b := SpecMutations(rand.New(rand.NewPCG(7, 12)), 20)
	if len(a) != len(b) || len(a) < 40 {
		t.Fatalf("%d and %d mutations", len(a), len(b))
	}
	for i := range a {
		if a[i].Name != b[i].Name {
			t.Fatalf("mutation %d: %q vs %q from the same seed", i, a[i].Name, b[i].Name)
		}
		s := MutatedSpec(base, "x", a[i])
		if s.Name != "x" {
			t.Fatalf("name not set")
		}
	}
	if base.Dataset.Records != 100 || base.RecordsPerTask != 10 || base.Model.Hidden[0] != 16 || base.Name != "" {
		t.Fatalf("base spec modified: %v", base)
	}
}

// TestCheckNoTimeouts: requeues for other reasons pass; a timeout requeue
// or a failed task is a violation; no task done is unknown.
func TestCheckNoTimeouts(t *testing.T) {
	ev := func(typ pb.JobEvent_Type, msg string) *pb.JobEvent { return &pb.JobEvent{Type: typ, Message: msg} }
	ok := []*pb.JobEvent{ev(pb.JobEvent_TASK_DONE, ""), ev(pb.JobEvent_TASK_REQUEUED, "trainer left"), ev(pb.JobEvent_TASK_DONE, "")}
	if r := CheckNoTimeouts(ok); r.Verdict != VerdictOK || r.Stats["done"] != 2 {
		t.Fatalf("honest: %s %v", r.Verdict, r.Violations)
	}
	if r := CheckNoTimeouts(append(ok, ev(pb.JobEvent_TASK_REQUEUED, "timeout"))); r.Verdict != VerdictViolation {
		t.Errorf("timeout requeue: %s, want violation", r.Verdict)
	}
	if r := CheckNoTimeouts(append(ok, ev(pb.JobEvent_TASK_FAILED, "too many timeouts"))); r.Verdict != VerdictViolation {
		t.Errorf("failed task: %s, want violation", r.Verdict)
	}
	if r := CheckNoTimeouts(ok[1:2]); r.Verdict != VerdictUnknown {
		t.Errorf("nothing done: %s, want unknown", r.Verdict)
	}
}
