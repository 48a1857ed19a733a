package master

import (
	"context"

	pb "github.com/raftps/raftps/api/raftpspb"
	"github.com/raftps/raftps/gossip"
	"github.com/raftps/raftps/schema"
)

// failover handles the replicated slots (issue 34; pserver/DESIGN.md,
// "Replicated slots") whose primary was node, which is gone: each slot's
// record is moved, in one Txn that compares its epoch
// (schema.EpochCompare), to an alive in-sync backup as the primary
// (ReplicaRecord.Promote); that node's agent then claims the slot once
// node's lease is revoked (nodeGone, right after) and serves the slot it
// holds, with no restore and no handover wait: the backups refuse the old
// epoch, so node cannot acknowledge anything, paused or partitioned
// however long. A record without an alive backup (an ISR of one) is
// deleted, epoch compared: the slot then goes the R = 1 way (handover
// wait, restore from the last checkpoint). A compare that fails (the
// record changed meanwhile: the primary dropped a backup) is left to the
// next round of nodeGone's callers.
func (m *Master) failover(ctx context.Context, node string, slots []heldSlot) {
	alive := map[string]bool{}
	for _, mem := range m.members.Members() {
		alive[mem.Meta.ID] = mem.Status == gossip.StatusAlive
	}
	for _, h := range slots {
		key := []byte(schema.ReplicaKey(h.job, h.slot))
		r, err := m.store.Range(ctx, &pb.RangeRequest{Key: key})
		if err != nil || len(r.Kvs) == 0 {
			continue
		}
		rec, err := schema.ParseReplicaRecord(r.Kvs[0].Value, r.Kvs[0].ModRevision)
		if err != nil || rec.Primary.Node != node {
			continue
		}
		op := &pb.RequestOp{Request: &pb.RequestOp_RequestDeleteRange{RequestDeleteRange: &pb.DeleteRangeRequest{Key: key}}}
		to := ""
		for _, b := range rec.Backups {
			if alive[b.Node] {
				next, err := rec.Promote(b.Node)
				if err != nil {
					continue
				}
				to = b.Node
				op = &pb.RequestOp{Request: &pb.RequestOp_RequestPut{RequestPut: &pb.PutRequest{Key: key, Value: next.Marshal()}}}
				break
			}
		}
		actx, cancel := context.WithTimeout(ctx, applyTimeout)
		out, err := m.store.Txn(actx, &pb.TxnRequest{
			Compare: []*pb.Compare{schema.EpochCompare(h.job, h.slot, rec.Epoch)},
			Success: []*pb.RequestOp{op},
		})
		cancel()
		switch {
		case err != nil:
			m.log.Warn("replicated slot failover", "job", h.job, "slot", h.slot, "err", err)
		case !out.GetSucceeded():
			m.log.Info("replicated slot failover: the record changed meanwhile", "job", h.job, "slot", h.slot, "epoch", rec.Epoch)
		case to == "":
			m.log.Warn("replicated slot: its primary is gone with no alive backup; record deleted, the slot restores from its checkpoint",
				"job", h.job, "slot", h.slot, "node", node, "epoch", rec.Epoch)
		default:
			m.log.Info("replicated slot: backup promoted", "job", h.job, "slot", h.slot, "from", node, "to", to,
				"epoch", out.GetHeader().GetRevision())
		}
	}
}
