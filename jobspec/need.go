package jobspec

import pb "github.com/raftps/raftps/api/raftpspb"

// Bytes is what a job asks of the nodes' memory budgets, in bytes.
type Bytes struct {
	// State is the parameters and optimizer state over all slots
	// (StateBytes).
	State int64
	// Slot is one slot's share: State / num_pservers, rounded up (blocks
	// and rows are spread over the slots' virtual shards, so a slot holds
	// about that); 0 when num_pservers < 1.
	Slot int64
	// Trainer is one trainer's: the dense model and its gradients, two
	// float32 per element (StateBytes without the optimizer state, twice;
	// an upper bound for embeddings, which trainers hold only in part); 0
	// for an unknown optimizer.
	Trainer int64
}

// Need returns the bytes spec needs: the one division of a job's state
// that the master admits a job with and the pserver and trainer agents
// budget their slots and trainers with. An error wraps errs.ErrInvalid
// naming the spec's field whose arithmetic overflows (StateBytes's).
func Need(spec *pb.JobSpec) (Bytes, error) {
	state, err := StateBytes(spec)
	if err != nil {
		return Bytes{}, err
	}
	n := Bytes{State: state}
	if p := int64(spec.GetNumPservers()); p > 0 {
		n.Slot = (state + p - 1) / p
	}
	if f := OptimizerStateFactor(spec.GetOptimizer().GetName()); f > 0 {
		n.Trainer = state / f * 2
	}
	return n, nil
}
