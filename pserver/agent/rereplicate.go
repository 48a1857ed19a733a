package agent

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"sync"
	"time"

	"github.com/raftps/raftps/api/errs"
	pb "github.com/raftps/raftps/api/raftpspb"
	"github.com/raftps/raftps/pserver"
	"github.com/raftps/raftps/pserver/replica"
	"github.com/raftps/raftps/schema"
)

// Re-replication (issue 34; pserver/DESIGN.md, "Re-replication").
//
// A replicated primary whose record names fewer backups than the job's
// replicas-1 (after a promotion, after a drop, or a slot restored from a
// checkpoint, whose record starts with none) builds a new backup on a
// live pserver node the record does not name, while training goes on:
//
//  1. a learner attaches to the slot's update hook (every update from
//     then on is buffered, at most learnerMaxUpdates / learnerMaxBytes:
//     beyond, the build is abandoned with ErrTooFarAhead and retried),
//     then a copy-on-write snapshot is frozen with the push-id memory at
//     version v (Slot.ReplicaSnapshot) and sent on Replica.Install;
//  2. the buffered updates after v are sent on a Replicate stream, in
//     seq order, at the primary's epoch; the learner's acks count for
//     nothing (it is in no in-sync set: the ack gate does not wait for it);
//  3. once it is within learnerJoinLag of the slot's version, the ack gate
//     is capped at the learner's applied seq (no push is acknowledged
//     that the learner has not applied), and once it has applied every
//     update acknowledged so far, the primary adds it to the record with
//     a Txn that compares the epoch and the claim (the join). From the
//     join, the Replicator sends every update to it too; the cap stays
//     until the learner has applied every update emitted before the join;
//  4. a join Txn that fails its compare means this primary was deposed:
//     the learner never joins and its node drops it (reconcileBackups:
//     a learner whose installer is no longer the record's primary, or
//     that did not join within learnerTTL, is released).
//
// Why a half-built backup can neither acknowledge nor be promoted: the
// ack gate waits only for the record's ISR, and the master promotes only
// an ISR member; the learner enters the ISR only by the join Txn, which
// commits only at the epoch the primary holds, after the learner applied
// every acknowledged update, with the gate capped at what it applied.

// Bounds of re-replication.
const (
	// rereplicatePoll is how often a primary checks its ISR's size.
	rereplicatePoll = 200 * time.Millisecond
	// rereplicateRetry is the wait after a build failed.
	rereplicateRetry = time.Second
	// learnerMaxUpdates and learnerMaxBytes bound the updates a learner
	// buffers on the primary while its install is sent.
	learnerMaxUpdates = 1 << 16
	learnerMaxBytes   = 1 << 30
	// learnerJoinLag: a learner this close to the slot's version joins.
	learnerJoinLag = 16
	// learnerTTL: a backup node releases a learner that has not joined
	// within it.
	learnerTTL = 5 * time.Minute
	// installTimeout bounds one install and one catch-up round.
	installTimeout = 10 * time.Minute
)

// beforeJoinHook, if set (tests), runs right before a join Txn.
var beforeJoinHook func(job string, slot int32, node string)

// learner is a backup being built: the updates it has not been sent yet.
type learner struct {
	node string

	mu    sync.Mutex
	buf   []*pb.ReplicateRequest
	bytes int64
	err   error
	more  chan struct{} // (cap 1) an update was added
}

func (l *learner) add(u *pb.ReplicateRequest) {
	l.mu.Lock()
	if l.err == nil {
		n := int64(0)
		for _, g := range u.GetGrads() {
			n += int64(len(g.GetData()))
		}
		if len(l.buf) >= learnerMaxUpdates || l.bytes+n > learnerMaxBytes {
			l.err = fmt.Errorf("%w: re-replication to %s: more than %d updates or %d bytes arrived while the new backup was built; build abandoned",
				replica.ErrTooFarAhead, l.node, learnerMaxUpdates, learnerMaxBytes)
			l.buf, l.bytes = nil, 0
		} else {
			l.buf, l.bytes = append(l.buf, u), l.bytes+n
		}
	}
	l.mu.Unlock()
	select {
	case l.more <- struct{}{}:
	default:
	}
}

// take returns the buffered updates (emptying the buffer), or the error.
func (l *learner) take() ([]*pb.ReplicateRequest, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	b := l.buf
	l.buf, l.bytes = nil, 0
	return b, l.err
}

// ackCap is the version the ack gate may acknowledge up to (gate):
// unlimited unless a learner is joining.
func (rp *replication) ackCapLocked(version int64) bool {
	if !rp.joining {
		return true
	}
	return version <= rp.capApplied || (rp.capUntil > 0 && version > rp.capUntil)
}

