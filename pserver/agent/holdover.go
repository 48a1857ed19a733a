package agent

import (
	"github.com/raftps/raftps/pserver"
	"github.com/raftps/raftps/pserver/replica"
)

// Holding a fenced primary's state over.
//
// A replicated slot's primary whose in-sync set is itself alone (its
// backups were dropped, or died, and re-replication has not joined a new
// one) holds the only copy of every update it acknowledged. When its
// lease is lost (fenceAll: CPU starvation past 2/3 of the TTL, or a
// partition from the Raft leader) the slot is fenced, and before
// holdOver the node then found the record naming it as primary of a slot
// it neither served nor backed up, deleted the record (handOffLostSlot:
// no live backup) and restored from the last checkpoint, losing every
// step since (a loaded `raftps demo` run: slot 1 went back from step
// 1247 to 1200, with R = 2).
//
// holdOver keeps a copy of the fenced slot (its blobs, push-id memory and
// incarnation, as re-replication's Install sends them) as a backup held
// by the node itself. While the record names this node as primary at the
// same epoch nobody else can have acknowledged an update of the slot
// (acknowledgements need this node, or a backup promoted by a Txn that
// changes the record), so the copy holds every acknowledged update, and
// the next round with a lease serves it through claimPromoted: no
// restore, no rollback. Any change of the record meanwhile (a promotion
// elsewhere, the job's end) releases the copy (reconcileBackups). A
// primary with an in-sync backup holds nothing over: the backup has every
// acknowledged update and handOffLostSlot promotes it.

// heldSlot is a fenced hosted slot and the Slot it served.
type heldSlot struct {
	h *hosted
	s *pserver.Slot
}

// holdOver keeps fenced, h's fenced slot, as a backup of this node's own
// if h was a replicated primary with no in-sync backup (see above). It
// copies the slot: call it without a.mu, and before the lease is renewed
// (fenceAll runs in keepAlive), so no reconciliation round decides the
// slot's fate without the copy.
func (a *Agent) holdOver(h *hosted, fenced *pserver.Slot) {
	h.repl.recMu.Lock()
	rec := h.repl.rec
	h.repl.recMu.Unlock()
	if len(rec.Backups) > 0 || rec.Primary.Node != a.cfg.NodeID {
		return
	}
	k, spec := h.key, h.spec
	snap, ids, inc := fenced.ReplicaSnapshot()
	blobs, err := pserver.EncodeSnapshot(snap)
	snap = nil // the blobs hold the state now
	if err != nil {
		a.log.Error("fenced primary's state not held over: the slot will be restored", "job", k.job, "slot", k.slot, "err", err)
		return
	}
	s, err := restoreReplica(spec, k.slot, blobs, ids, inc)
	if err != nil {
		a.log.Error("fenced primary's state not held over: the slot will be restored", "job", k.job, "slot", k.slot, "err", err)
		return
	}
	a.mu.Lock()
	if a.backups[k] != nil || a.hosted[k] != nil {
		a.mu.Unlock()
		s.Close()
		return
	}
	a.backups[k] = &heldBackup{spec: spec, b: replica.NewBackup(k.job, s, rec.Epoch), heldOver: true}
	a.mu.Unlock()
	a.log.Warn("fenced primary's state held over: served again once this node has a lease and the record still names it",
		"job", k.job, "slot", k.slot, "epoch", rec.Epoch, "version", s.Version(), "step", s.Step())
}
