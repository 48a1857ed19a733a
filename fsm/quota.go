package fsm

import (
	"fmt"

	pb "github.com/raftps/raftps/api/raftpspb"
	"github.com/raftps/raftps/schema"
)

// Quotas of the key/value store, checked by Apply against replicated state
// (deterministic on every replica). The usage they count is derived from
// the keys themselves, so a snapshot restore or a restart (log replay)
// recounts it exactly.
const (
	// MaxJobKeys is the most keys one job may hold under /jobs/<job>/.
	MaxJobKeys = 10000
	// MaxJobKeyBytes is the most bytes (keys and values) one job's keys
	// may hold together (64 MiB).
	MaxJobKeyBytes = 64 << 20
	// MaxLeases is the most leases the store holds: a grant past it is
	// refused with ErrQuotaExceeded (each lease costs a timer on the
	// leader and a record in every snapshot).
	MaxLeases = 100000
)

// usage is what a set of keys holds.
type usage struct {
	keys, bytes int64
}

func kvBytes(key, value []byte) int64 { return int64(len(key) + len(value)) }

// account adds (sign 1) or removes (sign -1) one key/value from the usage
// counters; the caller holds f.mu for writing.
func (f *FSM) account(kv *pb.KeyValue, sign int64) {
	n := kvBytes(kv.Key, kv.Value)
	f.used += sign * n
	if job, ok := schema.JobOfKey(kv.Key); ok {
		u := f.jobUse[job]
		if u == nil {
			u = &usage{}
			f.jobUse[job] = u
		}
		u.keys += sign
		u.bytes += sign * n
		if u.keys == 0 {
			delete(f.jobUse, job)
		}
	}
}

// recount rebuilds the usage counters from the keys (after a restore).
func (f *FSM) recount() {
	f.used, f.jobUse = 0, map[string]*usage{}
	f.kvs.Ascend(func(kv *pb.KeyValue) bool {
		f.account(kv, 1)
		return true
	})
}

// UsedBytes is the bytes of every key and value in the store (the size
// the backend quota is checked against).
func (f *FSM) UsedBytes() int64 {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return f.used
}

// JobUsage returns the keys and bytes held under /jobs/<job>/.
func (f *FSM) JobUsage(job string) (keys, bytes int64) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	if u := f.jobUse[job]; u != nil {
		return u.keys, u.bytes
	}
	return 0, 0
}

// checkQuota refuses puts (already validated) that the NOSPACE alarm
// forbids (ErrNoSpace: any put but one of the alarm key itself) or that
// would take a job past MaxJobKeys or MaxJobKeyBytes (ErrQuotaExceeded,
// naming the job and the figures). Every put is counted as if no delete
// of the same command ran first, so a command passes only if it fits
// whatever order it applies in.
func (f *FSM) checkQuota(puts []*pb.PutRequest) error {
	if len(puts) == 0 {
		return nil
	}
	if _, armed := f.get([]byte(schema.NoSpaceAlarmKey)); armed {
		for _, p := range puts {
			if string(p.GetKey()) != schema.NoSpaceAlarmKey {
				return fmt.Errorf("%w: the store went past its backend quota; delete keys, then delete %s to disarm",
					ErrNoSpace, schema.NoSpaceAlarmKey)
			}
		}
	}
	delta := map[string]*usage{}
	for _, p := range puts {
		job, ok := schema.JobOfKey(p.GetKey())
		if !ok {
			continue
		}
		d := delta[job]
		if d == nil {
			d = &usage{}
			delta[job] = d
		}
		d.bytes += kvBytes(p.GetKey(), p.GetValue())
		if prev, had := f.get(p.GetKey()); had {
			d.bytes -= kvBytes(prev.Key, prev.Value)
		} else {
			d.keys++
		}
	}
	for job, d := range delta {
		var u usage
		if cur := f.jobUse[job]; cur != nil {
			u = *cur
		}
		if u.keys+d.keys > MaxJobKeys || u.bytes+d.bytes > MaxJobKeyBytes {
			return fmt.Errorf("%w: job %q holds %d keys of %d bytes; this write would make it %d keys of %d bytes (at most %d keys, %d bytes per job)",
				ErrQuotaExceeded, job, u.keys, u.bytes, u.keys+d.keys, u.bytes+d.bytes, MaxJobKeys, MaxJobKeyBytes)
		}
	}
	return nil
}

// putsOf returns the puts among ops.
func putsOf(ops []*pb.RequestOp) []*pb.PutRequest {
	var puts []*pb.PutRequest
	for _, op := range ops {
		if p := op.GetRequestPut(); p != nil {
			puts = append(puts, p)
		}
	}
	return puts
}
