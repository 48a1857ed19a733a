package pserver

import (
	"fmt"
	"slices"
	"strings"

	pb "github.com/raftps/raftps/api/raftpspb"
	"github.com/raftps/raftps/pserver/wire"
)

// State transfer to a new backup (re-replication; DESIGN.md,
// "Re-replication"): the primary freezes a copy-on-write snapshot with the
// slot's push-id memory at the same version (ReplicaSnapshot), the new
// backup restores the vshard blobs (RestoreSlot) and then the push ids and
// incarnation (InstallState), and applies the updates after the version
// through ApplyReplicated.

// ReplicaSnapshot is Snapshot (copy-on-write: updates wait only for the
// freeze) plus the slot's push-id memory and incarnation, taken under the
// same lock, so all are of snap.Version.
func (s *Slot) ReplicaSnapshot() (*SlotSnapshot, *pb.PushIDState, int64) {
	var ids *pb.PushIDState
	var inc int64
	snap := s.snapshot(func() { ids, inc = s.pushIDs.export(), s.incarnation })
	return snap, ids, inc
}

// InstallState sets the push-id memory and the incarnation of a slot just
// restored from a ReplicaSnapshot's blobs (before it is served or
// replicated to), so a retry of a push the primary applied is answered,
// not applied again. A ring of the wrong size is wire.ErrInvalid.
func (s *Slot) InstallState(ids *pb.PushIDState, incarnation int64) error {
	p := pushIDs{clock: ids.GetClock(), by: map[string]*pushIDRing{}}
	for _, r := range ids.GetRings() {
		if len(r.GetIds()) != pushIDWindow || len(r.GetVersions()) != pushIDWindow || r.GetNext() < 0 || r.GetNext() >= pushIDWindow {
			return wire.Errorf(wire.ErrInvalid, "push-id ring of trainer %q: %d ids, %d versions, next %d; want %d, %d, [0, %d)",
				r.GetTrainer(), len(r.GetIds()), len(r.GetVersions()), r.GetNext(), pushIDWindow, pushIDWindow, pushIDWindow)
		}
		ring := &pushIDRing{next: int(r.GetNext()), used: r.GetUsed()}
		copy(ring.ids[:], r.GetIds())
		copy(ring.versions[:], r.GetVersions())
		p.by[r.GetTrainer()] = ring
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.pushIDs, s.incarnation = p, incarnation
	return nil
}

// export copies the push-id memory, rings in trainer order.
func (p *pushIDs) export() *pb.PushIDState {
	out := &pb.PushIDState{Clock: p.clock}
	for t, r := range p.by {
		out.Rings = append(out.Rings, &pb.PushIDRing{Trainer: t, Ids: slices.Clone(r.ids[:]), Versions: slices.Clone(r.versions[:]),
			Next: int32(r.next), Used: r.used})
	}
	slices.SortFunc(out.Rings, func(a, b *pb.PushIDRing) int { return strings.Compare(a.Trainer, b.Trainer) })
	return out
}

// EncodeSnapshot encodes every vshard of snap (EncodeVShard), by vshard.
func EncodeSnapshot(snap *SlotSnapshot) (map[int32][]byte, error) {
	out := make(map[int32][]byte, len(snap.VShards))
	for v := range snap.VShards {
		b, err := EncodeVShard(snap, v)
		if err != nil {
			return nil, fmt.Errorf("pserver: encode snapshot: %w", err)
		}
		out[v] = b
	}
	return out, nil
}
