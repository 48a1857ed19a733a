package jepsen

import (
	"fmt"
	"math"
	"strings"
)

// The replicated-slot checkers (slots.go): every acknowledged push
// applied exactly once (CheckSlotPushes), and sync steps equal across
// slots and equal to a replay (CheckSyncSteps).

// CheckSlotPushes checks a replicated-slot job's pushes against its final
// state (one SlotFinal per slot), element by element: the element of an
// acknowledged push must be exactly 1 (applied once: 0 is a lost
// acknowledged push, 2 or more a doubled one), that of an indeterminate
// push 0 or 1, and every element no push used 0; each value must be a
// whole number. A lost or doubled push that a node other than the slot's
// final primary acknowledged is named as acknowledged by a deposed
// primary. Stats: "ok",
// "info", "info-applied" (indeterminate pushes that took effect),
// "acked-by-deposed" (acknowledged pushes answered by a primary that was
// later replaced), "slots".
func CheckSlotPushes(pushes []SlotPush, finals []SlotFinal) Result {
	r := newResult("slot-pushes")
	bySlot := map[int32]*SlotFinal{}
	for i := range finals {
		bySlot[finals[i].Slot] = &finals[i]
	}
	r.Stats["slots"] = len(finals)
	used := map[int32]map[int]bool{}
	for _, p := range pushes {
		f := bySlot[p.Slot]
		if f == nil || p.Elem < 0 || p.Elem >= len(f.Values) {
			r.violate("push %d of %s (slot %d element %d, %s): the slot's final state has no such element", p.PushID, p.Client, p.Slot, p.Elem, p.Status)
			continue
		}
		if used[p.Slot] == nil {
			used[p.Slot] = map[int]bool{}
		}
		if used[p.Slot][p.Elem] {
			r.violate("slot %d element %d pushed twice in the history (push %d): the workload reuses an element", p.Slot, p.Elem, p.PushID)
		}
		used[p.Slot][p.Elem] = true
		v := f.Values[p.Elem]
		n, whole := appliedTimes(v)
		who := fmt.Sprintf(" by %s at epoch %d (the slot's final epoch is %d)", p.Node, p.Epoch, f.Epoch)
		if p.Status == StatusOK && p.Node != f.Primary {
			r.Stats["acked-by-deposed"]++
			who = fmt.Sprintf(" by a deposed primary (%s at epoch %d; the final primary is %s at epoch %d)", p.Node, p.Epoch, f.Primary, f.Epoch)
		}
		switch {
		case !whole:
			r.violate("slot %d element %d (push %d, %s): final value %v is not a whole number of pushes", p.Slot, p.Elem, p.PushID, p.Status, v)
		case p.Status == StatusOK:
			r.Stats["ok"]++
			if n == 0 {
				r.violate("slot %d: push %d of %s acknowledged%s at %s (version %d) is lost: element %d is 0", p.Slot, p.PushID, p.Client, who, fmtNs(p.Return), p.Version, p.Elem)
			} else if n > 1 {
				r.violate("slot %d: push %d of %s acknowledged%s at %s (version %d) was applied %d times", p.Slot, p.PushID, p.Client, who, fmtNs(p.Return), p.Version, n)
			}
		case p.Status == StatusInfo:
			r.Stats["info"]++
			if n == 1 {
				r.Stats["info-applied"]++
			} else if n > 1 {
				r.violate("slot %d: indeterminate push %d of %s was applied %d times", p.Slot, p.PushID, p.Client, n)
			}
		default:
			if n != 0 {
				r.violate("slot %d: failed push %d of %s was applied %d times", p.Slot, p.PushID, p.Client, n)
			}
		}
	}
	for _, f := range finals {
		for j, v := range f.Values {
			if used[f.Slot][j] {
				continue
			}
			if v != 0 {
				r.violate("slot %d element %d is %v, but no push used it", f.Slot, j, v)
			}
		}
	}
	if r.Stats["ok"] == 0 {
		r.Verdict = VerdictUnknown
		r.Notes = append(r.Notes, "no push acknowledged")
	}
	return r
}

// appliedTimes is the number of pushes a final element value v stands for
// (whole is false if v is not a non-negative whole number).
func appliedTimes(v float32) (n int, whole bool) {
	f := float64(v)
	if f < 0 || f != math.Trunc(f) || f > 1<<24 {
		return 0, false
	}
	return int(f), true
}

