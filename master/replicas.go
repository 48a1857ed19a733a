package master

import (
	"context"
	"fmt"
	"log/slog"

	pb "github.com/raftps/raftps/api/raftpspb"
	"github.com/raftps/raftps/gossip"
	"github.com/raftps/raftps/schema"
)

// replicated is a slot's replica record.
type replicated struct {
	job  string
	slot int32
	rec  schema.ReplicaRecord
}

// primaryOf parses kv, the replica record of (job, slot id), and reports
// whether node is its primary.
func primaryOf(job, id string, kv *pb.KeyValue, node string) (replicated, bool) {
	slot, err := schema.ParseSlot(id)
	if err != nil {
		return replicated{}, false
	}
	rec, err := schema.ParseReplicaRecord(kv.Value, kv.ModRevision)
	if err != nil || rec.Primary.Node != node {
		return replicated{}, false
	}
	return replicated{job: job, slot: slot, rec: rec}, true
}

// failover handles the replicated slots (issue 34; pserver/DESIGN.md,
// "Replicated slots") whose primary was node, which is gone (whether or
// not node still held the slot's claim: a promoted node that died before
// it claimed counts too): each slot's record is moved, in one Txn that
// compares its epoch (schema.EpochCompare), to an alive in-sync backup as
// the primary (ReplicaRecord.Promote); that node's agent then claims the
// slot once node's lease is revoked (nodeGone, right after) and serves
// the slot it holds, with no restore and no handover wait: the backups
// refuse the old epoch, so node cannot acknowledge anything, paused or
// partitioned however long. A record without an alive backup (an ISR of
// one) is deleted, epoch compared: the slot then goes the R = 1 way
// (handover wait, restore from the last checkpoint). A compare that fails
// (the record changed meanwhile: the primary dropped a backup) is left to
// the next call of nodeGone for node.
func (m *Master) failover(ctx context.Context, node string, slots []replicated) {
	if len(slots) == 0 {
		return
	}
	alive := aliveNodes(m.members)
	for _, h := range slots {
		m.failoverSlot(ctx, node, alive, h)
	}
}

// liveNodes maps each alive gossip member's id to the pserver instance it
// announces (gossip.Meta.PServerInstance; "" if none).
type liveNodes map[string]string

// aliveNodes returns members' alive ones.
func aliveNodes(members Members) liveNodes {
	alive := liveNodes{}
	for _, mem := range members.Members() {
		if mem.Status == gossip.StatusAlive {
			alive[mem.Meta.ID] = mem.Meta.PServerInstance
		}
	}
	return alive
}

// has reports whether node is alive.
func (l liveNodes) has(node string) bool {
	_, ok := l[node]
	return ok
}

// holds reports whether b, a record's backup entry, may hold the backup
// state: its node is alive and runs the process the record names (a node
// restarted since holds none: pserver/agent's backups.go). An entry or a
// member without an instance (an older version) is taken to.
func (l liveNodes) holds(b schema.ReplicaMember) bool {
	inst, ok := l[b.Node]
	return ok && b.MayRun(inst)
}

// failoverSlot promotes or deletes h's record (failover; promoteSlot
// with dropLast: a record with no alive backup is deleted).
func (m *Master) failoverSlot(ctx context.Context, node string, alive liveNodes, h replicated) {
	_, _ = promoteSlot(ctx, m.store, m.log, node, alive, h, true, false)
}

