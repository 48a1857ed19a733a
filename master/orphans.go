package master

import (
	"context"
	"fmt"
	"time"

	pb "github.com/raftps/raftps/api/raftpspb"
	"github.com/raftps/raftps/schema"
)

// ClaimLapseGrace is how long a replicated slot's primary, alive in gossip,
// may hold no claim before the sweep promotes an alive in-sync backup
// (failoverUnclaimed). A claim is missing for a moment in normal work (a
// promoted node claims in its agent's next round, woken by its watch of
// the record; a loaded machine may delay it a few hundred ms); for
// longer, the primary lost its lease: it is cut off from the Raft leader,
// or paused, and has fenced the slot itself, so nobody serves it.
const ClaimLapseGrace = 2 * time.Second

// lapse is when the sweep first saw a replica record, at epoch, whose
// alive primary held no claim.
type lapse struct {
	epoch int64
	since time.Time
}

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
// is left alone. A primary alive in gossip whose claim has been missing
// for ClaimLapseGrace (the same epoch all along) is replaced by an alive
// in-sync backup, never by a restore: the record is kept when no backup
// is alive. Safety does not rest on the grace: the backups refuse the old
// epoch, so a primary that was only slow acknowledges nothing after it.
// Every replica key it looks at is marked in seen (see forgetLapses).
func (m *Master) failoverUnclaimed(ctx context.Context, job string, seen map[string]bool) {
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
	alive := aliveNodes(m.members)
	now := time.Now()
	for _, kv := range recs.Kvs {
		_, _, id, ok := schema.ParseJobKey(string(kv.Key))
		if !ok {
			continue
		}
		rec, err := schema.ParseReplicaRecord(kv.Value, kv.ModRevision)
		if err != nil {
			continue
		}
		slot, err := schema.ParseSlot(id)
		key := string(kv.Key)
		seen[key] = true
		if err != nil || claimed[schema.SlotKey(job, slot)] {
			delete(m.lapsed, key)
			continue
		}
		h, ok := primaryOf(job, fmt.Sprint(slot), kv, rec.Primary.Node)
		if !ok {
			continue
		}
		if !alive.has(rec.Primary.Node) {
			m.log.Info("replicated slot: its primary holds no claim and is not alive in gossip; failing over",
				"job", job, "slot", slot, "primary", rec.Primary.Node, "epoch", rec.Epoch)
			m.failover(ctx, rec.Primary.Node, []replicated{h})
			continue
		}
		l, seen := m.lapsed[key]
		if !seen || l.epoch != rec.Epoch {
			m.lapsed[key] = lapse{epoch: rec.Epoch, since: now}
			continue
		}
		if now.Sub(l.since) < ClaimLapseGrace {
			continue
		}
		if to, _ := promoteSlot(ctx, m.store, m.log, rec.Primary.Node, alive, h, false, false); to != "" {
			m.log.Info("replicated slot: its alive primary held no claim for the grace; backup promoted",
				"job", job, "slot", slot, "from", rec.Primary.Node, "to", to, "grace", ClaimLapseGrace)
			delete(m.lapsed, key)
		}
	}
}

// forgetLapses drops the lapse of every replica key the last sweep did not
// look at: its job ended or was deleted, or its record is gone. Without it
// m.lapsed grows by a key for every slot whose job ended while its primary
// held no claim. Forgetting a lapse only restarts its grace.
func (m *Master) forgetLapses(seen map[string]bool) {
	for key := range m.lapsed {
		if !seen[key] {
			delete(m.lapsed, key)
		}
	}
}
