package pserver

import (
	"context"
	"slices"
	"strings"

	pb "github.com/raftps/raftps/api/raftpspb"
	"github.com/raftps/raftps/pserver/wire"
)

// Hooks for replicated slots (DESIGN.md, "Replicated slots"; package
// pserver/replica): a primary's slot reports every update it applies
// (OnUpdate), and a backup's slot applies the same update through the same
// optimizer code (ApplyReplicated), so both reach the same bytes.

// OnUpdate sets fn to be called with every update the slot applies from
// now on (an async push, a released sync step), under the slot's write
// lock and in the order of the updates, so fn must not block (hand the
// request to a queue). The request carries job, slot, seq (the version
// after the update), step, incarnation, the gradient applied (copied: fn
// owns it), the learning rate scale and the push ids the update completes;
// epoch is left 0 for the replicator. nil removes the hook. A refused
// update (wire.ErrInvalid) is not reported.
func (s *Slot) OnUpdate(fn func(*pb.ReplicateRequest)) {
	s.mu.Lock()
	s.onUpdate = fn
	s.mu.Unlock()
}

// emitLocked reports an applied update to the OnUpdate hook, if any
// (write lock held, after version, step and push ids were updated).
func (s *Slot) emitLocked(items []gradItem, lrScale float64, ids []*pb.PushID) {
	if s.onUpdate == nil {
		return
	}
	ids = slices.DeleteFunc(ids, func(id *pb.PushID) bool { return id.GetPushId() == 0 })
	s.onUpdate(&pb.ReplicateRequest{
		Job:         s.spec.GetName(),
		Slot:        s.slot,
		Seq:         s.version,
		Step:        s.step,
		Incarnation: s.incarnation,
		Grads:       itemTensors(items),
		LrScale:     lrScale,
		PushIds:     ids,
	})
}

// AckGate is called before a push is acknowledged, with the slot's
// version that acknowledges it (the version its update produced, or, for
// a retry of an applied push id, the version it had produced); the push
// is answered only if it returns nil, else with its error. A replicated
// primary waits there until every in-sync backup acknowledged that
// version (package replica, pserver/agent).
type AckGate func(ctx context.Context, version int64) error

// SetAckGate sets the gate every push passes before it is acknowledged
// (async: after its update applied; sync: after its step was released),
// from now on; nil removes it. The fence and the deadline are checked
// again after the gate (Push), so a gate that waits past them does not
// make a push acknowledged.
func (s *Slot) SetAckGate(g AckGate) {
	if g == nil {
		s.ackGate.Store(nil)
		return
	}
	s.ackGate.Store(&g)
}

func (s *Slot) waitAckGate(ctx context.Context, version int64) error {
	if g := s.ackGate.Load(); g != nil {
		return (*g)(ctx, version)
	}
	return nil
}

// recordStepIDsLocked records the push ids of a released sync step with
// the slot's version, in trainer order (so a backup records them in the
// same order and forgets the same ones when full), and returns them.
func (s *Slot) recordStepIDsLocked(byTrainer map[string]uint64) []*pb.PushID {
	ids := make([]*pb.PushID, 0, len(byTrainer))
	for t, id := range byTrainer {
		if id != 0 {
			ids = append(ids, &pb.PushID{Trainer: t, PushId: id})
		}
	}
	slices.SortFunc(ids, func(a, b *pb.PushID) int { return strings.Compare(a.Trainer, b.Trainer) })
	s.recordIDsLocked(ids)
	return ids
}

func (s *Slot) recordIDsLocked(ids []*pb.PushID) {
	for _, id := range ids {
		s.pushIDs.record(id.GetTrainer(), id.GetPushId(), s.version)
	}
}

// itemTensors copies items into tensors in the layout PushRequest.grads
// uses (consecutive rows of one parameter share a tensor), in item order.
func itemTensors(items []gradItem) []*pb.Tensor {
	var ts []*pb.Tensor
	for _, it := range items {
		data := slices.Clone(wire.Float32Bytes(it.g))
		if it.row {
			if n := len(ts); n > 0 && len(ts[n-1].Rows) > 0 && ts[n-1].Name == it.p.Spec.GetName() {
				ts[n-1].Rows = append(ts[n-1].Rows, it.k.i)
				ts[n-1].Data = append(ts[n-1].Data, data...)
				continue
			}
			ts = append(ts, &pb.Tensor{Name: it.p.Spec.GetName(), Rows: []int64{it.k.i}, Data: data})
			continue
		}
		ts = append(ts, &pb.Tensor{Name: it.p.Spec.GetName(), Block: it.k.i, Data: data})
	}
	return ts
}

// ApplyReplicated applies an update its primary applied and reported
// (OnUpdate), through the same validation and optimizer code as Push, and
// sets the slot's version to req.seq, its step and incarnation to the
// request's, and records its push ids, so a retry of one of them is
// answered, not applied. It applies nothing that is not next: req.seq must
// be Version()+1 (else wire.ErrStale, FailedPrecondition; ordering and epochs
// are package replica's). A malformed or non-finite update is wire.ErrInvalid
// and leaves the slot unchanged. No staleness bound, membership or fence
// applies: the primary already decided.
func (s *Slot) ApplyReplicated(req *pb.ReplicateRequest) error {
	items, err := s.parseGrads(req.GetGrads())
	if err != nil {
		return err
	}
	scale := req.GetLrScale()
	if !(scale > 0) {
		return wire.Errorf(wire.ErrInvalid, "replicated update %d: learning rate scale %g is not positive", req.GetSeq(), scale)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if req.GetSeq() != s.version+1 {
		return wire.Errorf(wire.ErrStale, "replicated update %d: slot %d is at version %d; it applies only version %d next", req.GetSeq(), s.slot, s.version, s.version+1)
	}
	if err := s.applyLocked(items, scale); err != nil {
		return err
	}
	s.version, s.step, s.incarnation = req.GetSeq(), req.GetStep(), req.GetIncarnation()
	s.recordIDsLocked(req.GetPushIds())
	return nil
}
