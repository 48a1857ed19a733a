package replica

import (
	"context"
	"slices"
	"sync"

	pb "github.com/raftps/raftps/api/raftpspb"
)

// Peer is one backup as the primary reaches it: a *Backup in process, or
// a client of the Replica service.
type Peer interface {
	Replicate(ctx context.Context, req *pb.ReplicateRequest) (*pb.ReplicateAck, error)
}

// Replicator is a primary's side: it sends each update to every backup of
// the slot's in-sync set at the primary's epoch. Safe for concurrent use
// (concurrent updates may be sent concurrently: backups apply them in seq
// order).
type Replicator struct {
	mu      sync.RWMutex
	epoch   int64
	names   []string // sorted
	backups map[string]Peer
}

// NewReplicator returns the replicator of a primary at epoch whose
// in-sync backups are backups (by node name).
func NewReplicator(epoch int64, backups map[string]Peer) *Replicator {
	r := &Replicator{}
	r.SetConfig(epoch, backups)
	return r
}

// SetConfig installs the slot's configuration after a Raft commit changed
// it (a backup dropped or added, at a new epoch).
func (r *Replicator) SetConfig(epoch int64, backups map[string]Peer) {
	names := make([]string, 0, len(backups))
	for n := range backups {
		names = append(names, n)
	}
	slices.Sort(names)
	r.mu.Lock()
	r.epoch, r.names, r.backups = epoch, names, backups
	r.mu.Unlock()
}

// Epoch returns the primary's epoch.
func (r *Replicator) Epoch() int64 {
	r.mu.RLock()
	defer r.mu.RUnlock()
	return r.epoch
}

// Replicate sends u (a pserver.Slot.OnUpdate report; not modified) at
// the primary's epoch to every in-sync backup, concurrently, and returns
// nil once each acknowledged it at that epoch with an applied seq of at
// least u.seq. Otherwise it returns a *BackupError naming every backup
// that did not (a refusal, a transport error, an ack of a newer epoch:
// ErrStaleEpoch, or a lower seq: ErrNotAcked); the update must not be
// acknowledged then. With no backups it returns nil at once (R = 1: the
// lease fences the primary instead).
func (r *Replicator) Replicate(ctx context.Context, u *pb.ReplicateRequest) error {
	r.mu.RLock()
	epoch, names, backups := r.epoch, r.names, r.backups
	r.mu.RUnlock()
	req := &pb.ReplicateRequest{
		Job: u.GetJob(), Slot: u.GetSlot(), Epoch: epoch, Seq: u.GetSeq(), Step: u.GetStep(),
		Incarnation: u.GetIncarnation(), Grads: u.GetGrads(), LrScale: u.GetLrScale(), PushIds: u.GetPushIds(),
	}
	errs := make([]error, len(names))
	if len(names) == 1 { // R = 2: no goroutine to start and wait for
		errs[0] = checkAck(req, backups[names[0]])(ctx)
	} else {
		var wg sync.WaitGroup
		for i, n := range names {
			wg.Add(1)
			go func() {
				defer wg.Done()
				errs[i] = checkAck(req, backups[n])(ctx)
			}()
		}
		wg.Wait()
	}
	be := &BackupError{Epoch: epoch, Seq: req.Seq}
	for i, err := range errs {
		if err != nil {
			be.Failed, be.Errs = append(be.Failed, names[i]), append(be.Errs, err)
		}
	}
	if len(be.Failed) > 0 {
		return be
	}
	return nil
}

// checkAck returns the call of req on p, checking its ack.
func checkAck(req *pb.ReplicateRequest, p Peer) func(context.Context) error {
	return func(ctx context.Context) error {
		ack, err := p.Replicate(ctx, req)
		switch {
		case err != nil:
			return err
		case ack.GetEpoch() > req.GetEpoch():
			return errorf(ErrStaleEpoch, "update %d sent at epoch %d, acknowledged at epoch %d", req.GetSeq(), req.GetEpoch(), ack.GetEpoch())
		case ack.GetApplied() < req.GetSeq():
			return errorf(ErrNotAcked, "update %d acknowledged with applied seq %d", req.GetSeq(), ack.GetApplied())
		}
		return nil
	}
}
