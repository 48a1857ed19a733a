package agent

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"sort"
	"time"

	pb "github.com/raftps/raftps/api/raftpspb"
	"github.com/raftps/raftps/pserver"
	"github.com/raftps/raftps/pserver/checkpoint"
	"github.com/raftps/raftps/pserver/wire"
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
	for k := range a.retry {
		if running[k.job] == nil {
			delete(a.retry, k)
		}
	}
	a.dropEndedBackupsLocked(running)
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
	var fenced []heldSlot
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
		fenced = a.fenceLocked(k, h, "slot claim lost", fenced)
		a.log.Warn("slot claim lost: fenced", "job", job, "slot", k.slot, "incarnation", h.incarnation)
	}
	lease := a.lease
	a.mu.Unlock()
	for _, hs := range fenced { // before this round reads the records
		a.holdOver(hs.h, hs.s)
	}
	var recs map[int32]schema.ReplicaRecord
	if spec.GetReplicas() >= 2 && a.cfg.Replicas != nil {
		var ok bool
		if recs, ok = a.readReplicas(ctx, job); !ok {
			return // unknown: claim nothing a record may own
		}
		a.reconcileBackups(spec, recs)
	}

	nodes := a.members.PServerNodes()
	if nodes < 1 {
		nodes = 1
	}
	share := (int(spec.NumPservers) + nodes - 1) / nodes
	for i := int32(0); i < spec.NumPservers && lease != 0; i++ {
		if c, taken := claims[i]; taken && (c.Node != a.cfg.NodeID || a.hosting(job, i)) {
			continue
		}
		if r, ok := recs[i]; ok {
			// A replicated slot is its record's primary's: promoted to
			// this node, it serves its backup (whatever the fair share:
			// no other node holds the slot's state); another node's, it is left
			// to it (the master promotes or deletes the record when that
			// node is gone); this node's but lost, a live in-sync backup
			// is promoted (handOffLostSlot), or else the record goes and
			// the slot is claimed the R = 1 way on a later round.
			switch {
			case r.Primary.Node != a.cfg.NodeID:
			case a.holdsBackup(job, i):
				switch err := a.claimPromoted(ctx, spec, i, lease, r); {
				case errors.Is(err, errClaimHeld): // the old primary's lease has not ended yet
				case err != nil:
					a.log.Warn("claim promoted slot", "job", job, "slot", i, "err", err)
				default:
					mine++
				}
			default:
				var own int64 // our claim, if we still hold one (not served)
				if c, ok := claims[i]; ok && c.Node == a.cfg.NodeID {
					own = c.Incarnation
				}
				a.handOffLostSlot(ctx, job, i, r, own)
			}
			continue
		}
		if mine >= share {
			continue
		}
		// A free slot, or our own claim that we do not serve (fenced while
		// its lease lived on: ClaimSlot takes it back if the lease is still
		// the current one, and leaves it to expire otherwise). Only if it
		// fits in the node's memory budget (budget.go).
		if !a.fits(ctx, spec, i) {
			continue
		}
		if a.restoreDeferred(slotKey{job, i}, time.Now()) {
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
	a.reportWaits(job)
	a.maybeCheckpoint(ctx, job)
}

// claim takes slot i under lease, restores it and serves it.
//
// Handover: when another node served the slot before (its restore record
// exists and is not the one this node last wrote), that holder may still
// be serving it. Its claim is gone, but a lease can end before its TTL (the
// master revokes the lease of a node that gossip declares dead, which a
// partitioned node cannot hear; an operator may revoke it), and the holder
// fences only at its deadline, schema.PServerFence (2/3 of its lease's
// TTL) after the send of its last successful renewal. So the slot is
// served from here no earlier than (takeover.notBefore):
//   - the wait of the master's schema.HandoverRecord for the slot, if this
//     claim consumed it and it describes the holder that wrote the restore
//     record (the leader knew when that holder's last renewal arrived:
//     schema.HandoverWait), counted from the consuming Txn;
//   - otherwise schema.HandoverWait(holder's lease TTL, 0) after the claim:
//     the holder's last renewal was sent before its claim ended, hence
//     before this claim, and the TTL is the holder's (its restore record
//     carries it), never this node's --pserver-lease-ttl.
//
// The restore runs meanwhile, so two servers never accept pushes for one
// slot at once. The restore record (and, for a sync job, the rollback) is
// written after the wait, right before serving, in one Txn that requires
// the claim: so a holder that wrote one had waited out every holder before
// it, a later claimant always knows that there was a holder to wait for and
// what its TTL was, and a claim lost meanwhile publishes nothing.
func (a *Agent) claim(ctx context.Context, spec *pb.JobSpec, i int32, lease int64) error {
	cctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	inc, ok, err := pserver.ClaimSlot(cctx, a.meta, spec.Name, i, a.cfg.NodeID, a.cfg.Addr, lease)
	cancel()
	if err != nil || !ok {
		return err
	}
	start := time.Now()
	to, err := a.takeOver(ctx, spec.Name, i, inc)
	if err != nil {
		a.releaseKey(ctx, spec.Name, i, inc)
		return err
	}
	notBefore := to.notBefore(start, a.cfg.LeaseTTL)
	handover := to.previous
	rctx, rcancel := context.WithTimeout(ctx, 60*time.Second)
	blobs, rec, err := a.ckpt.Restore(rctx, checkpoint.RestoreRequest{Job: spec.Name, Slot: i, NumPservers: spec.NumPservers,
		Async: spec.Mode == pb.UpdateMode_UPDATE_MODE_ASYNC})
	rcancel()
	if err != nil {
		// Never the initializer here: a holder of the checkpoint that
		// could not be asked (checkpoint.ErrUnreachable) may hold the
		// trained state; the slot is claimed and restored again later.
		a.releaseKey(ctx, spec.Name, i, inc)
		if errors.Is(err, checkpoint.ErrUnreachable) {
			wait := a.deferRestore(slotKey{spec.Name, i}, time.Now())
			return fmt.Errorf("restore (retry in %v): %w", wait, err)
		}
		return fmt.Errorf("restore: %w", err)
	}
	a.mu.Lock()
	delete(a.retry, slotKey{spec.Name, i})
	a.mu.Unlock()
	var s *pserver.Slot
	if blobs != nil {
		s, err = pserver.RestoreSlot(spec, i, spec.NumPservers, blobs)
		if errors.Is(err, wire.ErrNewerFormat) {
			// A newer raftps wrote the checkpoint (a mixed-version
			// cluster): starting from the initializer would drop the
			// progress. Leave the slot to an upgraded node.
			a.releaseKey(ctx, spec.Name, i, inc)
			return fmt.Errorf("restore: upgrade this node: %w", err)
		}
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
	until := a.deadline(lease)
	if until == nil {
		s.Close()
		a.releaseKey(ctx, spec.Name, i, inc)
		return fmt.Errorf("slot %d: lease %d replaced while restoring; not serving", i, lease)
	}
	s.SetIncarnation(inc)
	s.SetDeadline(until)
	h := &hosted{key: slotKey{spec.Name, i}, spec: spec, slot: s, incarnation: inc, until: until,
		writer: a.ckpt.Writer(spec.Name, i), lastCkptStep: s.Step(), lastCkptTime: time.Now(), lastVersion: rec.Version}
	if wait := time.Until(notBefore); wait > 0 {
		a.log.Info("slot handover: waiting for the previous holder to fence", "job", spec.Name, "slot", i, "wait", wait.Round(time.Millisecond))
		select {
		case <-ctx.Done():
			s.Close()
			return ctx.Err()
		case <-time.After(wait):
		}
	}
	if a.currentLease() != lease {
		s.Close()
		a.releaseKey(ctx, spec.Name, i, inc)
		return fmt.Errorf("slot %d: lease %d lost or in doubt while restoring; not serving", i, lease)
	}
	rec.Incarnation, rec.LeaseTtl = inc, a.cfg.LeaseTTL
	b, err := a.publish(ctx, spec, h, rec, to.previous)
	if err != nil {
		s.Close()
		a.releaseKey(ctx, spec.Name, i, inc)
		return fmt.Errorf("slot %d: restore record not written, not serving: %w", i, err)
	}
	if spec.GetReplicas() >= 2 {
		// A slot built from the initializer places backups that build the
		// same; one restored from a checkpoint writes a record with no
		// backup, and re-replication (rereplicate.go) builds them from its
		// snapshot.
		if rr, ok := a.placeBackups(ctx, spec, i, inc, blobs == nil); ok {
			h.repl = a.startReplication(ctx, spec, s, inc, rr)
			a.log.Info("replicated slot: replica record written", "job", spec.Name, "slot", i, "epoch", rr.Epoch, "backups", rr.Backups,
				"restored_version", rec.Version)
		}
	}
	a.mu.Lock()
	a.written[h.key] = b
	if a.lease != lease {
		// Fenced while restoring: the claim's lease is lost or in doubt.
		a.mu.Unlock()
		h.stopReplication("lease lost while restoring")
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
	_, _ = a.meta.RecordJobEvent(ctx, &pb.JobEvent{Type: pb.JobEvent_PSERVER_RESTORED, Job: spec.Name,
		Version: rec.Version, Message: fmt.Sprintf("slot %d on %s: version %d md5 %s from %s: %s", i, a.cfg.NodeID, rec.Version, rec.Md5, rec.Source, rec.Reason)})
	return nil
}

// restoreRetry is when a slot whose restore could not reach a checkpoint
// holder is claimed again, and the wait that led there.
type restoreRetry struct {
	at   time.Time
	wait time.Duration
}

// maxRestoreRetry bounds the wait between restores of a slot whose
// checkpoint holder cannot be reached.
const maxRestoreRetry = 10 * time.Second

// deferRestore records that k's restore could not reach a checkpoint
// holder at now: k is not claimed again for a wait that starts at Poll and
// doubles with each such failure up to maxRestoreRetry. It returns the wait.
func (a *Agent) deferRestore(k slotKey, now time.Time) time.Duration {
	a.mu.Lock()
	defer a.mu.Unlock()
	wait := a.cfg.Poll
	if r, ok := a.retry[k]; ok {
		wait = min(2*r.wait, maxRestoreRetry)
	}
	a.retry[k] = restoreRetry{at: now.Add(wait), wait: wait}
	return wait
}

// restoreDeferred reports whether k is not to be claimed at now
// (deferRestore).
func (a *Agent) restoreDeferred(k slotKey, now time.Time) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	r, ok := a.retry[k]
	return ok && now.Before(r.at)
}

// takeover is what a new claim found of the slot's previous holders.
type takeover struct {
	// previous: another holder may still serve the slot (its restore
	// record exists and is not the one this node last wrote; every holder
	// writes one, while it holds the claim, before serving).
	previous bool
	// holder is that holder's restore record (nil if unreadable).
	holder *pb.RestoreRecord
	// record: the master's handover record this claim consumed (nil: none,
	// or consumed by an earlier claim).
	record *schema.HandoverRecord
	// at is when the record was read (after the Txn that consumed it).
	at time.Time
}

// notBefore is when a claim made before start may serve the slot: at
// start if no other holder may serve it; the consumed record's wait after
// at if the record describes the holder (same incarnation: a record about
// a later claim that never wrote its restore record, hence never served,
// says nothing about the holder); else schema.HandoverWait of the holder's
// lease TTL after start. A restore record written before it carried the
// TTL (an older release) leaves only ownTTL, this node's lease TTL in
// seconds, waited whole, as those releases did.
func (t takeover) notBefore(start time.Time, ownTTL int64) time.Time {
	switch inc := t.holder.GetIncarnation(); {
	case !t.previous:
		return start
	case t.record != nil && inc != 0 && t.record.Incarnation == inc:
		return t.at.Add(time.Duration(t.record.WaitNanos))
	case t.holder.GetLeaseTtl() > 0:
		return start.Add(schema.HandoverWait(t.holder.GetLeaseTtl(), 0))
	default:
		return start.Add(time.Duration(ownTTL) * time.Second)
	}
}

// takeOver runs, right after claim inc of slot i, one Txn that checks the
// claim is still held, reads the slot's restore record (linearizably: any
// record a previous holder wrote, while it held the claim, is seen) and
// its handover record, and marks the handover record consumed by inc (or
// writes an empty one consumed by inc), so that the master's record for a
// holder is used by one claim at most, the first after it, and a record
// the master writes later describes the holder after this one
// (master.handoverRevoke requires the key unchanged since the revoke). An
// error means the claim is lost or its state unknown: do not serve.
func (a *Agent) takeOver(ctx context.Context, job string, i int32, inc int64) (takeover, error) {
	claimKey, restoreKey, hoKey := []byte(schema.SlotKey(job, i)), []byte(schema.RestoreKey(job, i)), []byte(schema.HandoverKey(job, i))
	cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	resp, err := a.meta.Txn(cctx, &pb.TxnRequest{
		Compare: []*pb.Compare{pserver.FenceCompareKey(claimKey, inc)},
		Success: []*pb.RequestOp{
			{Request: &pb.RequestOp_RequestRange{RequestRange: &pb.RangeRequest{Key: restoreKey}}},
			{Request: &pb.RequestOp_RequestRange{RequestRange: &pb.RangeRequest{Key: hoKey}}},
			{Request: &pb.RequestOp_RequestPut{RequestPut: &pb.PutRequest{Key: hoKey, Value: schema.HandoverRecord{ConsumedBy: inc}.Marshal()}}},
		},
	})
	if err != nil {
		return takeover{}, fmt.Errorf("slot %d: take over: %w", i, err)
	}
	if !resp.GetSucceeded() {
		return takeover{}, fmt.Errorf("slot %d: claim %d lost before serving", i, inc)
	}
	var t takeover
	t.at = time.Now()
	rs := resp.GetResponses()
	if len(rs) != 3 {
		return takeover{}, fmt.Errorf("slot %d: take over: %d responses, want 3", i, len(rs))
	}
	if kvs := rs[0].GetResponseRange().GetKvs(); len(kvs) > 0 {
		a.mu.Lock()
		mine := a.written[slotKey{job, i}]
		a.mu.Unlock()
		t.previous = mine == nil || !bytes.Equal(kvs[0].GetValue(), mine)
		if t.previous {
			holder, err := schema.ParseRestore(kvs[0].GetValue())
			if err != nil {
				a.log.Warn("slot restore record unreadable: waiting a whole TTL", "job", job, "slot", i, "err", err)
			}
			t.holder = holder
		}
	}
	if kvs := rs[1].GetResponseRange().GetKvs(); len(kvs) > 0 {
		rec, err := schema.ParseHandoverRecord(kvs[0].GetValue())
		switch {
		case err != nil:
			a.log.Warn("slot handover record unreadable: waiting a whole TTL", "job", job, "slot", i, "err", err)
		case rec.ConsumedBy == 0 && rec.RevokedRevision > 0:
			value := rec
			value.ConsumedBy = inc
			// Record what this claim consumed (the put above wrote the marker).
			_ = a.putWhileClaimed(ctx, job, i, inc, hoKey, value.Marshal())
			t.record = &rec
		}
	}
	return t, nil
}

// putWhileClaimed puts key=value only while claim inc of slot i is held.
func (a *Agent) putWhileClaimed(ctx context.Context, job string, i int32, inc int64, key, value []byte) error {
	_, err := a.txnWhileClaimed(ctx, job, i, inc, putOp(key, value))
	return err
}

// txnWhileClaimed runs ops in one Txn only while claim inc of slot i is
// held (the slot key's create revision is inc): every write a claim makes
// goes through it or compares the same (checkpoint pointers), so a claim
// that was lost, even one that does not know it yet, writes nothing.
func (a *Agent) txnWhileClaimed(ctx context.Context, job string, i int32, inc int64, ops ...*pb.RequestOp) (*pb.TxnResponse, error) {
	return a.txnWhileClaimedIf(ctx, job, i, inc, nil, ops...)
}

// errCompareFailed: txnWhileClaimedIf's claim holds, another compare failed.
var errCompareFailed = errors.New("compare failed")

// txnWhileClaimedIf is txnWhileClaimed with more compares: it returns
// errCompareFailed if the claim holds but one of cmps failed.
func (a *Agent) txnWhileClaimedIf(ctx context.Context, job string, i int32, inc int64, cmps []*pb.Compare, ops ...*pb.RequestOp) (*pb.TxnResponse, error) {
	cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	key := []byte(schema.SlotKey(job, i))
	req := &pb.TxnRequest{Compare: append([]*pb.Compare{pserver.FenceCompareKey(key, inc)}, cmps...), Success: ops}
	if len(cmps) > 0 { // on failure, the slot key tells a held claim from a lost one
		req.Failure = []*pb.RequestOp{{Request: &pb.RequestOp_RequestRange{RequestRange: &pb.RangeRequest{Key: key}}}}
	}
	resp, err := a.meta.Txn(cctx, req)
	if err != nil {
		return nil, err
	}
	if !resp.GetSucceeded() {
		if len(cmps) > 0 {
			if kvs := resp.GetResponses()[0].GetResponseRange().GetKvs(); len(kvs) == 1 && kvs[0].CreateRevision == inc {
				return nil, fmt.Errorf("slot %d: %w", i, errCompareFailed)
			}
		}
		return nil, fmt.Errorf("slot %d: claim %d lost", i, inc)
	}
	return resp, nil
}

func putOp(key, value []byte) *pb.RequestOp {
	return &pb.RequestOp{Request: &pb.RequestOp_RequestPut{RequestPut: &pb.PutRequest{Key: key, Value: value}}}
}

// publish writes, in one Txn that requires claim h.incarnation, the slot's
// restore record rec and, for a sync job restored from a version or taken
// over from another holder (previous), the rollback every other slot of
// the job follows, on a new trajectory epoch. It returns the record as
// written.
//
// The record (slot, version, md5, source, reason, incarnation, lease TTL)
// is what `raftps job status` shows and what checkers verify against the
// pointers; it is also the handover marker (see claim), so it is durable
// before the slot is served, or the slot is not served. The rollback is
// the claim's too: a claim lost during its restore (up to a minute) must
// not roll the other slots back while the real holder stays ahead, nor
// leave a rollback key behind a deleted job.
func (a *Agent) publish(ctx context.Context, spec *pb.JobSpec, h *hosted, rec *pb.RestoreRecord, previous bool) ([]byte, error) {
	return a.publishRecord(ctx, spec, h, rec, spec.Mode == pb.UpdateMode_UPDATE_MODE_SYNC && (rec.Version > 0 || previous))
}

// publishRecord is publish with the rollback decided by the caller (a
// promoted backup publishes none: it serves the state the old primary
// acknowledged).
//
// The rollback is written only if the job's rollback key is still the
// one this call read (its mod revision compared): two slots restored at
// once both read epoch e and both wrote e+1, the later overwriting the
// earlier, so the earlier slot, already training on e+1, followed the
// later's record and rolled back alone while the others went on: a sync
// job whose slots wait for steps the others never make (CI's
// TestBrowserDashboard, after its no-quorum pause: slots 0 and 2 at step
// 27, slot 1 back at 20, for three minutes). A write that loses the race
// reads the record again and takes the next epoch.
func (a *Agent) publishRecord(ctx context.Context, spec *pb.JobSpec, h *hosted, rec *pb.RestoreRecord, rollback bool) ([]byte, error) {
	b, err := schema.MarshalRestore(rec)
	if err != nil {
		return nil, err
	}
	for attempt := 0; ; attempt++ {
		ops := []*pb.RequestOp{putOp([]byte(schema.RestoreKey(spec.Name, h.key.slot)), b)}
		epoch, seen := h.epoch, int64(0) // seen: the rollback key's mod revision as read (0: none)
		if cur, rev, ok := a.readRollback(ctx, spec.Name, attempt > 0); ok {
			h.rollbackRev, epoch, seen = rev, cur.Epoch, rev
		}
		// A new trajectory starts at the restored version: every slot follows
		// it and labels what it writes from now on with the new epoch, so no
		// version mixes the old trajectory with the new. That includes a slot
		// served before that falls back to the initializer (no globally
		// consistent version kept): the others reset to the initializer too,
		// or the model would be half new, and this slot's step-N version would
		// carry the number of the others' step-N version of the abandoned
		// trajectory.
		var cmps []*pb.Compare
		if rollback {
			epoch++
			v := schema.Rollback{Version: rec.Version, Slot: h.key.slot, Node: a.cfg.NodeID, Epoch: epoch}.Marshal()
			ops = append(ops, putOp([]byte(schema.RollbackKey(spec.Name)), v))
			cmps = append(cmps, &pb.Compare{Target: pb.Compare_MOD, Result: pb.Compare_EQUAL,
				Key: []byte(schema.RollbackKey(spec.Name)), TargetUnion: &pb.Compare_ModRevision{ModRevision: seen}})
		}
		if a.publishHook != nil {
			a.publishHook(h)
		}
		resp, err := a.txnWhileClaimedIf(ctx, spec.Name, h.key.slot, h.incarnation, cmps, ops...)
		if errors.Is(err, errCompareFailed) && attempt < maxPublishAttempts-1 {
			continue // another slot's rollback came first: on top of it
		}
		if err != nil {
			return nil, err
		}
		h.epoch = epoch
		if rollback {
			h.rollbackRev = resp.GetHeader().GetRevision()
		}
		return b, nil
	}
}

// maxPublishAttempts bounds publishRecord's rounds against other slots'
// concurrent rollbacks (one per other slot restoring at once is enough).
const maxPublishAttempts = 8

// finish handles a slot of a job that ended: a last checkpoint, then stop
// serving and release the claim.
func (a *Agent) finish(ctx context.Context, h *hosted) {
	snap := h.slot.Snapshot()
	if h.spec.Checkpoint != nil {
		_, _ = a.checkpoint(ctx, h, snap) // skipped if that version is written
	}
	a.server.Unhost(h.key.job, h.key.slot)
	h.stopReplication("job ended")
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

// holdsBackup reports whether this node holds a backup of (job, slot).
func (a *Agent) holdsBackup(job string, slot int32) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.backups[slotKey{job, slot}] != nil
}

// stopReplication ends h's replication, if any (h stops serving).
func (h *hosted) stopReplication(why string) {
	if h.repl != nil {
		h.repl.stop(why)
	}
}