// CheckSyncSteps checks a sync replicated-slot job (RunSyncSteps with
// trainers trainers) against its final state: every slot ended at the
// same step N, and each slot's parameters equal a fault-free replay of
// its steps 0..N-1 from the history: step s averages the pushes counted
// in it, which are its acknowledged pushes plus some of its
// indeterminate ones (any subset; a failed push is counted nowhere), so
// element s·T+t is 1/k for each of the k counted trainers t and 0 for the
// others; elements of steps N and later are 0. An acknowledged push of a
// step the slot never completed, or answered with a version other than
// its step + 1, is a violation too. Stats: "ok", "info", "fail",
// "steps" (slot steps replayed), "acked-by-deposed".
func CheckSyncSteps(pushes []SlotPush, finals []SlotFinal, trainers int) Result {
	r := newResult("sync-steps")
	if len(finals) == 0 {
		r.Verdict = VerdictUnknown
		r.Notes = append(r.Notes, "no final state")
		return r
	}
	for _, f := range finals[1:] {
		if f.Version != finals[0].Version {
			var desc []string
			for _, g := range finals {
				desc = append(desc, fmt.Sprintf("slot %d at step %d", g.Slot, g.Version))
			}
			r.violate("the slots ended at different steps: %s", strings.Join(desc, ", "))
			break
		}
	}
	type sk struct {
		slot int32
		step int64
	}
	acked, indet := map[sk][]int{}, map[sk][]int{}
	bySlot := map[int32]SlotFinal{}
	for _, f := range finals {
		bySlot[f.Slot] = f
	}
	for _, p := range pushes {
		t, step := p.Elem%trainers, int64(p.Elem/trainers)
		if step != p.Step {
			r.violate("push %d of %s: element %d is not step %d's", p.PushID, p.Client, p.Elem, p.Step)
			continue
		}
		f, ok := bySlot[p.Slot]
		if !ok {
			r.violate("push %d of %s: slot %d has no final state", p.PushID, p.Client, p.Slot)
			continue
		}
		k := sk{p.Slot, step}
		switch p.Status {
		case StatusOK:
			r.Stats["ok"]++
			if p.Node != f.Primary {
				r.Stats["acked-by-deposed"]++
			}
			acked[k] = append(acked[k], t)
			if step >= f.Version {
				r.violate("slot %d: push %d of %s for step %d acknowledged by %s at epoch %d, but the slot ended at step %d", p.Slot, p.PushID, p.Client, step, p.Node, p.Epoch, f.Version)
			} else if p.Version != step+1 {
				r.violate("slot %d: push %d of %s for step %d acknowledged by %s with version %d, want %d", p.Slot, p.PushID, p.Client, step, p.Node, p.Version, step+1)
			}
		case StatusInfo:
			r.Stats["info"]++
			indet[k] = append(indet[k], t)
		default:
			r.Stats["fail"]++
		}
	}
	for _, f := range finals {
		for s := int64(0); s*int64(trainers) < int64(len(f.Values)); s++ {
			got := f.Values[s*int64(trainers) : min((s+1)*int64(trainers), int64(len(f.Values)))]
			if s >= f.Version {
				for t, v := range got {
					if v != 0 {
						r.violate("slot %d at step %d: element of step %d trainer %d is %v, want 0 (a step beyond the slot's)", f.Slot, f.Version, s, t, v)
					}
				}
				continue
			}
			r.Stats["steps"]++
			k := sk{f.Slot, s}
			if !replayMatches(got, acked[k], indet[k]) {
				r.violate("slot %d step %d: parameters %v, but no replay of its acknowledged pushes (trainers %v) and indeterminate ones (trainers %v) gives them",
					f.Slot, s, got, acked[k], indet[k])
			}
		}
	}
	if r.Stats["ok"] == 0 {
		r.Verdict = VerdictUnknown
		r.Notes = append(r.Notes, "no push acknowledged")
	}
	return r
}

// replayMatches reports whether got (one step's elements, one per
// trainer) is the step's update when the trainers acked and some subset
// of indet were counted: 1/k on each of the k counted, 0 elsewhere.
func replayMatches(got []float32, acked, indet []int) bool {
	for mask := 0; mask < 1<<len(indet); mask++ {
		counted := map[int]bool{}
		for _, t := range acked {
			counted[t] = true
		}
		for i, t := range indet {
			if mask&(1<<i) != 0 {
				counted[t] = true
			}
		}
		if len(counted) == 0 {
			continue // a step completes with at least one push
		}
		want := float32(1 / float64(len(counted)))
		ok := true
		for t, v := range got {
			if (counted[t] && v != want) || (!counted[t] && v != 0) {
				ok = false
				break
			}
		}
		if ok {
			return true
		}
	}
	return false
}
