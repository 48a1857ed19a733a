package agent

import (
	"context"
	"fmt"

	pb "github.com/raftps/raftps/api/raftpspb"
	"github.com/raftps/raftps/jobspec"
)

// TrainerBytes is what one trainer of spec holds: jobspec.Need's Trainer
// (the dense model and its gradients), the figure the master admits a job
// with. An invalid spec counts as 0.
func TrainerBytes(spec *pb.JobSpec) int64 {
	n, _ := jobspec.Need(spec)
	return n.Trainer
}

// eventRecorder is the optional part of Meta that records job events
// (the node's *raftstore.Store has it; roles.Jobs).
type eventRecorder interface {
	RecordJobEvent(ctx context.Context, ev *pb.JobEvent) (*pb.JobEvent, error)
}

// fits reports whether one more trainer of spec fits in what
// Config.MemoryBudget has left after this node's running trainers. When it
// does not, the first time for the job it records a TRAINER_NOT_STARTED
// event naming the figures (if Meta records events) and logs it.
func (a *Agent) fits(ctx context.Context, spec *pb.JobSpec) bool {
	if a.cfg.MemoryBudget == 0 {
		return true
	}
	need := TrainerBytes(spec)
	a.mu.Lock()
	var inUse int64
	for _, r := range a.running { // a stopped one until reconcile forgets it
		inUse += r.bytes
	}
	ok := uint64(inUse)+uint64(need) <= a.cfg.MemoryBudget
	first := false
	if ok {
		delete(a.refused, spec.Name)
	} else if !a.refused[spec.Name] {
		a.refused[spec.Name], first = true, true
	}
	a.mu.Unlock()
	if ok || !first {
		return ok
	}
	msg := fmt.Sprintf("no trainer started on %s: one needs %d bytes (model and gradients), and the node's trainer memory budget of %d bytes has %d left (%d in use by its other trainers)",
		a.cfg.NodeID, need, a.cfg.MemoryBudget, int64(a.cfg.MemoryBudget)-inUse, inUse)
	a.log.Warn("trainer not started: over the memory budget", "job", spec.Name, "need", need,
		"budget", a.cfg.MemoryBudget, "in_use", inUse)
	if r, ok := a.meta.(eventRecorder); ok {
		_, _ = r.RecordJobEvent(ctx, &pb.JobEvent{Type: pb.JobEvent_TRAINER_NOT_STARTED, Job: spec.Name, Message: msg})
	}
	return false
}
