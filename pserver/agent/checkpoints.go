package agent

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	pb "github.com/raftps/raftps/api/raftpspb"
	"github.com/raftps/raftps/pserver"
	"github.com/raftps/raftps/pserver/checkpoint"
	"github.com/raftps/raftps/schema"
)

// maybeCheckpoint starts a checkpoint of each hosted slot of job whose
// policy is due (every N steps and/or T seconds).
func (a *Agent) maybeCheckpoint(ctx context.Context, job string) {
	a.mu.Lock()
	var due []*hosted
	for k, h := range a.hosted {
		if k.job != job || h.spec.Checkpoint == nil {
			continue
		}
		p := h.spec.Checkpoint
		step := h.slot.Step()
		lastStep, lastTime, _ := h.lastCheckpoint()
		stepsByPoll := p.EverySteps > 0 && h.spec.Mode != pb.UpdateMode_UPDATE_MODE_SYNC
		if (stepsByPoll && step/p.EverySteps > lastStep/p.EverySteps) ||
			(p.EverySeconds > 0 && time.Since(lastTime) >= time.Duration(p.EverySeconds)*time.Second && step > lastStep) {
			due = append(due, h)
		}
	}
	a.mu.Unlock()
	for _, h := range due {
		h.ckptMu.Lock()
		if h.checkpointing {
			h.ckptMu.Unlock()
			continue
		}
		h.checkpointing = true
		h.ckptMu.Unlock()
		a.wg.Add(1)
		go func(h *hosted) {
			defer a.wg.Done()
			defer func() { h.ckptMu.Lock(); h.checkpointing = false; h.ckptMu.Unlock() }()
			_, _ = a.checkpoint(ctx, h, h.slot.Snapshot())
		}(h)
	}
}

// checkpoint writes one snapshot of a slot through the checkpoint protocol,
// one at a time per slot; a snapshot whose version is not newer than the
// last one written is skipped (nil, nil).
func (a *Agent) checkpoint(ctx context.Context, h *hosted, snap *pserver.SlotSnapshot) (*pb.CheckpointPointer, error) {
	h.writeMu.Lock()
	defer h.writeMu.Unlock()
	start := time.Now()
	blobs := make(map[int32][]byte, len(snap.VShards))
	for v := range snap.VShards {
		b, err := pserver.EncodeVShard(snap, v)
		if err != nil {
			return nil, err
		}
		blobs[v] = b
	}
	a.mu.Lock()
	epoch := h.epoch
	a.mu.Unlock()
	version := checkpointVersion(epoch, snap)
	if _, _, last := h.lastCheckpoint(); version <= last {
		return nil, nil
	}
	cctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	ptr, err := h.writer.Checkpoint(cctx, checkpoint.WriteRequest{Job: h.key.job, Slot: h.key.slot, NumPservers: h.spec.NumPservers,
		Version: version, Step: snap.Step, Incarnation: h.incarnation, Blobs: blobs, Policy: h.spec.Checkpoint})
	if err != nil {
		if errors.Is(err, checkpoint.ErrFenced) {
			a.log.Warn("checkpoint fenced: slot lost; stop serving", "job", h.key.job, "slot", h.key.slot)
			h.slot.Fence()
		} else {
			a.log.Warn("checkpoint failed", "job", h.key.job, "slot", h.key.slot, "version", version, "err", err)
		}
		return nil, err
	}
	h.ckptMu.Lock()
	h.lastCkptStep = snap.Step
	h.lastCkptTime = time.Now()
	h.lastVersion = version
	h.ckptMu.Unlock()
	checkpointSeconds.Observe(time.Since(start).Seconds())
	checkpointBytes.Add(float64(ptr.Bytes))
	a.log.Info("checkpoint committed", "job", h.key.job, "slot", h.key.slot, "version", ptr.Version, "md5", ptr.Md5,
		"bytes", ptr.Bytes, "replicas", ptr.Replicas, "took", time.Since(start).Round(time.Millisecond))
	_, _ = a.meta.RecordJobEvent(ctx, &pb.JobEvent{Type: pb.JobEvent_CHECKPOINT_COMMITTED, Job: h.key.job, Version: ptr.Version,
		Message: fmt.Sprintf("slot %d version %d md5 %s replicas %s", h.key.slot, ptr.Version, ptr.Md5, strings.Join(ptr.Replicas, ","))})
	return ptr, nil
}

