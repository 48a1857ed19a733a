package schema

import (
	"encoding/json"
	"fmt"
	"slices"
	"strconv"

	pb "github.com/raftps/raftps/api/raftpspb"
)

// KindReplicas is the <kind> of a slot's replica configuration key.
const KindReplicas = "replicas"

// ReplicaPrefix is /jobs/<job>/replicas/.
func ReplicaPrefix(job string) string { return kindPrefix(job, KindReplicas) }

// ReplicaKey is /jobs/<job>/replicas/<slot>: the replica configuration
// of a replicated pserver slot (ReplicaRecord; pserver/DESIGN.md,
// "Replicated slots"). Its mod_revision is the slot's replica epoch.
func ReplicaKey(job string, slot int32) string {
	return ReplicaPrefix(job) + strconv.Itoa(int(slot))
}

// ReplicaMember is one replica of a slot: a node and its gRPC address.
type ReplicaMember struct {
	Node string `json:"node"`
	Addr string `json:"addr"`
	// Zone is the node's failure domain (`raftps node --zone`: a rack, a
	// room, an availability zone); empty when the node has none. Backups
	// are placed in zones no other member of the slot is in, when there
	// are such nodes (pserver/agent's pickBackups).
	Zone string `json:"zone,omitempty"`
	// Instance is the node's process as the record's writer saw it in
	// gossip (`raftps node` makes a random one at each start). A backup's
	// state lives in its process's memory: a record that names a node
	// with another Instance than its running process names state that is
	// gone (pserver/agent's reconcileBackups builds nothing for it).
	// Empty in records of older versions.
	Instance string `json:"instance,omitempty"`
}

// MayRun reports whether m may name the process that runs instance now
// (its node's current gossip Instance): false only when both are known
// and differ (the node restarted since m was written, so the state m
// names is gone).
func (m ReplicaMember) MayRun(instance string) bool {
	return m.Instance == "" || instance == "" || m.Instance == instance
}

// ReplicaRecord is the JSON value of ReplicaKey: the slot's primary and
// its in-sync backups (Kafka's ISR: every backup acknowledged every update
// the primary acknowledged).
//
// Epoch is not in the value: it is the key's mod_revision, which every
// write of the record raises and which is never reused (not after a
// delete, not by another job), so a deposed primary's epoch is below every
// later one. Every write of an existing record compares it
// (EpochCompare); ParseReplicaRecord sets it.
type ReplicaRecord struct {
	Epoch   int64           `json:"-"`
	Primary ReplicaMember   `json:"primary"`
	Backups []ReplicaMember `json:"backups,omitempty"`
	// Incarnation is the slot's incarnation when the record was created
	// (the first primary's claim): the backups serve it, so a promotion
	// keeps it (no rollback); every change of the record keeps it.
	Incarnation int64 `json:"incarnation,omitempty"`
}

// Marshal encodes r as the key's value (without Epoch).
func (r ReplicaRecord) Marshal() []byte { b, _ := json.Marshal(r); return b }

// ParseReplicaRecord decodes a ReplicaKey value whose mod_revision is
// modRevision (the record's Epoch) and validates it.
func ParseReplicaRecord(value []byte, modRevision int64) (ReplicaRecord, error) {
	var r ReplicaRecord
	if err := json.Unmarshal(value, &r); err != nil {
		return ReplicaRecord{}, fmt.Errorf("schema: replica record: %w", err)
	}
	if modRevision <= 0 {
		return ReplicaRecord{}, fmt.Errorf("schema: replica record: mod_revision %d, want > 0", modRevision)
	}
	r.Epoch = modRevision
	return r, r.Validate()
}

// ParseReplicaKV decodes a key-value of a ReplicaPrefix range: the job,
// the slot and the record (Epoch: the key's mod revision). ok is false for
// a key of another kind or a value that does not decode.
func ParseReplicaKV(kv *pb.KeyValue) (job string, slot int32, rec ReplicaRecord, ok bool) {
	job, kind, id, ok := ParseJobKey(string(kv.GetKey()))
	if !ok || kind != KindReplicas {
		return "", 0, ReplicaRecord{}, false
	}
	slot, err := ParseSlot(id)
	if err != nil {
		return "", 0, ReplicaRecord{}, false
	}
	if rec, err = ParseReplicaRecord(kv.GetValue(), kv.GetModRevision()); err != nil {
		return "", 0, ReplicaRecord{}, false
	}
	return job, slot, rec, true
}

// Validate checks that the primary is named and that no node appears
// twice among the replicas.
func (r ReplicaRecord) Validate() error {
	if r.Primary.Node == "" {
		return fmt.Errorf("schema: replica record without a primary")
	}
	seen := map[string]bool{r.Primary.Node: true}
	for _, b := range r.Backups {
		if b.Node == "" || seen[b.Node] {
			return fmt.Errorf("schema: replica record: backup %q empty or named twice (primary %q)", b.Node, r.Primary.Node)
		}
		seen[b.Node] = true
	}
	return nil
}

// Promote returns the record after backup node becomes the primary: the
// old primary leaves, the other backups stay in sync. An error if node is
// not an in-sync backup (only those hold every acknowledged update).
func (r ReplicaRecord) Promote(node string) (ReplicaRecord, error) {
	i := slices.IndexFunc(r.Backups, func(m ReplicaMember) bool { return m.Node == node })
	if i < 0 {
		return ReplicaRecord{}, fmt.Errorf("schema: promote %q: not an in-sync backup of epoch %d (primary %q)", node, r.Epoch, r.Primary.Node)
	}
	return ReplicaRecord{Primary: r.Backups[i], Backups: slices.Delete(slices.Clone(r.Backups), i, i+1), Incarnation: r.Incarnation}, nil
}

// Drop returns the record without backup node (a backup that failed or
// lagged; the primary acknowledges nothing until the write committed). An
// error if node is not a backup.
func (r ReplicaRecord) Drop(node string) (ReplicaRecord, error) {
	i := slices.IndexFunc(r.Backups, func(m ReplicaMember) bool { return m.Node == node })
	if i < 0 {
		return ReplicaRecord{}, fmt.Errorf("schema: drop %q: not a backup of epoch %d (primary %q)", node, r.Epoch, r.Primary.Node)
	}
	return ReplicaRecord{Primary: r.Primary, Backups: slices.Delete(slices.Clone(r.Backups), i, i+1), Incarnation: r.Incarnation}, nil
}

// EpochCompare is the Txn compare of every write of a slot's replica
// record: it holds only while the record is at epoch (its mod_revision);
// epoch 0 holds only while there is no record (the first write). Two
// changes made from the same epoch (a promotion and a drop) cannot both
// commit.
func EpochCompare(job string, slot int32, epoch int64) *pb.Compare {
	return &pb.Compare{Target: pb.Compare_MOD, Result: pb.Compare_EQUAL, Key: []byte(ReplicaKey(job, slot)),
		TargetUnion: &pb.Compare_ModRevision{ModRevision: epoch}}
}
