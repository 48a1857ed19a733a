package agent

import (
	"context"
	"fmt"

	pb "github.com/raftps/raftps/api/raftpspb"
	"github.com/raftps/raftps/jobspec"
)

// SlotBytes is what one slot of spec holds in parameters and optimizer
// state: jobspec.Need's Slot, the share the master admits a job with. An
// invalid spec (which the FSM never accepts) counts as 0.
func SlotBytes(spec *pb.JobSpec) int64 {
	n, _ := jobspec.Need(spec)
	return n.Slot
}

// inUseLocked is the bytes of the slots this node hosts. Called with a.mu.
func (a *Agent) inUseLocked() int64 {
	var n int64
	for _, h := range a.hosted {
		n += SlotBytes(h.spec)
	}
	for _, b := range a.backups {
		n += SlotBytes(b.spec)
	}
	return n
}

// fits reports whether slot i of spec fits in what Config.MemoryBudget
// has left. When it does not, the first time for that slot it records a
// SLOT_NOT_CLAIMED event on the job naming the figures (so `raftps job
// status`'s event stream says why no node serves it), and logs it.
func (a *Agent) fits(ctx context.Context, spec *pb.JobSpec, i int32) bool {
	if a.cfg.MemoryBudget == 0 {
		return true
	}
	need := SlotBytes(spec)
	k := slotKey{spec.Name, i}
	a.mu.Lock()
	inUse := a.inUseLocked()
	ok := uint64(inUse)+uint64(need) <= a.cfg.MemoryBudget
	first := false
	if ok {
		delete(a.refused, k)
	} else if !a.refused[k] {
		a.refused[k], first = true, true
	}
	a.mu.Unlock()
	if ok || !first {
		return ok
	}
	msg := fmt.Sprintf("slot %d not claimed by %s: it needs %d bytes of parameters and optimizer state, and the node's pserver memory budget of %d bytes has %d left (%d in use by its other slots)",
		i, a.cfg.NodeID, need, a.cfg.MemoryBudget, int64(a.cfg.MemoryBudget)-inUse, inUse)
	a.log.Warn("slot not claimed: over the memory budget", "job", spec.Name, "slot", i, "need", need,
		"budget", a.cfg.MemoryBudget, "in_use", inUse)
	_, _ = a.meta.RecordJobEvent(ctx, &pb.JobEvent{Type: pb.JobEvent_SLOT_NOT_CLAIMED, Job: spec.Name, Message: msg})
	return false
}