// promoteSlot moves h's record, whose primary is node, to an alive
// in-sync backup that still runs the process the record names
// (liveNodes.holds; ReplicaRecord.Promote) in one Txn that compares its
// epoch (schema.EpochCompare), and returns the promoted node and the
// record's new epoch ("" and 0: nothing written). With no alive backup,
// dropLast deletes the record (the slot then restores, R = 1) and
// otherwise nothing is written. freeClaim also deletes node's claim of
// the slot (schema.SlotKey) in the same Txn, its mod_revision compared:
// the promoted node's agent claims the slot at once instead of waiting
// for node's lease to end (a report confirmed by a probe: node may be
// alive, its agent then finds the claim lost and fences the slot). A
// compare that fails (the record changed since it was read: node dropped
// a backup just before it died) is tried again on the record read anew,
// up to three times, while node is still its primary.
func promoteSlot(ctx context.Context, store Store, log *slog.Logger, node string, alive liveNodes, h replicated, dropLast, freeClaim bool) (string, int64) {
	key := []byte(schema.ReplicaKey(h.job, h.slot))
	rec := h.rec
	for attempt := 0; attempt < 3; attempt++ {
		op := &pb.RequestOp{Request: &pb.RequestOp_RequestDeleteRange{RequestDeleteRange: &pb.DeleteRangeRequest{Key: key}}}
		to := ""
		for _, b := range rec.Backups {
			if !alive.holds(b) {
				continue // dead, or restarted since the record named it
			}
			if next, err := rec.Promote(b.Node); err == nil {
				to = b.Node
				op = &pb.RequestOp{Request: &pb.RequestOp_RequestPut{RequestPut: &pb.PutRequest{Key: key, Value: next.Marshal()}}}
				break
			}
		}
		if to == "" && !dropLast {
			return "", 0
		}
		cmps := []*pb.Compare{schema.EpochCompare(h.job, h.slot, rec.Epoch)}
		ops := []*pb.RequestOp{op}
		if freeClaim {
			c, o, err := claimOf(ctx, store, h.job, h.slot, node)
			if err != nil {
				log.Warn("replicated slot failover: read the claim", "job", h.job, "slot", h.slot, "err", err)
				return "", 0
			}
			cmps, ops = append(cmps, c...), append(ops, o...)
		}
		actx, cancel := context.WithTimeout(ctx, applyTimeout)
		out, err := store.Txn(actx, &pb.TxnRequest{
			Compare: cmps,
			Success: ops,
			Failure: []*pb.RequestOp{{Request: &pb.RequestOp_RequestRange{RequestRange: &pb.RangeRequest{Key: key}}}},
		})
		cancel()
		switch {
		case err != nil:
			log.Warn("replicated slot failover", "job", h.job, "slot", h.slot, "err", err)
			return "", 0
		case !out.GetSucceeded():
			kvs := out.GetResponses()[0].GetResponseRange().GetKvs()
			if len(kvs) == 0 {
				return "", 0 // deleted meanwhile
			}
			next, ok := primaryOf(h.job, fmt.Sprint(h.slot), kvs[0], node)
			if !ok {
				return "", 0 // another primary now
			}
			log.Info("replicated slot failover: the record changed meanwhile; again", "job", h.job, "slot", h.slot, "epoch", next.rec.Epoch)
			rec = next.rec
			continue
		case to == "":
			log.Warn("replicated slot: its primary is gone with no alive backup; record deleted, the slot restores from its checkpoint",
				"job", h.job, "slot", h.slot, "node", node, "epoch", rec.Epoch)
			return "", 0
		default:
			log.Info("replicated slot: backup promoted", "job", h.job, "slot", h.slot, "from", node, "to", to,
				"epoch", out.GetHeader().GetRevision())
			return to, out.GetHeader().GetRevision()
		}
	}
	return "", 0
}

// claimOf returns the compare and the delete of node's claim of (job,
// slot), if node holds it (none if the slot is unclaimed or another
// node's).
func claimOf(ctx context.Context, store Store, job string, slot int32, node string) ([]*pb.Compare, []*pb.RequestOp, error) {
	key := []byte(schema.SlotKey(job, slot))
	resp, err := store.Range(ctx, &pb.RangeRequest{Key: key})
	if err != nil {
		return nil, nil, err
	}
	if len(resp.Kvs) == 0 {
		return nil, nil, nil
	}
	if c, err := schema.ParseSlotRecord(resp.Kvs[0].Value); err != nil || c.Node != node {
		return nil, nil, nil
	}
	return []*pb.Compare{{Key: key, Target: pb.Compare_MOD, Result: pb.Compare_EQUAL, TargetUnion: &pb.Compare_ModRevision{ModRevision: resp.Kvs[0].ModRevision}}},
		[]*pb.RequestOp{{Request: &pb.RequestOp_RequestDeleteRange{RequestDeleteRange: &pb.DeleteRangeRequest{Key: key}}}}, nil
}