// lastCheckpoint returns the step, time and version of h's last
// checkpoint (or of the claim's restore or rollback).
func (h *hosted) lastCheckpoint() (step int64, at time.Time, version int64) {
	h.ckptMu.Lock()
	defer h.ckptMu.Unlock()
	return h.lastCkptStep, h.lastCkptTime, h.lastVersion
}

// checkpointVersion names a snapshot's version: epoch*schema.EpochStride + its
// step. In sync jobs the step-based snapshots are taken inside the
// completion of every N-th step (pserver.Slot.SnapshotEvery), so every
// slot's version is the model after exactly that step, and Restore finds
// versions all slots have.
func checkpointVersion(epoch int64, snap *pserver.SlotSnapshot) int64 {
	return epoch*schema.EpochStride + snap.Step
}

// startCheckpoints starts h's checkpoint goroutine and installs the
// step-exact snapshot hook on s (sync jobs with every_steps).
func (a *Agent) startCheckpoints(ctx context.Context, h *hosted, s *pserver.Slot) {
	h.snaps = make(chan queued, 1)
	a.installHook(h, s)
	a.wg.Add(1)
	go func() {
		defer a.wg.Done()
		for {
			select {
			case <-ctx.Done():
				return
			case q := <-h.snaps:
				snap := q.snap
				if a.slotOf(h).Fenced() {
					return
				}
				h.ckptMu.Lock()
				h.checkpointing = true
				h.ckptMu.Unlock()
				_, _ = a.checkpoint(ctx, h, snap)
				snap.Release() // its buffers become the next snapshot's
				h.ckptMu.Lock()
				h.checkpointing = false
				h.ckptMu.Unlock()
			}
		}
	}()
}

// installHook makes s hand h's checkpoint goroutine, in a sync job with a
// checkpoint policy, a snapshot of every every_steps-th step
// (Slot.SnapshotEvery) and of the parameters an eval pulls
// (Slot.SnapshotOnPull): every slot's eval pull reads the same step (the
// pass's last; training waits for the eval), so each pass's evaluated
// parameters become one whole checkpoint version, whatever every_steps is,
// and the pass's metric names it (jobq attaches it when it commits).
func (a *Agent) installHook(h *hosted, s *pserver.Slot) {
	if h.spec.Mode != pb.UpdateMode_UPDATE_MODE_SYNC || h.spec.GetCheckpoint() == nil {
		return
	}
	s.SnapshotOnPull(func(snap *pserver.SlotSnapshot) { a.queueSnapshot(h, queued{snap: snap, eval: true}) })
	if n := h.spec.GetCheckpoint().GetEverySteps(); n > 0 {
		s.SnapshotEvery(n, func(snap *pserver.SlotSnapshot) { a.queueSnapshot(h, queued{snap: snap}) })
	}
}

// queued is a snapshot waiting for h's checkpoint goroutine; eval: taken
// for an eval's pull.
type queued struct {
	snap *pserver.SlotSnapshot
	eval bool
}

// queueSnapshot hands q to h's checkpoint goroutine. When the writer lags,
// the pending snapshot is replaced by the newer one (a skipped version),
// except that a pending eval snapshot stays and a newer periodic one is
// skipped instead: each pass's evaluated parameters are checkpointed.
func (a *Agent) queueSnapshot(h *hosted, q queued) {
	h.queueMu.Lock() // the only senders: the channel keeps the room made below
	defer h.queueMu.Unlock()
	select {
	case h.snaps <- q:
		return
	default:
	}
	select {
	case old := <-h.snaps:
		if old.eval && !q.eval {
			old, q = q, old
		}
		a.log.Warn("checkpoint writer lags: skipping a version", "job", h.key.job, "slot", h.key.slot, "skipped", old.snap.Step)
		old.snap.Release()
	default: // the writer took it meanwhile
	}
	h.snaps <- q
}