// setCap sets the joining learner's applied seq (the gate's cap).
func (rp *replication) setCap(joining bool, applied int64) {
	rp.mu.Lock()
	rp.joining, rp.capApplied = joining, applied
	if !joining {
		rp.capUntil = 0
	}
	close(rp.changed)
	rp.changed = make(chan struct{})
	rp.mu.Unlock()
}

// backupCandidates returns the live pserver nodes other than this one and
// those of rec, sorted by name (placeBackups' and re-replication's rule:
// slot i's backups start at index i).
func (a *Agent) backupCandidates(rec schema.ReplicaRecord) []schema.ReplicaMember {
	pp, ok := a.members.(PServerPeers)
	if !ok {
		return nil
	}
	var cands []schema.ReplicaMember
	for _, m := range pp.PServerPeers() {
		if m.Node != a.cfg.NodeID && m.Addr != "" && m.Node != rec.Primary.Node && !isBackup(rec, m.Node) {
			cands = append(cands, m)
		}
	}
	sort.Slice(cands, func(x, y int) bool { return cands[x].Node < cands[y].Node })
	return cands
}

// rereplicate keeps the slot's ISR at want backups while the replication
// lives: one build at a time, on the next candidate after a failure.
func (rp *replication) rereplicate() {
	t := time.NewTicker(rereplicatePoll)
	defer t.Stop()
	tries := 0
	for {
		select {
		case <-rp.ctx.Done():
			return
		case <-t.C:
		}
		rp.mu.Lock()
		failed := rp.err != nil
		rp.mu.Unlock()
		if failed {
			return
		}
		rp.recMu.Lock()
		rec := rp.rec
		rp.recMu.Unlock()
		if len(rec.Backups) >= rp.want {
			tries = 0
			continue
		}
		cands := rp.a.backupCandidates(rec)
		if len(cands) == 0 {
			continue
		}
		cand := pickBackups(cands, rec, int(rp.slot)+tries, 1)[0]
		err := rp.build(cand)
		if err == nil {
			tries = 0
			continue
		}
		tries++
		if rp.ctx.Err() != nil {
			return
		}
		rp.a.log.Warn("re-replication: build abandoned; retrying", "job", rp.job, "slot", rp.slot, "node", cand.Node, "err", err)
		select {
		case <-rp.ctx.Done():
			return
		case <-time.After(rereplicateRetry):
		}
	}
}

