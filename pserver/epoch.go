package pserver

import "github.com/raftps/raftps/pserver/wire"

// SetEpoch sets the replica epoch the slot serves under as the primary of
// a replicated slot: the mod_revision of its record
// (/jobs/<job>/replicas/<slot>, schema.ReplicaRecord). The node sets it
// before it serves the slot and again after each change of the record it
// commits (a backup dropped or joined). 0 (the default): an unreplicated
// slot, whose requests' epochs are not checked.
func (s *Slot) SetEpoch(epoch int64) { s.epoch.Store(epoch) }

// Epoch returns the replica epoch the slot serves under (0: unreplicated).
func (s *Slot) Epoch() int64 { return s.epoch.Load() }

// Depose records that the slot's record moved past the epoch it serves
// under: newer is the epoch that deposed it (a backup's refusal names it),
// or 0 if unknown (then the served epoch + 1, a lower bound). From then on
// every request carrying an epoch is refused with ErrEpoch, before it
// reads or applies anything, so a trainer that resolved the slot is sent
// to resolve it again instead of being served by a primary that can no
// longer acknowledge (pserver/DESIGN.md, "Replicated slots"). Requests
// without an epoch are not refused by it (their pushes still cannot be
// acknowledged: the replication fence refuses them).
func (s *Slot) Depose(newer int64) {
	if newer <= s.epoch.Load() {
		newer = s.epoch.Load() + 1
	}
	for {
		old := s.deposedBy.Load()
		if old >= newer || s.deposedBy.CompareAndSwap(old, newer) {
			return
		}
	}
}

// checkEpoch returns ErrEpoch if a request that names replica epoch req
// may not be served here: the slot was deposed, or serves under another
// epoch. req 0 (a client older than the field, or a slot resolved without
// a record) is served, as etcd serves a Range without a revision at the
// latest one; so is any req on an unreplicated slot (its fence is its
// lease). Kafka's fetch requests check the leader epoch the same way
// (KIP-320: FENCED_LEADER_EPOCH when the client's is older,
// UNKNOWN_LEADER_EPOCH when it is newer; both make the client refresh its
// metadata).
func (s *Slot) checkEpoch(req int64) error {
	if req == 0 {
		return nil
	}
	if d := s.deposedBy.Load(); d != 0 {
		return wire.Errorf(wire.ErrEpoch, "slot %d: this primary of epoch %d was deposed (epoch %d or newer is current); the request's epoch is %d",
			s.slot, s.epoch.Load(), d, req)
	}
	if e := s.epoch.Load(); e != 0 && req != e {
		return wire.Errorf(wire.ErrEpoch, "slot %d: the request's epoch is %d, this primary serves epoch %d", s.slot, req, e)
	}
	return nil
}
