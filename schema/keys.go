package schema

import (
	"bytes"
	"fmt"
	"strconv"
	"strings"
)

// Top-level prefixes.
const (
	// JobsPrefix holds every per-job key.
	JobsPrefix = "/jobs/"
	// NoSpaceAlarmKey is set (by the leader's gate) when the store went
	// past its backend quota: while it exists the state machine refuses
	// every write that adds keys or bytes (etcd's NOSPACE alarm). An admin
	// frees space and deletes it to disarm.
	NoSpaceAlarmKey = "/alarms/nospace"
	// NodesPrefix holds one NodeRecord per node.
	NodesPrefix = "/nodes/"
	// LearnersPrefix holds one key per learner: a non-voter added with
	// `raftps member add --learner`, held a non-voter until promoted.
	LearnersPrefix = "/learners/"
)

// Kinds of per-job keys: the <kind> of /jobs/<job>/<kind>/<id>.
const (
	KindSlot       = "ps"
	KindTrainer    = "trainers"
	KindCheckpoint = "checkpoints"
	KindRestore    = "restores"
	KindHandover   = "handovers"
)

// rollbackName is the last element of a job's rollback key.
const rollbackName = "rollback"

// NodeKey is /nodes/<id>.
func NodeKey(id string) string { return NodesPrefix + id }

// JobPrefix is /jobs/<job>/: every key of one job.
func JobPrefix(job string) string { return JobsPrefix + job + "/" }

func kindPrefix(job, kind string) string { return JobPrefix(job) + kind + "/" }

// SlotPrefix is /jobs/<job>/ps/.
func SlotPrefix(job string) string { return kindPrefix(job, KindSlot) }

// SlotKey is /jobs/<job>/ps/<slot>: the claim of a pserver slot. Its
// create_revision is the slot's incarnation (pserver.ClaimSlot).
func SlotKey(job string, slot int32) string { return SlotPrefix(job) + strconv.Itoa(int(slot)) }

// TrainerPrefix is /jobs/<job>/trainers/.
func TrainerPrefix(job string) string { return kindPrefix(job, KindTrainer) }

// TrainerKey is /jobs/<job>/trainers/<id>.
func TrainerKey(job, id string) string { return TrainerPrefix(job) + id }

// CheckpointPrefix is /jobs/<job>/checkpoints/.
func CheckpointPrefix(job string) string { return kindPrefix(job, KindCheckpoint) }

// CheckpointKey is /jobs/<job>/checkpoints/<slot>: the slot's checkpoint
// pointer (Paddle's per-pserver pointer).
func CheckpointKey(job string, slot int32) string {
	return CheckpointPrefix(job) + strconv.Itoa(int(slot))
}

// RestorePrefix is /jobs/<job>/restores/.
func RestorePrefix(job string) string { return kindPrefix(job, KindRestore) }

// RestoreKey is /jobs/<job>/restores/<slot>: the slot's latest restore record.
func RestoreKey(job string, slot int32) string { return RestorePrefix(job) + strconv.Itoa(int(slot)) }

// HandoverPrefix is the prefix of every HandoverKey of job.
func HandoverPrefix(job string) string { return kindPrefix(job, KindHandover) }

// HandoverKey is /jobs/<job>/handovers/<slot>: the HandoverRecord of the
// slot's last early lease revoke (written by the master, consumed by the
// next claimant; see HandoverRecord).
func HandoverKey(job string, slot int32) string {
	return HandoverPrefix(job) + strconv.Itoa(int(slot))
}

// RollbackKey is /jobs/<job>/rollback: in a sync job, the checkpoint version
// that a restored slot went back to, which every other slot then follows
// (Horovod Elastic's restore-and-reset).
func RollbackKey(job string) string { return JobPrefix(job) + rollbackName }

// JobOfKey returns <job> of any key under /jobs/<job>/; ok is false for
// keys outside a job.
func JobOfKey(key []byte) (job string, ok bool) {
	rest, found := bytes.CutPrefix(key, []byte(JobsPrefix))
	if !found {
		return "", false
	}
	j, _, found := bytes.Cut(rest, []byte("/"))
	if !found || len(j) == 0 {
		return "", false
	}
	return string(j), true
}

// ParseJobKey splits /jobs/<job>/<kind>/<id>. ok is false for any other key
// (including /jobs/<job>/rollback, which has no id).
func ParseJobKey(key string) (job, kind, id string, ok bool) {
	rest, found := strings.CutPrefix(key, JobsPrefix)
	if !found {
		return "", "", "", false
	}
	parts := strings.Split(rest, "/")
	if len(parts) != 3 || parts[0] == "" || parts[1] == "" || parts[2] == "" {
		return "", "", "", false
	}
	return parts[0], parts[1], parts[2], true
}

// ParseSlot parses the <slot> of a slot, checkpoint or restore key id.
func ParseSlot(id string) (int32, error) {
	n, err := strconv.ParseInt(id, 10, 32)
	if err != nil || n < 0 {
		return 0, fmt.Errorf("schema: bad slot %q", id)
	}
	return int32(n), nil
}

// ParseNodeKey returns the id of /nodes/<id>.
func ParseNodeKey(key string) (id string, ok bool) {
	id, ok = strings.CutPrefix(key, NodesPrefix)
	return id, ok && id != "" && !strings.Contains(id, "/")
}

// LearnerKey is /learners/<id>; its value is the learner's Raft address.
func LearnerKey(id string) string { return LearnersPrefix + id }

// ParseLearnerKey returns the id of /learners/<id>.
func ParseLearnerKey(key string) (id string, ok bool) {
	id, ok = strings.CutPrefix(key, LearnersPrefix)
	return id, ok && id != "" && !strings.Contains(id, "/")
}

// PrefixEnd returns the range end that covers every key with prefix p
// (etcd's clientv3.GetPrefixRangeEnd): p with its last byte below 0xff
// incremented, or "\x00" (every key to the end) when p is all 0xff.
func PrefixEnd(p []byte) []byte {
	end := append([]byte(nil), p...)
	for i := len(end) - 1; i >= 0; i-- {
		if end[i] < 0xff {
			end[i]++
			return end[:i+1]
		}
	}
	return []byte{0}
}

// PrefixRange returns the [key, range_end) of every key under prefix, as a
// RangeRequest or DeleteRangeRequest takes it.
func PrefixRange(prefix string) (key, end []byte) {
	key = []byte(prefix)
	return key, PrefixEnd(key)
}
