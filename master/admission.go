package master

import (
	"fmt"

	"github.com/raftps/raftps/api/errs"
	pb "github.com/raftps/raftps/api/raftpspb"
	"github.com/raftps/raftps/gossip"
	"github.com/raftps/raftps/jobspec"
	"google.golang.org/protobuf/proto"
)

// ErrNoCapacity: a job does not fit in the memory the cluster's live
// pserver or trainer nodes announce (gossip.Meta.PServerBudget,
// TrainerBudget). SubmitJob answers it with ResourceExhausted
// (errs.ErrNoCapacity, api/rpctypes' table).
var ErrNoCapacity = errs.ErrNoCapacity

// admit checks a job against the budgets the live (alive or suspect)
// members announce. The rule:
//
//   - pservers: the job's slots must pack into the live pserver nodes'
//     budgets: Σ floor(budget / Slot) >= num_pservers, since a slot is
//     never split between nodes and each node's agent claims only the
//     slots that fit what its budget has left (pserver/agent's fits). This
//     implies State fits the budgets' sum and Slot the largest, which are
//     checked first for their clearer messages. A job with replicas R
//     needs R copies of each slot, on R distinct nodes: R <= the live
//     pserver nodes, and the budgets must hold R x num_pservers slots;
//   - trainers: its Trainer bytes must fit in the largest live trainer
//     node's budget (every trainer holds the whole dense model).
//
// A kind of node that no live member announces a budget for (none has
// joined yet, or an older version) is not checked: the agents still claim
// only what fits their budget when they come. The error wraps ErrNoCapacity
// and names the need and the capacity.
func (s *Service) admit(spec *pb.JobSpec) error {
	if s.members == nil {
		return nil
	}
	v, err := jobspec.ValidateSpec(spec)
	if err != nil {
		return nil // the FSM refuses it with InvalidArgument naming the field
	}
	need, err := jobspec.Need(v)
	if err != nil {
		return nil
	}
	var psSum, psMax, trMax uint64
	var psNodes, trNodes int
	var fit int64 // slots of the job's size the pserver budgets hold
	for _, m := range s.members.Members() {
		if m.Status != gossip.StatusAlive && m.Status != gossip.StatusSuspect {
			continue
		}
		if b := m.Meta.PServerBudget; b > 0 && m.Meta.HasRole(gossip.RolePServer) {
			psNodes++
			psSum += b
			psMax = max(psMax, b)
			if need.Slot > 0 {
				fit += int64(b / uint64(need.Slot))
			}
		}
		if b := m.Meta.TrainerBudget; b > 0 && m.Meta.HasRole(gossip.RoleTrainer) {
			trNodes++
			trMax = max(trMax, b)
		}
	}
	if psNodes > 0 {
		if uint64(need.State) > psSum {
			return fmt.Errorf("%w: job %q needs %d bytes of parameters and %s optimizer state; the %d live pserver nodes' budgets total %d bytes (--pserver-memory-budget)",
				ErrNoCapacity, spec.GetName(), need.State, spec.GetOptimizer().GetName(), psNodes, psSum)
		}
		if uint64(need.Slot) > psMax {
			return fmt.Errorf("%w: job %q needs %d bytes per slot (%d bytes over %d slots); the largest pserver budget is %d bytes (--pserver-memory-budget; or raise num_pservers)",
				ErrNoCapacity, spec.GetName(), need.Slot, need.State, spec.GetNumPservers(), psMax)
		}
		r := int64(max(v.GetReplicas(), 1))
		if r > int64(psNodes) {
			return fmt.Errorf("%w: job %q asks for %d replicas of each slot, on distinct nodes; only %d live pserver nodes announce a budget (lower replicas, or add pserver nodes)",
				ErrNoCapacity, spec.GetName(), r, psNodes)
		}
		if slots := int64(spec.GetNumPservers()) * r; need.Slot > 0 && fit < slots {
			return fmt.Errorf("%w: job %q has %d slots of %d bytes (%d replicas of %d slots); the %d live pserver nodes' budgets (%d bytes in all) hold only %d whole slots, since a slot is never split between nodes (--pserver-memory-budget; or change num_pservers or replicas)",
				ErrNoCapacity, spec.GetName(), slots, need.Slot, r, spec.GetNumPservers(), psNodes, psSum, fit)
		}
	}
	if trNodes > 0 && uint64(need.Trainer) > trMax {
		return fmt.Errorf("%w: job %q needs %d bytes per trainer (model and gradients); the largest of the %d live trainer nodes' budgets is %d bytes (--trainer-memory-budget)",
			ErrNoCapacity, spec.GetName(), need.Trainer, trNodes, trMax)
	}
	return nil
}

// CapacitySlotReplicas is JobSpec.replicas for a submission that leaves it
// 0 when the live pserver nodes have the capacity for it (defaultReplicas);
// jobspec.DefaultSlotReplicas (1) otherwise.
const CapacitySlotReplicas = 2

// defaultReplicas returns spec unchanged when it sets replicas (with
// replicas_default cleared: it is the master's to write), else a copy with
// replicas and replicas_default decided from the live members, once, at
// admission: CapacitySlotReplicas ("capacity for 2") when at least that
// many live (alive or suspect) pserver nodes exist and admit accepts the
// job with that many copies of each slot, else jobspec.DefaultSlotReplicas
// with the reason ("only 1 pserver node", "pserver budgets hold fewer
// than 2 copies of each slot"). The decision is stored in the job's spec by the FSM, so
// status, snapshots and restarts see the same choice; nothing recomputes it.
func (s *Service) defaultReplicas(spec *pb.JobSpec) *pb.JobSpec {
	if spec.GetReplicas() != 0 {
		if spec.GetReplicasDefault() == "" {
			return spec
		}
		out := proto.Clone(spec).(*pb.JobSpec)
		out.ReplicasDefault = ""
		return out
	}
	out := proto.Clone(spec).(*pb.JobSpec)
	out.Replicas, out.ReplicasDefault = jobspec.DefaultSlotReplicas, s.replicasShortfall(out)
	if out.ReplicasDefault == "" {
		out.Replicas, out.ReplicasDefault = CapacitySlotReplicas, fmt.Sprintf("capacity for %d", CapacitySlotReplicas)
	}
	return out
}

// replicasShortfall says why spec cannot get CapacitySlotReplicas copies of
// each slot, or "" when it can.
func (s *Service) replicasShortfall(spec *pb.JobSpec) string {
	var n int
	if s.members != nil {
		for _, m := range s.members.Members() {
			if (m.Status == gossip.StatusAlive || m.Status == gossip.StatusSuspect) && m.Meta.HasRole(gossip.RolePServer) {
				n++
			}
		}
	}
	switch {
	case n == 0:
		return "no live pserver node"
	case n == 1:
		return "only 1 pserver node"
	case n < CapacitySlotReplicas:
		return fmt.Sprintf("only %d pserver nodes", n)
	}
	try := proto.Clone(spec).(*pb.JobSpec)
	try.Replicas = CapacitySlotReplicas
	if err := s.admit(try); err != nil {
		return fmt.Sprintf("pserver budgets hold fewer than %d copies of each slot", CapacitySlotReplicas)
	}
	return ""
}
