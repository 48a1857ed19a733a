package agent

import (
	"context"
	"fmt"
	"time"

	pb "github.com/raftps/raftps/api/raftpspb"
	"github.com/raftps/raftps/pserver"
	"github.com/raftps/raftps/pserver/wire"
	"github.com/raftps/raftps/schema"
)

// readRollback reads the job's rollback record and its mod revision
// (linearizable: not this node's possibly stale copy); ok is false if
// there is none (or it cannot be read or decoded).
func (a *Agent) readRollback(ctx context.Context, job string, linearizable bool) (rb schema.Rollback, rev int64, ok bool) {
	cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	resp, err := a.meta.Range(cctx, &pb.RangeRequest{Key: []byte(schema.RollbackKey(job)), Serializable: !linearizable})
	if err != nil || len(resp.Kvs) == 0 {
		return schema.Rollback{}, 0, false
	}
	rb, err = schema.ParseRollback(resp.Kvs[0].Value)
	if err != nil {
		return schema.Rollback{}, 0, false
	}
	return rb, resp.Kvs[0].ModRevision, true
}

// followRollback brings every hosted slot of a sync job back to a rollback
// version published by another slot's restore.
func (a *Agent) followRollback(ctx context.Context, spec *pb.JobSpec) {
	if spec.Mode != pb.UpdateMode_UPDATE_MODE_SYNC {
		return
	}
	rb, rev, ok := a.readRollback(ctx, spec.Name, false)
	if !ok {
		return
	}
	a.mu.Lock()
	var todo []*hosted
	for k, h := range a.hosted {
		if k.job == spec.Name && rev > h.rollbackRev {
			todo = append(todo, h)
		}
	}
	a.mu.Unlock()
	for _, h := range todo {
		h.rollbackRev = rev
		if rb.Slot == h.key.slot || a.slotOf(h).Step() <= rb.Version%schema.EpochStride {
			a.mu.Lock()
			h.epoch = max(h.epoch, rb.Epoch)
			a.mu.Unlock()
			continue
		}
		from := h.slot.Step()
		s, err := a.rollbackSlot(ctx, spec, h.key.slot, rb.Version)
		if err != nil {
			a.log.Error("rollback: this slot stays ahead (model inconsistent until the next restore)",
				"job", spec.Name, "slot", h.key.slot, "version", rb.Version, "err", err)
			continue
		}
		// The claim's incarnation: a rollback is the same claim. A push
		// the old slot was holding is retried on this one and is stale by
		// its step (the trainers are past the rolled-back-to step).
		s.SetIncarnation(h.incarnation)
		s.SetDeadline(h.until)
		s.SetTrainers(splitIDs(h.trainers))
		// Trainers that had left the steps (waiting for a task) stay away:
		// otherwise the new slot's first step would wait for each until it
		// leaves again, at its next WAIT.
		for _, t := range h.slot.Away() {
			s.LeaveStep(t)
		}
		a.mu.Lock()
		if a.hosted[h.key] != h {
			a.mu.Unlock()
			continue
		}
		old := h.slot
		h.slot = s
		// The backups hold the old trajectory: a rolled-back slot runs
		// with R = 1 (re-replication is not wired).
		repl := h.repl
		h.repl = nil
		h.ckptMu.Lock()
		h.lastCkptStep = s.Step()
		h.lastVersion = rb.Version
		h.ckptMu.Unlock()
		h.epoch = rb.Epoch
		a.mu.Unlock()
		if repl != nil {
			repl.unreplicate(ctx, "rolled back")
		}
		a.installHook(h, s)
		a.server.Host(spec.Name, h.key.slot, s) // fences the old slot: its waiting pushes retry on this one
		old.Close()
		a.log.Warn("rolled back to keep the sync model consistent", "job", spec.Name, "slot", h.key.slot,
			"from_step", from, "to_version", rb.Version, "epoch", rb.Epoch, "because", fmt.Sprintf("slot %d restored on %s", rb.Slot, rb.Node))
		_, _ = a.meta.RecordJobEvent(ctx, &pb.JobEvent{Type: pb.JobEvent_PSERVER_RESTORED, Job: spec.Name, Version: rb.Version,
			Message: fmt.Sprintf("slot %d on %s: rolled back from step %d to version %d (epoch %d, step %d; slot %d was restored)",
				h.key.slot, a.cfg.NodeID, from, rb.Version, rb.Version/schema.EpochStride, rb.Version%schema.EpochStride, rb.Slot)})
	}
}

// rollbackSlot builds slot i of spec at checkpoint version (its step
// version%schema.EpochStride): from the version's blobs, or from the initializer
// for step 0 (a slot restored from the initializer published it).
func (a *Agent) rollbackSlot(ctx context.Context, spec *pb.JobSpec, i int32, version int64) (*pserver.Slot, error) {
	if version%schema.EpochStride == 0 {
		return pserver.NewSlot(spec, i, spec.NumPservers)
	}
	rctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	blobs, err := a.ckpt.ReadVersion(rctx, spec.Name, version)
	cancel()
	if err != nil {
		return nil, fmt.Errorf("read version %d: %w", version, err)
	}
	mine := map[int32][]byte{}
	for v, b := range blobs {
		if wire.SlotOfVShard(v, spec.NumPservers) == i {
			mine[v] = b
		}
	}
	s, err := pserver.RestoreSlot(spec, i, spec.NumPservers, mine)
	if err != nil {
		return nil, fmt.Errorf("version %d: blobs do not decode: %w", version, err)
	}
	return s, nil
}
