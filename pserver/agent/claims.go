package agent

import (
	"bytes"
	"context"
	"fmt"
	"sort"
	"time"

	pb "github.com/raftps/raftps/api/raftpspb"
	"github.com/raftps/raftps/pserver"
	"github.com/raftps/raftps/pserver/checkpoint"
	"github.com/raftps/raftps/schema"
)

// reconcile: drop slots of ended jobs and slots whose claim is gone, claim
// free slots up to a fair share, feed trainer membership, checkpoint.
func (a *Agent) reconcile(ctx context.Context) {
	running := map[string]*pb.JobStatus{}
	for _, j := range a.meta.Jobs() {
		if j.State == pb.JobState_JOB_RUNNING && j.Spec != nil {
			running[j.Name] = j
		}
	}
	a.mu.Lock()
	var ended []*hosted
	for k, h := range a.hosted {
		if running[k.job] == nil {
			ended = append(ended, h)
			delete(a.hosted, k)
		}
	}
	for k := range a.refused {
		if running[k.job] == nil {
			delete(a.refused, k)
		}
	}
	a.mu.Unlock()
	for _, h := range ended {
		a.finish(ctx, h)
	}
	names := make([]string, 0, len(running))
	for n := range running {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, name := range names {
		a.reconcileJob(ctx, running[name].Spec)
	}
}

func (a *Agent) reconcileJob(ctx context.Context, spec *pb.JobSpec) {
	job := spec.Name
	key, end := schema.PrefixRange(schema.SlotPrefix(job))
	cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	resp, err := a.meta.Range(cctx, &pb.RangeRequest{Key: key, RangeEnd: end, Serializable: true})
	cancel()
	if err != nil {
		return
	}
	claims := map[int32]schema.SlotRecord{}
	for _, kv := range resp.Kvs {
		_, kind, id, ok := schema.ParseJobKey(string(kv.Key))
		if !ok || kind != schema.KindSlot {
			continue
		}
		idx, err := schema.ParseSlot(id)
		if err != nil {
			continue
		}
		if v, err := schema.ParseSlotRecord(kv.Value); err == nil {
			claims[idx] = v
		}
	}
	// Slots we host whose claim moved or vanished: fence at once.
	mine := 0
	a.mu.Lock()
	for k, h := range a.hosted {
		if k.job != job {
			continue
		}
		c, ok := claims[k.slot]
		if ok && c.Node == a.cfg.NodeID && (c.Incarnation == 0 || c.Incarnation == h.incarnation) {
			mine++
			continue
		}
		a.server.Unhost(k.job, k.slot)
		h.slot.Fence()
		delete(a.hosted, k)
		a.log.Warn("slot claim lost: fenced", "job", job, "slot", k.slot, "incarnation", h.incarnation)
	}
	lease := a.lease
	a.mu.Unlock()

	nodes := a.members.PServerNodes()
	if nodes < 1 {
		nodes = 1
	}
	share := (int(spec.NumPservers) + nodes - 1) / nodes
	for i := int32(0); i < spec.NumPservers && mine < share && lease != 0; i++ {
		if c, taken := claims[i]; taken && (c.Node != a.cfg.NodeID || a.hosting(job, i)) {
			continue
		}
		// A free slot, or our own claim that we do not serve (fenced while
		// its lease lived on: ClaimSlot takes it back if the lease is still
		// the current one, and leaves it to expire otherwise). Only if it
		// fits in the node's memory budget (budget.go).
		if !a.fits(ctx, spec, i) {
			continue
		}
		if err := a.claim(ctx, spec, i, lease); err != nil {
			a.log.Warn("claim slot", "job", job, "slot", i, "err", err)
			continue
		}
		if a.hosting(job, i) {
			mine++
		}
	}
	a.followRollback(ctx, spec)
	a.feedTrainers(ctx, job)
	a.maybeCheckpoint(ctx, job)
}

// claim takes slot i under lease, restores it and serves it.
//
// Handover: when the slot was served before (its restore record exists),
// the previous holder may still be serving it. Its lease is gone, but a
// lease can end before its TTL (the master revokes the leases of a node
// that gossip declares dead, which a partitioned node cannot hear), and the
// previous holder fences only when its own watchdog fires, at most one TTL
// after its last renewal, which came before this claim. So the slot is
// served from here no earlier than one TTL after the claim (the restore
// runs meanwhile): two servers never accept pushes for one slot at once.
// The restore record is written before serving, so a later claimant always
// knows that there was a holder to wait for.
func (a *Agent) claim(ctx context.Context, spec *pb.JobSpec, i int32, lease int64) error {
	handover, err := a.servedBefore(ctx, spec.Name, i)
	if err != nil {
		return err
	}
	cctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	inc, ok, err := pserver.ClaimSlot(cctx, a.meta, spec.Name, i, a.cfg.NodeID, a.cfg.Addr, lease)
	cancel()
	if err != nil || !ok {
		return err
	}
	start := time.Now()
	notBefore := start
	if handover {
		notBefore = start.Add(time.Duration(a.cfg.LeaseTTL) * time.Second)
	}
	rctx, rcancel := context.WithTimeout(ctx, 60*time.Second)
	blobs, rec, err := a.ckpt.Restore(rctx, checkpoint.RestoreRequest{Job: spec.Name, Slot: i, NumPservers: spec.NumPservers,
		Async: spec.Mode == pb.UpdateMode_UPDATE_MODE_ASYNC})
	rcancel()
	if err != nil {
		a.releaseKey(ctx, spec.Name, i, inc)
		return fmt.Errorf("restore: %w", err)
	}
	var s *pserver.Slot
	if blobs != nil {
		s, err = pserver.RestoreSlot(spec, i, spec.NumPservers, blobs)
		if err != nil {
			rec.Reason = "initializer: restored blobs do not decode: " + err.Error()
			a.log.Error("restore: blobs do not decode; initializer", "job", spec.Name, "slot", i, "err", err)
			blobs = nil
		}
	}
	if blobs == nil {
		if s, err = pserver.NewSlot(spec, i, spec.NumPservers); err != nil {
			a.releaseKey(ctx, spec.Name, i, inc)
			return fmt.Errorf("new slot: %w", err)
		}
		rec.Version = 0
	}
	s.SetIncarnation(inc)
	h := &hosted{key: slotKey{spec.Name, i}, spec: spec, slot: s, incarnation: inc,
		writer: a.ckpt.Writer(spec.Name, i), lastCkptStep: s.Step(), lastCkptTime: time.Now(), lastVersion: rec.Version}
	if cur, rev, ok := a.readRollback(ctx, spec.Name); ok {
		h.rollbackRev, h.epoch = rev, cur.Epoch
	}
	if spec.Mode == pb.UpdateMode_UPDATE_MODE_SYNC && rec.Version > 0 {
		// A new trajectory starts at the restored version: every slot
		// follows it and labels what it writes from now on with the new
		// epoch, so no version mixes the old trajectory with the new.
		h.epoch++
		v := schema.Rollback{Version: rec.Version, Slot: i, Node: a.cfg.NodeID, Epoch: h.epoch}.Marshal()
		pctx, pcancel := context.WithTimeout(ctx, 2*time.Second)
		if resp, err := a.meta.Txn(pctx, &pb.TxnRequest{Success: []*pb.RequestOp{{Request: &pb.RequestOp_RequestPut{
			RequestPut: &pb.PutRequest{Key: []byte(schema.RollbackKey(spec.Name)), Value: v}}}}}); err == nil {
			h.rollbackRev = resp.GetHeader().GetRevision()
		}
		pcancel()
	}
	// The record (slot, version, md5, source, reason) is what `raftps job
	// status` shows and what checkers verify against the pointers; it is
	// also the handover marker (see above), so it is durable before the
	// slot is served, or the slot is not served.
	b, err := schema.MarshalRestore(rec)
	if err == nil {
		pctx, pcancel := context.WithTimeout(ctx, 2*time.Second)
		_, err = a.meta.Put(pctx, &pb.PutRequest{Key: []byte(schema.RestoreKey(spec.Name, i)), Value: b})
		pcancel()
	}
	if err != nil {
		s.Close()
		a.releaseKey(ctx, spec.Name, i, inc)
		return fmt.Errorf("slot %d: restore record not written, not serving: %w", i, err)
	}
	a.mu.Lock()
	a.written[h.key] = b
	a.mu.Unlock()
	if wait := time.Until(notBefore); wait > 0 {
		a.log.Info("slot handover: waiting for the previous holder to fence", "job", spec.Name, "slot", i, "wait", wait.Round(time.Millisecond))
		select {
		case <-ctx.Done():
			s.Close()
			return ctx.Err()
		case <-time.After(wait):
		}
	}
	a.mu.Lock()
	if a.lease != lease {
		// Fenced while restoring: the claim's lease is lost or in doubt.
		a.mu.Unlock()
		s.Close()
		return fmt.Errorf("slot %d: lease %d lost or in doubt while restoring; not serving", i, lease)
	}
	a.hosted[h.key] = h
	a.mu.Unlock()
	a.startCheckpoints(ctx, h, s)
	a.feedTrainersTo(ctx, h)
	a.server.Host(spec.Name, i, s)
	a.log.Info("slot claimed and served", "job", spec.Name, "slot", i, "incarnation", inc, "epoch", h.epoch,
		"restored_version", rec.Version, "md5", rec.Md5, "source", rec.Source, "reason", rec.Reason,
		"step", s.Step(), "handover", handover, "took", time.Since(start).Round(time.Millisecond))
	_ = a.meta.RecordJobEvent(ctx, &pb.JobEvent{Type: pb.JobEvent_PSERVER_RESTORED, Job: spec.Name,
		Version: rec.Version, Message: fmt.Sprintf("slot %d on %s: version %d md5 %s from %s: %s", i, a.cfg.NodeID, rec.Version, rec.Md5, rec.Source, rec.Reason)})
	return nil
}

// servedBefore reports whether slot i of job may still be served by
// another holder: its restore record exists (read linearizably, so a
// record written before the previous holder served is seen) and is not the
// one this node wrote when it last held the slot (every holder writes one
// before serving, so an unchanged record means no one else held it since).
func (a *Agent) servedBefore(ctx context.Context, job string, i int32) (bool, error) {
	cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	resp, err := a.meta.Range(cctx, &pb.RangeRequest{Key: []byte(schema.RestoreKey(job, i))})
	if err != nil {
		return false, fmt.Errorf("read restore record of slot %d: %w", i, err)
	}
	if len(resp.GetKvs()) == 0 {
		return false, nil
	}
	a.mu.Lock()
	mine := a.written[slotKey{job, i}]
	a.mu.Unlock()
	return mine == nil || !bytes.Equal(resp.GetKvs()[0].GetValue(), mine), nil
}

// finish handles a slot of a job that ended: a last checkpoint, then stop
// serving and release the claim.
func (a *Agent) finish(ctx context.Context, h *hosted) {
	snap := h.slot.Snapshot()
	if h.spec.Checkpoint != nil && snap.Step > h.lastCkptStep {
		_, _ = a.checkpoint(ctx, h, snap)
	}
	a.server.Unhost(h.key.job, h.key.slot)
	h.slot.Close()
	a.releaseKey(ctx, h.key.job, h.key.slot, h.incarnation)
	a.mu.Lock()
	delete(a.written, h.key)
	a.mu.Unlock()
	a.log.Info("job ended: slot released", "job", h.key.job, "slot", h.key.slot, "step", snap.Step)
}

// releaseKey deletes our claim of a slot: only if its create revision is
// still our incarnation, so a claim taken over meanwhile is left alone.
func (a *Agent) releaseKey(ctx context.Context, job string, slot int32, incarnation int64) {
	cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	k := []byte(schema.SlotKey(job, slot))
	_, _ = a.meta.Txn(cctx, &pb.TxnRequest{
		Compare: []*pb.Compare{pserver.FenceCompareKey(k, incarnation)},
		Success: []*pb.RequestOp{{Request: &pb.RequestOp_RequestDeleteRange{RequestDeleteRange: &pb.DeleteRangeRequest{Key: k}}}},
	})
}
