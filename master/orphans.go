package master

import (
	"context"
	"fmt"

	pb "github.com/raftps/raftps/api/raftpspb"
	"github.com/raftps/raftps/gossip"
	"github.com/raftps/raftps/schema"
)

// failoverUnclaimed fails over job's replicated slots whose primary holds
// no claim and is not an alive gossip member: a primary gossip never
// reported gone, because this leader's gossip never knew it. That is the
// case after `--force-new-cluster` (the survivor's gossip starts without
// the dead nodes) or when a node died while no master watched; nodeGone
// never runs for it, so without this sweep the record would name a dead
// primary forever and no node would claim the slot. The claim's lease is
// the evidence: it lapsed (its TTL with no keepalive), so the primary is
// not serving with a live claim; failover then promotes an alive in-sync
// backup or deletes the record (the slot restores from its checkpoint). A
// primary that is only unknown to gossip but still keeps its claim alive
// is left alone.
func (m *Master) failoverUnclaimed(ctx context.Context, job string) {
	key, end := schema.PrefixRange(schema.ReplicaPrefix(job))
	recs, err := m.store.Range(ctx, &pb.RangeRequest{Serializable: true, Key: key, RangeEnd: end})
	if err != nil || len(recs.Kvs) == 0 {
		return
	}
	key, end = schema.PrefixRange(schema.SlotPrefix(job))
	claims, err := m.store.Range(ctx, &pb.RangeRequest{Serializable: true, Key: key, RangeEnd: end, KeysOnly: true})
	if err != nil {
		return
	}
	claimed := map[string]bool{}
	for _, kv := range claims.Kvs {
		claimed[string(kv.Key)] = true
	}
	alive := map[string]bool{}
	for _, mem := range m.members.Members() {
		alive[mem.Meta.ID] = mem.Status == gossip.StatusAlive
	}
	for _, kv := range recs.Kvs {
		_, _, id, ok := schema.ParseJobKey(string(kv.Key))
		if !ok {
			continue
		}
		rec, err := schema.ParseReplicaRecord(kv.Value, kv.ModRevision)
		if err != nil || alive[rec.Primary.Node] {
			continue
		}
		slot, err := schema.ParseSlot(id)
		if err != nil || claimed[schema.SlotKey(job, slot)] {
			continue
		}
		if h, ok := primaryOf(job, fmt.Sprint(slot), kv, rec.Primary.Node); ok {
			m.log.Info("replicated slot: its primary holds no claim and is not alive in gossip; failing over",
				"job", job, "slot", slot, "primary", rec.Primary.Node, "epoch", rec.Epoch)
			m.failover(ctx, rec.Primary.Node, []replicated{h})
		}
	}
}