// build builds a backup of the slot on cand and joins it to the ISR (see
// the top of this file); nil once it joined and caught up.
func (rp *replication) build(cand schema.ReplicaMember) (err error) {
	start := time.Now()
	l := &learner{node: cand.Node, more: make(chan struct{}, 1)}
	rp.mu.Lock()
	if rp.err != nil {
		rp.mu.Unlock()
		return rp.err
	}
	rp.learner = l
	rp.mu.Unlock()
	joined := false
	defer func() {
		rp.mu.Lock()
		if rp.learner == l {
			rp.learner = nil
		}
		rp.mu.Unlock()
		rp.setCap(false, 0)
	}()

	snap, ids, inc := rp.s.ReplicaSnapshot()
	v, step := snap.Version, snap.Step
	blobs, err := pserver.EncodeSnapshot(snap)
	snap = nil // the blobs hold the state now: one copy, not two
	if err != nil {
		return err
	}
	p := rp.a.newPeer(rp.ctx, cand)
	defer func() {
		if !joined {
			p.close()
		}
	}()
	if p.dialErr != nil {
		return p.dialErr
	}
	hdr := &pb.InstallHeader{Job: rp.job, Slot: rp.slot, Epoch: rp.r.Epoch(), Primary: rp.a.cfg.NodeID,
		Version: v, Step: step, Incarnation: inc, PushIds: ids}
	ictx, cancel := context.WithTimeout(rp.ctx, installTimeout)
	_, err = replica.Install(ictx, pb.NewReplicaClient(p.cc), hdr, blobs)
	cancel()
	blobs = nil
	if err != nil {
		return fmt.Errorf("install: %w", err)
	}
	installed := time.Since(start)
	st, err := p.stream()
	if err != nil {
		return err
	}
	applied := v
	// forward sends every buffered update after applied and waits for the
	// last; it returns the learner's applied seq.
	forward := func() error {
		batch, err := l.take()
		if err != nil {
			return err
		}
		last := applied
		for _, u := range batch {
			if u.GetSeq() <= last {
				continue
			}
			req := &pb.ReplicateRequest{Job: u.GetJob(), Slot: u.GetSlot(), Epoch: rp.r.Epoch(), Seq: u.GetSeq(), Step: u.GetStep(),
				Incarnation: u.GetIncarnation(), Grads: u.GetGrads(), LrScale: u.GetLrScale(), PushIds: u.GetPushIds()}
			if err := st.Send(req); err != nil {
				_, err = st.Wait(rp.ctx, req.GetSeq(), err)
				return err
			}
			last = u.GetSeq()
		}
		if last == applied {
			return nil
		}
		wctx, cancel := context.WithTimeout(rp.ctx, replicateTimeout)
		ack, err := st.Wait(wctx, last, nil)
		cancel()
		if err != nil {
			return err
		}
		applied = ack.GetApplied()
		return nil
	}
	// untilApplied forwards until the learner applied seq; with capped,
	// the gate's cap follows it.
	untilApplied := func(target func() int64, capped bool) error {
		deadline := time.Now().Add(installTimeout)
		for applied < target() {
			rp.mu.Lock()
			failed := rp.err
			rp.mu.Unlock()
			if failed != nil {
				return failed
			}
			if time.Now().After(deadline) {
				return fmt.Errorf("re-replication to %s: not caught up within %v", cand.Node, installTimeout)
			}
			if err := forward(); err != nil {
				return err
			}
			if capped {
				rp.setCap(true, applied)
			}
			if applied < target() {
				select {
				case <-l.more:
				case <-time.After(10 * time.Millisecond):
				case <-rp.ctx.Done():
					return rp.ctx.Err()
				}
			}
		}
		return nil
	}
	emitted := func() int64 {
		rp.mu.Lock()
		defer rp.mu.Unlock()
		return rp.emitted
	}
	// Catch up to within learnerJoinLag, then cap the gate and catch up
	// to what was acknowledged.
	if err := untilApplied(func() int64 { return emitted() - learnerJoinLag }, false); err != nil {
		return err
	}
	rp.mu.Lock()
	rp.joining, rp.capApplied, rp.capUntil = true, applied, 0
	acked := rp.acked
	rp.mu.Unlock()
	if err := untilApplied(func() int64 { return acked }, true); err != nil {
		return err
	}
	if beforeJoinHook != nil {
		beforeJoinHook(rp.job, rp.slot, cand.Node)
	}
	epoch, err := rp.join(cand, p)
	if err != nil {
		return err
	}
	joined = true
	rp.mu.Lock()
	rp.capUntil = rp.emitted
	until := rp.capUntil
	rp.mu.Unlock()
	if err := untilApplied(func() int64 { return until }, true); err != nil {
		rp.dropJoined(cand.Node, err)
		return err
	}
	took := time.Since(start)
	metricRereplications.Inc()
	rp.a.log.Info("re-replication: new backup joined the in-sync set", "job", rp.job, "slot", rp.slot, "node", cand.Node,
		"epoch", epoch, "snapshot_version", v, "applied", applied, "install", installed.Round(time.Millisecond), "took", took.Round(time.Millisecond))
	_, _ = rp.a.meta.RecordJobEvent(rp.ctx, &pb.JobEvent{Type: pb.JobEvent_PSERVER_REREPLICATED, Job: rp.job, Version: applied,
		Message: fmt.Sprintf("slot %d: new backup on %s joined at epoch %d (snapshot at version %d, caught up at %d) in %v (install %v)",
			rp.slot, cand.Node, epoch, v, applied, took.Round(time.Millisecond), installed.Round(time.Millisecond))})
	return nil
}

// join adds cand (reached through p) to the ISR with a Txn that compares
// the record's epoch and the claim; errDeposed (and the replication
// fails) if the compare fails.
func (rp *replication) join(cand schema.ReplicaMember, p *peer) (int64, error) {
	rp.recMu.Lock()
	defer rp.recMu.Unlock()
	next := schema.ReplicaRecord{Primary: rp.rec.Primary, Backups: append(append([]schema.ReplicaMember(nil), rp.rec.Backups...), cand),
		Incarnation: rp.rec.Incarnation}
	if err := next.Validate(); err != nil {
		return 0, err
	}
	resp, err := rp.writeRecord(next)
	if err != nil {
		return 0, err
	}
	if !resp.GetSucceeded() {
		err := fmt.Errorf("%w (was %d): the new backup on %s does not join", errDeposed, rp.rec.Epoch, cand.Node)
		rp.deposed(err)
		return 0, err
	}
	next.Epoch = resp.GetHeader().GetRevision()
	rp.rec = next
	rp.peers[cand.Node] = p
	rp.r.SetConfig(next.Epoch, rp.peerMap())
	rp.s.SetEpoch(next.Epoch)
	return next.Epoch, nil
}

