package replica

import (
	"context"
	"sync"

	pb "github.com/raftps/raftps/api/raftpspb"
	"github.com/raftps/raftps/pserver"
)

// MaxPending bounds how far ahead of its applied seq a request may be and
// still wait its turn (requests, hence the gradients a backup holds while
// they wait: at most this many updates).
const MaxPending = 256

// Backup is one backup replica of a slot: it applies its primary's updates
// in seq order to its own pserver.Slot, fenced by epoch. Safe for
// concurrent use.
type Backup struct {
	job  string
	slot *pserver.Slot

	mu      sync.Mutex
	epoch   int64
	applied int64
	waiting int           // calls waiting for their turn
	changed chan struct{} // closed and replaced when applied or epoch changes
}

// NewBackup returns a backup of (job, slot.Index()) at epoch, holding
// slot (built from the same spec as the primary's, at the same version:
// its applied seq is slot.Version()). The Backup applies to slot; nothing
// else may update it while it is a backup.
func NewBackup(job string, slot *pserver.Slot, epoch int64) *Backup {
	return &Backup{job: job, slot: slot, epoch: epoch, applied: slot.Version(), changed: make(chan struct{})}
}

// Slot returns the slot the backup applies to (served once promoted).
func (b *Backup) Slot() *pserver.Slot { return b.slot }

// Epoch returns the newest epoch the backup knows.
func (b *Backup) Epoch() int64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.epoch
}

// Applied returns the highest seq applied (the slot's version).
func (b *Backup) Applied() int64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.applied
}

// SetEpoch makes the backup know epoch (from its watch of the slot's
// record in Raft; a promoted backup calls it before it serves). An older
// epoch is ignored. Requests of older epochs, waiting or to come, are
// refused from then on (ErrStaleEpoch).
func (b *Backup) SetEpoch(epoch int64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.adoptLocked(epoch)
}

func (b *Backup) adoptLocked(epoch int64) {
	if epoch > b.epoch {
		b.epoch = epoch
		b.wakeLocked()
	}
}

func (b *Backup) wakeLocked() {
	close(b.changed)
	b.changed = make(chan struct{})
}

// Replicate applies req once its turn comes and acknowledges it with the
// epoch the backup knows and its applied seq: at once for a duplicate
// (req.seq already applied), else after every earlier seq was applied.
// A request of a newer epoch makes the backup adopt it first. Errors:
// ErrWrongSlot and ErrStaleEpoch (FailedPrecondition; the latter also if
// a newer epoch is adopted while the request waits), ErrTooFarAhead
// (ResourceExhausted), the context's error while waiting, and the
// update's own (pserver.ErrInvalid: refused by the optimizer's checks,
// which a faithful primary's update never is; nothing applied).
func (b *Backup) Replicate(ctx context.Context, req *pb.ReplicateRequest) (*pb.ReplicateAck, error) {
	if req.GetJob() != b.job || req.GetSlot() != b.slot.Index() {
		return nil, errorf(ErrWrongSlot, "request for job %q slot %d; this is a backup of job %q slot %d", req.GetJob(), req.GetSlot(), b.job, b.slot.Index())
	}
	seq := req.GetSeq()
	b.mu.Lock()
	defer b.mu.Unlock()
	b.adoptLocked(req.GetEpoch())
	for {
		if req.GetEpoch() < b.epoch {
			return nil, errorf(ErrStaleEpoch, "update %d of job %q slot %d at epoch %d, but the backup knows epoch %d", seq, b.job, b.slot.Index(), req.GetEpoch(), b.epoch)
		}
		if seq <= b.applied {
			return &pb.ReplicateAck{Epoch: b.epoch, Applied: b.applied}, nil
		}
		if seq == b.applied+1 {
			if err := b.slot.ApplyReplicated(req); err != nil {
				return nil, err
			}
			b.applied = seq
			b.wakeLocked()
			return &pb.ReplicateAck{Epoch: b.epoch, Applied: b.applied}, nil
		}
		if seq > b.applied+MaxPending {
			return nil, errorf(ErrTooFarAhead, "update %d of job %q slot %d: the backup has applied %d, at most %d may wait", seq, b.job, b.slot.Index(), b.applied, MaxPending)
		}
		ch := b.changed
		b.waiting++
		b.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
		}
		b.mu.Lock()
		b.waiting--
		if err := ctx.Err(); err != nil {
			return nil, err
		}
	}
}

// Waiting returns how many requests wait for an earlier seq.
func (b *Backup) Waiting() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.waiting
}
