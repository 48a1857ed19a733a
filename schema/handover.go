package schema

import (
	"encoding/json"
	"fmt"
	"time"
)

// The slot handover contract between the pserver agents (pserver/agent)
// and the master (master.nodeGone).
//
// A pserver holder fences every slot it serves no later than
// PServerFence(ttl) after it sent the last renewal of its lease that
// succeeded, the grant or a keepalive (its watchdog, measured on its own
// monotonic clock, and every request's check of the same deadline). When
// the master revokes a holder's lease early (gossip declared the node
// dead; a partitioned holder cannot hear it), the leader's record of when
// the lease's last renewal arrived (raftstore.Store.LeaseLastKeepAlive,
// read after the revoke applied) bounds the send of the holder's last
// successful one:
//   - a keepalive is sent before it arrives, and the leader records the
//     arrival before it looks the lease up, so every keepalive it accepted
//     before the revoke applied is in the record;
//   - a grant is sent before it applies; the leader records its apply as
//     an arrival if it has established its term by then (the FSM notifies
//     on the apply goroutine, before the revoke, a later entry, applies),
//     and otherwise the grant applied before the leader established
//     itself, so the leadership start below bounds it. Without that, a
//     holder revoked before its first keepalive would get a record counted
//     from the leadership start, before its grant, and the next claimant
//     would serve while the holder still may (issue 33);
//   - the record holds only arrivals since this leader established its
//     term; a pserver agent's keepalives go through its own node's store
//     to the leader that node's Raft follows, which only moves to later
//     terms, so once one of its keepalives
//     reached this leader, none it sends later reaches an older one, and
//     any sent earlier was sent before the recorded arrival. A later
//     leader has the revoke applied before it accepts keepalives.
//
// HandoverWait turns that age into a wait for the next claimant, written
// as a HandoverRecord. When the leader has no record (it took over since
// the holder's last keepalive), the time since it established its
// leadership (raftstore.Store.LeaderSince) takes the age's place
// (HandoverRecord.FromLeaderStart): a leader acknowledges a keepalive only
// after a quorum confirmed its leadership in a round that started after
// the keepalive arrived (raftstore's LeaseKeepAliveLocal, etcd's fix for
// etcd-io/etcd#15247, where a leader whose Raft loop is stalled took
// keepalives while another was elected), and a server that voted for a
// later term refuses an older leader, so every keepalive an earlier leader
// acknowledged arrived before a quorum voted for the current term, before
// the current leader established itself (up to hashicorp/raft's limit
// documented at raftstore's leaderCheck: an acknowledgment in flight for
// longer than HeartbeatTimeout). Only when the master's server
// does not lead is no record written (or a claim beat the record's Txn,
// or an operator revoked the lease); the claimant then waits
// HandoverWait(ttl, 0) after its claim, where ttl is the holder's lease
// TTL, which the holder's restore record carries (RestoreRecord.lease_ttl;
// TTLs are per node): the holder's last renewal was sent before its lease
// ended, hence before the claim. A claimant uses a record only if it
// describes the holder that wrote the slot's restore record (same
// incarnation): a holder writes that record, in a Txn that requires its
// claim, only after it waited out every holder before it, right before it
// serves, so that holder is the only earlier one that may still serve.
//
// Upgrade note: both bounds assume holders of this release (the watchdog
// at PServerFence after the send; earlier agents fenced up to a whole TTL
// after their last keepalive) and the leader-start bound assumes every
// server that led in an earlier term confirmed leadership before
// acknowledging keepalives (this release; earlier servers did not). While
// a cluster runs older nodes, a record may give a claimant less than such
// a holder's fence: upgrade every node before relying on short handovers
// (a claimant that finds no record, or a restore record without
// lease_ttl, waits a whole TTL of its own, as earlier releases did).
//
// Clock rates: the holder, the leader and the claimant each measure on
// their own monotonic clock, and HandoverWait allows each to run fast or
// slow by a factor of up to 1+HandoverDrift (5%, a hundred times NTP's
// 500 ppm slew limit). The holder's fence does not wait for its timers:
// every request and every reply checks the same deadline on the holder's
// monotonic clock (pserver.Deadline), so a holder paused past it, or whose
// watchdog fires late, answers nothing after it, and an update that
// finishes after it is not acknowledged. HandoverMargin (500 ms) is kept
// on top for what no clock check covers: a reply written just before the
// deadline and still in flight.
const (
	HandoverDrift  = 0.05
	HandoverMargin = 500 * time.Millisecond
)

