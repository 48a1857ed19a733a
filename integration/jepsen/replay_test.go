package jepsen

import (
	"flag"
	"testing"
	"time"
)

var flagReplay = flag.String("jepsen.replay", "", "history.jsonl of an earlier run to re-check (registers and leases)")

// TestReplay re-checks a recorded history: go test ./integration/jepsen -run
// TestReplay -jepsen.replay integration/results/<ts>/history.jsonl
func TestReplay(t *testing.T) {
	if *flagReplay == "" {
		t.Skip("jepsen: no -jepsen.replay history given; skipped")
	}
	recs, err := LoadHistory(*flagReplay)
	if err != nil {
		t.Fatal(err)
	}
	var (
		ops    []RegisterOp
		leases []LeaseRecord
		faults []Fault
	)
	for _, r := range recs {
		switch {
		case r.Register != nil:
			ops = append(ops, *r.Register)
		case r.Lease != nil:
			leases = append(leases, *r.Lease)
		case r.Fault != nil:
			faults = append(faults, *r.Fault)
		}
	}
	reg, _ := CheckRegisters(ops, time.Minute)
	terms := TermChanges(ops, leases)
	lease := CheckLeases(leases, LeaseBounds{ElectionTimeout: 500 * time.Millisecond, Slack: 2 * time.Second,
		Margin: 100 * time.Millisecond, Faults: append(faults, terms...)})
	for _, r := range []Result{reg, lease} {
		t.Logf("%s: %s %v %v %v", r.Checker, r.Verdict, r.Stats, r.Violations, r.Notes)
		if r.Verdict == VerdictViolation {
			t.Errorf("%s: violation", r.Checker)
		}
	}
}
