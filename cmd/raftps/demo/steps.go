package demo

import (
	"fmt"

	pb "github.com/raftps/raftps/api/raftpspb"
)

// StepCheck is the demo's check that no sync step was lost or applied
// twice. A fault-free run's step count is not a constant to compare
// with: every node runs a trainer, a sync step is one update from the
// trainers registered at the time, and the demo kills nodes with their
// trainers (their tasks are requeued and redone), so the count depends
// on membership even without faults. What a fault-free run always
// satisfies, and the demo checks, is: every slot ends at the same step
// (each step applied once on every slot: a slot that lost a step or
// applied one twice would end apart from the others), and that step is
// the highest step the trainers were released on (Released: a slot
// past it applied a step no trainer was answered for; a slot short of
// it lost an acknowledged step).
type StepCheck struct {
	// Slots is each slot's final step: the steps of the pointers of the
	// newest checkpoint version (every slot writes one as the job ends).
	Slots []int64
	// Version is that checkpoint version.
	Version int64
	// Pservers is the job's slot count.
	Pservers int
	// Released is the highest step a trainer reported at the end of a
	// task in the last pass (PassMetric.Step).
	Released int64
	// Unchecked: the job writes no checkpoints, so the slots' final
	// steps are not known (Err is nil).
	Unchecked bool
}

// CheckSteps reads st's StepCheck.
func CheckSteps(st *pb.JobStatus) StepCheck {
	c := StepCheck{Pservers: int(st.GetSpec().GetNumPservers()), Unchecked: st.GetSpec().GetCheckpoint() == nil}
	for _, p := range st.GetCheckpoints() {
		c.Version = max(c.Version, p.Version)
	}
	for _, p := range st.GetCheckpoints() {
		if p.Version == c.Version && c.Version > 0 {
			c.Slots = append(c.Slots, p.Step)
		}
	}
	if m := st.GetMetrics(); len(m) > 0 {
		c.Released = m[len(m)-1].Step
	}
	return c
}

// Err is nil if every slot ended at the released step, else what
// differs.
func (c StepCheck) Err() error {
	if c.Unchecked {
		return nil
	}
	if len(c.Slots) != c.Pservers {
		return fmt.Errorf("%d of %d slots wrote the final checkpoint version %d: the slots ended at different steps", len(c.Slots), c.Pservers, c.Version)
	}
	for i, s := range c.Slots {
		if s != c.Released {
			return fmt.Errorf("a slot ended at step %d (pointer %d of version %d), the trainers were released up to step %d", s, i, c.Version, c.Released)
		}
	}
	return nil
}