// PServerFence is how long after sending its last successful keepalive a
// pserver holder with a lease of ttl seconds fences its slots: 2/3 of the
// TTL.
func PServerFence(ttl int64) time.Duration {
	return time.Duration(ttl) * time.Second * 2 / 3
}

// HandoverWait is how long a claimant must wait, on its own clock, from
// the moment it reads a HandoverRecord, before it serves the slot: the
// holder's fence, PServerFence(ttl), stretched for a slow holder clock,
// less the time the leader saw pass since the holder's last keepalive
// arrived (shrunk for a fast leader clock), plus HandoverMargin, all
// stretched for a fast claimant clock. Never negative.
func HandoverWait(ttl int64, sinceKeepAlive time.Duration) time.Duration {
	f := 1 + HandoverDrift
	w := float64(PServerFence(ttl))*f - float64(max(sinceKeepAlive, 0))/f + float64(HandoverMargin)
	return max(time.Duration(w*f), 0)
}

// HandoverRecord is the JSON value of HandoverKey: the master's record of
// revoking a slot holder's lease early, so that the next claimant waits
// out exactly the holder's fence instead of a whole lease TTL.
//
// The master writes it only when the leader knows the age of the lease's
// last keepalive (it arrived at this leader in its current term), after
// the revoke applied, in a Txn that requires the slot to be unclaimed and
// the previous HandoverKey value unchanged. A claimant uses it only if it
// consumes it: in one Txn that checks its own claim is still held, it reads
// the record and sets ConsumedBy to its incarnation; the record then gives
// no other claimant a shorter wait. Every claimant consumes (or marks the
// key) before serving, so a record written for one holder is never applied
// to a later one.
type HandoverRecord struct {
	// Node whose lease was revoked, the Incarnation (create revision) of its
	// claim of the slot and the Lease.
	Node        string `json:"node"`
	Incarnation int64  `json:"incarnation"`
	Lease       int64  `json:"lease"`
	// RevokedRevision is the store revision of the revoke.
	RevokedRevision int64 `json:"revoked_revision"`
	// SinceKeepAliveNanos is how long before the record was written the
	// holder's last keepalive arrived at the leader (ns).
	SinceKeepAliveNanos int64 `json:"since_keepalive_nanos"`
	// FromLeaderStart: the leader saw no keepalive of the lease in its
	// term, and SinceKeepAliveNanos is the time since it established its
	// leadership, which every keepalive an earlier leader acknowledged
	// arrived before (raftstore.Store.LeaderSince).
	FromLeaderStart bool `json:"from_leader_start,omitempty"`
	// WaitNanos is HandoverWait's result: a claimant serves no earlier than
	// this long (ns, on its clock) after it consumed the record.
	WaitNanos int64 `json:"wait_nanos"`
	// ConsumedBy is the incarnation of the claim that consumed the record
	// (0: not consumed).
	ConsumedBy int64 `json:"consumed_by,omitempty"`
}

// Marshal encodes r as the key's value.
func (r HandoverRecord) Marshal() []byte { b, _ := json.Marshal(r); return b }

// ParseHandoverRecord decodes a HandoverKey value.
func ParseHandoverRecord(b []byte) (HandoverRecord, error) {
	var r HandoverRecord
	if err := json.Unmarshal(b, &r); err != nil {
		return HandoverRecord{}, fmt.Errorf("schema: handover record: %w", err)
	}
	if r.WaitNanos < 0 {
		return HandoverRecord{}, fmt.Errorf("schema: handover record: negative wait %d ns", r.WaitNanos)
	}
	return r, nil
}