// dropJoined drops node, which joined but whose catch-up failed, from the
// ISR (the gate stays capped until it is out or the primary deposed).
func (rp *replication) dropJoined(node string, cause error) {
	for rp.ctx.Err() == nil {
		rp.recMu.Lock()
		in, epoch := isBackup(rp.rec, node), rp.rec.Epoch
		rp.recMu.Unlock()
		if !in {
			return
		}
		err := rp.drop(&replica.BackupError{Epoch: epoch, Failed: []string{node}, Errs: []error{cause}})
		if errors.Is(err, errDeposed) {
			rp.deposed(err)
			return
		}
		if err != nil {
			time.Sleep(100 * time.Millisecond)
		}
	}
}

// installBackup is the node's replica.Installer: it builds the backup of
// an Install stream from the job's spec (a job this node runs) and holds
// it as a learner of hdr's primary until the record names it.
func (a *Agent) installBackup(hdr *pb.InstallHeader, blobs map[int32][]byte) (*replica.Backup, error) {
	k := slotKey{hdr.GetJob(), hdr.GetSlot()}
	a.mu.Lock()
	spec := a.specs[k.job]
	hosting := a.hosted[k] != nil
	var inUse int64
	if spec != nil {
		inUse = a.inUseLocked()
		if hb := a.backups[k]; hb != nil {
			inUse -= SlotBytes(hb.spec)
		}
	}
	a.mu.Unlock()
	switch {
	case spec == nil || spec.GetReplicas() < 2:
		return nil, fmt.Errorf("%w: install of job %q slot %d: this node does not run a replicated job of that name", replica.ErrWrongSlot, k.job, k.slot)
	case hosting:
		return nil, fmt.Errorf("%w: install of job %q slot %d: this node serves the slot", replica.ErrWrongSlot, k.job, k.slot)
	case a.cfg.MemoryBudget > 0 && uint64(inUse+SlotBytes(spec)) > a.cfg.MemoryBudget:
		return nil, fmt.Errorf("%w: install of job %q slot %d: %d bytes over the node's memory budget (%d in use of %d)",
			errs.ErrNoCapacity, k.job, k.slot, SlotBytes(spec), inUse, a.cfg.MemoryBudget)
	}
	s, err := restoreReplica(spec, k.slot, blobs, hdr.GetPushIds(), hdr.GetIncarnation())
	if err != nil {
		return nil, fmt.Errorf("install of job %q slot %d: %w", k.job, k.slot, err)
	}
	if s.Version() != hdr.GetVersion() || s.Step() != hdr.GetStep() {
		s.Close()
		return nil, fmt.Errorf("%w: install of job %q slot %d: blobs at version %d step %d, header says %d, %d",
			errs.ErrInvalid, k.job, k.slot, s.Version(), s.Step(), hdr.GetVersion(), hdr.GetStep())
	}
	b := replica.NewBackup(k.job, s, hdr.GetEpoch())
	a.mu.Lock()
	old := a.backups[k]
	a.backups[k] = &heldBackup{spec: spec, b: b, learnerOf: hdr.GetPrimary(), since: time.Now()}
	a.mu.Unlock()
	if old != nil {
		old.b.Slot().Close()
	}
	a.log.Info("re-replication: backup installed (not in the in-sync set until the primary's join)", "job", k.job, "slot", k.slot,
		"primary", hdr.GetPrimary(), "epoch", hdr.GetEpoch(), "version", hdr.GetVersion())
	return b, nil
}

// keepLearner reports whether hb, a backup the record r (ok: present)
// does not name, is a learner still being built by r's primary.
func keepLearner(hb *heldBackup, r schema.ReplicaRecord, ok bool) bool {
	return hb.learnerOf != "" && ok && r.Primary.Node == hb.learnerOf && time.Since(hb.since) < learnerTTL
}

// restoreReplica builds slot i of spec from a ReplicaSnapshot's encoded
// blobs, push-id memory and incarnation (an Install stream's, or this
// node's own fenced slot's: holdOver).
func restoreReplica(spec *pb.JobSpec, i int32, blobs map[int32][]byte, ids *pb.PushIDState, inc int64) (*pserver.Slot, error) {
	s, err := pserver.RestoreSlot(spec, i, spec.NumPservers, blobs)
	if err != nil {
		return nil, err
	}
	if err := s.InstallState(ids, inc); err != nil {
		s.Close()
		return nil, err
	}
	return s, nil
}
