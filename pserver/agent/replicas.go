package agent

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"

	pb "github.com/raftps/raftps/api/raftpspb"
	"github.com/raftps/raftps/pserver"
	"github.com/raftps/raftps/pserver/replica"
	"github.com/raftps/raftps/pserver/wire"
	"github.com/raftps/raftps/schema"
)

// Replicated slots (issue 34; pserver/DESIGN.md, "Replicated slots").
//
// A primary (the agent that claimed slot s of a job with replicas R >= 2
// and built it from the initializer) writes the slot's schema.ReplicaRecord
// before it serves: itself as primary, R-1 other live pserver nodes as
// backups (PServerPeers), the claim's incarnation. Each backup's agent
// finds the record (reconcile reads /jobs/<job>/replicas/), builds the
// slot from the same initializer (same spec and seed: the same bytes, no
// state transfer; only the process the record names: backups.go) and serves it as a replica.Backup at the record's epoch.
// The primary's slot reports every update (Slot.OnUpdate) to a
// replication, which sends it to every in-sync backup (replica.Replicator
// over one Replicate stream per backup) and lets the push be acknowledged
// (Slot.SetAckGate) only once every in-sync backup acknowledged its
// version at the primary's epoch. A backup that fails is dropped by a Txn
// that compares the epoch and the claim (ReplicaRecord.Drop): the updates
// waiting are then acknowledged by the remaining ISR (none: R = 1
// semantics, the lease fences the primary). A drop that does not commit
// (the epoch moved: a promotion) or a backup that knows a newer epoch
// means this primary was deposed: no push waiting or to come is
// acknowledged (ErrFenced: trainers re-resolve).
//
// The master promotes a backup when the primary's node is gone (package
// master); the promoted node's agent then claims the slot and serves the
// backup's slot at once: no restore, no handover wait (the backups' epoch
// is the fence), no rollback.
//
// A slot restored from a checkpoint writes a record with no backup; it
// and a primary left with fewer backups than replicas-1 build new ones by
// state transfer (rereplicate.go).
//
// Backups go to nodes of zones no member of the slot holds when there are
// such live nodes (pickBackups; `raftps node --zone`).
//
// Not wired: bringing the other backups to the new primary's sequence (a
// backup behind it is dropped after replicateTimeout, then rebuilt).

// PServerPeers is what the agent needs to place backups: the other live
// pserver nodes, with their data path addresses. The node's gossip view
// implements it; Members without it place no backups.
type PServerPeers interface {
	PServerPeers() []schema.ReplicaMember
}

// Bounds of the replication path.
const (
	// backupReadyWait is how long a primary waits for a new backup's
	// agent to build its slot (the backup answers ErrWrongSlot until
	// then) before it drops it.
	backupReadyWait = 20 * time.Second
	// replicateTimeout bounds one update's round to the backups: a backup
	// that does not acknowledge within it is dropped.
	replicateTimeout = 5 * time.Second
)

// heldBackup is a backup this node holds of another node's slot.
type heldBackup struct {
	spec *pb.JobSpec
	b    *replica.Backup
	// learnerOf is the primary that installed the backup (re-replication,
	// rereplicate.go) until a record names it; since is when.
	learnerOf string
	since     time.Time
	// heldOver: the copy of this node's own fenced primary (holdover.go),
	// not a backup any primary replicates to.
	heldOver bool
}

// replication is a primary's side of one replicated slot. Safe for
// concurrent use.
type replication struct {
	a      *Agent
	job    string
	slot   int32
	inc    int64 // the claim's incarnation: drops require it
	r      *replica.Replicator
	s      *pserver.Slot
	want   int // backups the job asks for (replicas - 1)
	ctx    context.Context
	cancel context.CancelFunc

	recMu sync.Mutex // serializes changes of rec (drops)
	rec   schema.ReplicaRecord
	peers map[string]*peer

	lag prometheus.Gauge // raftps_pserver_replication_lag_updates of the slot

	mu      sync.Mutex
	emitted int64          // the highest seq the slot reported
	acked   int64          // every seq <= acked is acknowledged by the ISR
	done    map[int64]bool // acknowledged seqs above acked
	err     error          // set once deposed or stopped: nothing more is acknowledged
	changed chan struct{}
	// learner is the backup being built (rereplicate.go), fed every
	// update; while joining, the gate acknowledges no version in
	// (capApplied, capUntil] (capUntil 0: above capApplied), which the
	// learner has not applied yet.
	learner    *learner
	joining    bool
	capApplied int64
	capUntil   int64
}

// startReplication makes s, served under claim inc at record rec, a
// replicated primary: its updates go to rec's backups and its pushes are
// acknowledged only once they acknowledged them.
func (a *Agent) startReplication(ctx context.Context, spec *pb.JobSpec, s *pserver.Slot, inc int64, rec schema.ReplicaRecord) *replication {
	rctx, cancel := context.WithCancel(ctx)
	job := spec.Name
	rp := &replication{a: a, job: job, slot: s.Index(), inc: inc, ctx: rctx, cancel: cancel, rec: rec, s: s, want: int(spec.GetReplicas()) - 1,
		acked: s.Version(), emitted: s.Version(), done: map[int64]bool{}, changed: make(chan struct{}), peers: map[string]*peer{},
		lag: metricReplicationLag.WithLabelValues(job, strconv.Itoa(int(s.Index())))}
	rp.lag.Set(0)
	for _, m := range rec.Backups {
		rp.peers[m.Node] = a.newPeer(rctx, m)
	}
	rp.r = replica.NewReplicator(rec.Epoch, rp.peerMap())
	s.SetEpoch(rec.Epoch) // before the slot serves: trainers' requests name it
	s.OnUpdate(func(u *pb.ReplicateRequest) {
		rp.mu.Lock()
		rp.emitted = max(rp.emitted, u.GetSeq())
		rp.lag.Set(float64(rp.emitted - rp.acked))
		if rp.learner != nil {
			rp.learner.add(u)
		}
		rp.mu.Unlock()
		go rp.replicate(u)
	})
	s.SetAckGate(rp.wait)
	go rp.rereplicate()
	return rp
}

func (rp *replication) peerMap() map[string]replica.Peer {
	out := make(map[string]replica.Peer, len(rp.peers))
	for n, p := range rp.peers {
		out[n] = p
	}
	return out
}

// stop ends the replication: pushes waiting get ErrFenced.
func (rp *replication) stop(why string) {
	rp.fail(wire.Errorf(wire.ErrFenced, "slot %d: %s", rp.slot, why))
	rp.cancel()
	metricReplicationLag.DeleteLabelValues(rp.job, strconv.Itoa(int(rp.slot)))
	rp.recMu.Lock()
	for _, p := range rp.peers {
		p.close()
	}
	rp.recMu.Unlock()
}

// unreplicate stops the replication and deletes the slot's record (the
// epoch compared): its backups are released and the slot runs with R = 1.
func (rp *replication) unreplicate(ctx context.Context, why string) {
	rp.stop(why)
	rp.recMu.Lock()
	rec := rp.rec
	rp.recMu.Unlock()
	rp.a.dropStaleRecord(ctx, rp.job, rp.slot, rec)
}

// wait is the slot's ack gate: it returns once every seq up to version is
// acknowledged by the in-sync backups, or the replication's error.
func (rp *replication) wait(ctx context.Context, version int64) error {
	rp.mu.Lock()
	defer rp.mu.Unlock()
	for {
		if rp.err != nil { // deposed: not even an ISR of none acknowledges
			return rp.err
		}
		if version <= rp.acked && rp.ackCapLocked(version) {
			return nil
		}
		ch := rp.changed
		rp.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
		}
		rp.mu.Lock()
		if err := ctx.Err(); err != nil {
			return err
		}
	}
}

func (rp *replication) markAcked(seq int64) {
	rp.mu.Lock()
	defer rp.mu.Unlock()
	if seq > rp.acked {
		rp.done[seq] = true
	}
	for rp.done[rp.acked+1] {
		delete(rp.done, rp.acked+1)
		rp.acked++
	}
	rp.lag.Set(float64(rp.emitted - rp.acked))
	close(rp.changed)
	rp.changed = make(chan struct{})
}

func (rp *replication) fail(err error) {
	rp.mu.Lock()
	defer rp.mu.Unlock()
	if rp.err == nil {
		rp.err = err
		close(rp.changed)
		rp.changed = make(chan struct{})
	}
}

// replicate sends update u to the in-sync backups until they all
// acknowledged it: a backup that fails is dropped (a Raft commit) and u
// sent again to the ones left; a deposed primary stops.
func (rp *replication) replicate(u *pb.ReplicateRequest) {
	for rp.ctx.Err() == nil {
		cctx, cancel := context.WithTimeout(rp.ctx, replicateTimeout)
		err := rp.r.Replicate(cctx, u)
		cancel()
		if err == nil {
			rp.markAcked(u.GetSeq())
			return
		}
		if rp.ctx.Err() != nil {
			return
		}
		var be *replica.BackupError
		switch {
		case !errors.As(err, &be): // (Replicator returns only *BackupError)
			rp.a.log.Warn("replicate", "job", rp.job, "slot", rp.slot, "seq", u.GetSeq(), "err", err)
		case be.Deposed():
			rp.deposed(be)
			return
		default:
			err = rp.drop(be)
			if errors.Is(err, errDeposed) {
				rp.deposed(err)
				return
			}
			if err == nil {
				continue // send again to the ISR left
			}
			rp.a.log.Warn("replica drop not committed; retrying", "job", rp.job, "slot", rp.slot, "err", err)
		}
		select {
		case <-rp.ctx.Done():
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// errClaimHeld: a promoted node cannot claim the slot yet: the old
// primary's claim is still there (its lease ends when the master revokes
// it, right after the promotion, or at its TTL).
var errClaimHeld = errors.New("agent: the slot's claim is still held by its old primary")

var errDeposed = errors.New("deposed: the slot's replica record moved to a newer epoch")

func (rp *replication) deposed(cause error) {
	rp.a.log.Warn("replicated slot deposed: acknowledging nothing more", "job", rp.job, "slot", rp.slot, "epoch", rp.r.Epoch(), "cause", cause)
	rp.fail(wire.Errorf(wire.ErrFenced, "slot %d: this primary was deposed (epoch %d): %v", rp.slot, rp.r.Epoch(), cause))
	rp.s.Depose(0) // trainers' requests naming an epoch are refused from now on, before they read or apply
}

// drop removes be's failed backups from the ISR with one Txn that
// compares the record's epoch and the claim; then the replicator runs at
// the new epoch with the backups left. errDeposed if the Txn fails its
// compare. A drop already made for be's epoch (another update's) is not
// made again.
func (rp *replication) drop(be *replica.BackupError) error {
	rp.recMu.Lock()
	defer rp.recMu.Unlock()
	if rp.rec.Epoch != be.Epoch {
		return nil // reconfigured meanwhile: send again
	}
	next := rp.rec
	for _, n := range be.Failed {
		d, err := next.Drop(n)
		if err != nil {
			continue
		}
		next = d
	}
	resp, err := rp.writeRecord(next)
	if err != nil {
		return err
	}
	if !resp.GetSucceeded() {
		return fmt.Errorf("%w (was %d)", errDeposed, rp.rec.Epoch)
	}
	next.Epoch = resp.GetHeader().GetRevision()
	for _, n := range be.Failed {
		if p := rp.peers[n]; p != nil {
			p.close()
			delete(rp.peers, n)
		}
	}
	rp.rec = next
	rp.r.SetConfig(next.Epoch, rp.peerMap())
	rp.s.SetEpoch(next.Epoch)
	rp.a.log.Warn("backup dropped from the in-sync set", "job", rp.job, "slot", rp.slot, "dropped", be.Failed,
		"epoch", next.Epoch, "isr", len(next.Backups), "cause", be)
	return nil
}

// peer is one backup as the primary reaches it: a Replicate stream over a
// connection to the backup's pserver port, opened again while the backup
// is not ready yet (ErrWrongSlot within backupReadyWait of its start).
type peer struct {
	node    string
	cc      *grpc.ClientConn
	ctx     context.Context
	readyBy time.Time
	dialErr error

	mu sync.Mutex
	st *replica.Stream
}

func (a *Agent) newPeer(ctx context.Context, m schema.ReplicaMember) *peer {
	p := &peer{node: m.Node, ctx: ctx, readyBy: time.Now().Add(backupReadyWait)}
	// The node's options last: its TLS credentials replace wire's plaintext.
	p.cc, p.dialErr = grpc.NewClient(m.Addr, append(wire.DialOptions(), a.cfg.DialOptions...)...)
	return p
}

func (p *peer) stream() (*replica.Stream, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.dialErr != nil {
		return nil, p.dialErr
	}
	if p.st == nil {
		st, err := replica.NewStream(p.ctx, pb.NewReplicaClient(p.cc))
		if err != nil {
			return nil, err
		}
		p.st = st
	}
	return p.st, nil
}

// reset forgets st (failed) if it is still the current stream.
func (p *peer) reset(st *replica.Stream) {
	p.mu.Lock()
	if p.st == st {
		p.st = nil
	}
	p.mu.Unlock()
}

// Replicate implements replica.Peer.
func (p *peer) Replicate(ctx context.Context, req *pb.ReplicateRequest) (*pb.ReplicateAck, error) {
	for {
		st, err := p.stream()
		if err != nil {
			return nil, err
		}
		ack, err := st.Replicate(ctx, req)
		if err == nil || !errors.Is(err, replica.ErrWrongSlot) || time.Now().After(p.readyBy) {
			return ack, err
		}
		p.reset(st) // not a backup yet: its agent is building the slot
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
}

func (p *peer) close() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.st != nil {
		_ = p.st.Close()
		p.st = nil
	}
	if p.cc != nil {
		_ = p.cc.Close()
	}
}

// readReplicas returns job's replica records by slot (epoch = mod revision).
func (a *Agent) readReplicas(ctx context.Context, job string) (map[int32]schema.ReplicaRecord, bool) {
	key, end := schema.PrefixRange(schema.ReplicaPrefix(job))
	cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	resp, err := a.meta.Range(cctx, &pb.RangeRequest{Key: key, RangeEnd: end, Serializable: true})
	cancel()
	if err != nil {
		return nil, false
	}
	out := map[int32]schema.ReplicaRecord{}
	for _, kv := range resp.Kvs {
		if _, i, r, ok := schema.ParseReplicaKV(kv); ok {
			out[i] = r
		}
	}
	return out, true
}

// placeBackups writes slot i's first replica record (no record may exist),
// with this node as primary and up to R-1 other live pserver nodes as
// backups, while claim inc holds. It returns the record (with its epoch),
// or ok false if the job is not replicated, no backup could be placed or
// the Txn did not commit (the slot then runs with R = 1).
func (a *Agent) placeBackups(ctx context.Context, spec *pb.JobSpec, i int32, inc int64, initialized bool) (rec schema.ReplicaRecord, ok bool) {
	_, has := a.members.(PServerPeers)
	if spec.GetReplicas() < 2 || a.cfg.Replicas == nil || !has {
		return rec, false
	}
	rec = schema.ReplicaRecord{Primary: schema.ReplicaMember{Node: a.cfg.NodeID, Addr: a.cfg.Addr, Zone: a.cfg.Zone, Instance: a.cfg.Instance}, Incarnation: inc}
	cands := a.backupCandidates(rec)
	if len(cands) == 0 {
		a.log.Warn("replicated slot: no other live pserver node for a backup; serving with R = 1", "job", spec.Name, "slot", i)
		return rec, false
	}
	if initialized {
		rec.Backups = pickBackups(cands, rec, int(i), int(spec.GetReplicas())-1) // spread the slots' backups
	}
	cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	out, err := a.meta.Txn(cctx, &pb.TxnRequest{
		Compare: []*pb.Compare{schema.EpochCompare(spec.Name, i, 0), pserver.FenceCompare(spec.Name, i, inc)},
		Success: []*pb.RequestOp{putOp([]byte(schema.ReplicaKey(spec.Name, i)), rec.Marshal())},
	})
	cancel()
	if err != nil || !out.GetSucceeded() {
		a.log.Warn("replicated slot: replica record not written; serving with R = 1", "job", spec.Name, "slot", i, "err", err)
		return rec, false
	}
	rec.Epoch = out.GetHeader().GetRevision()
	return rec, true
}

// claimPromoted serves slot i, whose record names this node as primary
// (the master promoted it), from the backup this node holds: it claims
// the slot under lease, adopts the record's epoch (the backup then
// refuses every message of the old primary), and serves the backup's
// slot at once: no restore, no handover wait, no rollback (the fence is
// the epoch; pserver/DESIGN.md). The remaining backups of the record
// become its ISR.
func (a *Agent) claimPromoted(ctx context.Context, spec *pb.JobSpec, i int32, lease int64, rec schema.ReplicaRecord) error {
	k := slotKey{spec.Name, i}
	start := time.Now()
	cctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	inc, ok, err := pserver.ClaimSlot(cctx, a.meta, spec.Name, i, a.cfg.NodeID, a.cfg.Addr, lease)
	cancel()
	if err != nil {
		return err
	}
	if !ok {
		return errClaimHeld
	}
	if _, err := a.takeOver(ctx, spec.Name, i, inc); err != nil { // marks the handover record consumed
		a.releaseKey(ctx, spec.Name, i, inc)
		return err
	}
	a.mu.Lock()
	hb := a.backups[k]
	what := "backup promoted"
	if hb != nil && hb.heldOver {
		what = "fenced primary's held-over state served again"
	}
	if hb != nil {
		hb.b.SetEpoch(rec.Epoch) // before serving: no old-epoch update is applied from now on
		a.cfg.Replicas.Remove(spec.Name, i)
		delete(a.backups, k)
	}
	a.mu.Unlock()
	if hb == nil {
		a.releaseKey(ctx, spec.Name, i, inc)
		return fmt.Errorf("slot %d: promoted, but this node holds no backup of it", i)
	}
	s := hb.b.Slot()
	until := a.deadline(lease)
	if until == nil || a.currentLease() != lease {
		s.Close()
		a.releaseKey(ctx, spec.Name, i, inc)
		return fmt.Errorf("slot %d: lease %d lost while promoting; not serving", i, lease)
	}
	s.SetDeadline(until)
	h := &hosted{key: k, spec: spec, slot: s, incarnation: inc, until: until,
		writer: a.ckpt.Writer(spec.Name, i), lastCkptStep: s.Step(), lastCkptTime: time.Now()}
	rr := &pb.RestoreRecord{Slot: i, Version: s.Version(), Source: "promoted backup",
		Reason:      fmt.Sprintf("%s at epoch %d with version %d, step %d (no restore, no rollback)", what, rec.Epoch, s.Version(), s.Step()),
		Incarnation: inc, LeaseTtl: a.cfg.LeaseTTL, UnixNano: time.Now().UnixNano()}
	b, err := a.publishRecord(ctx, spec, h, rr, false)
	if err != nil {
		s.Close()
		a.releaseKey(ctx, spec.Name, i, inc)
		return fmt.Errorf("slot %d: restore record not written, not serving: %w", i, err)
	}
	h.repl = a.startReplication(ctx, spec, s, inc, rec)
	a.mu.Lock()
	a.written[k] = b
	if a.lease != lease {
		a.mu.Unlock()
		h.repl.stop("lease lost while promoting")
		s.Close()
		return fmt.Errorf("slot %d: lease %d lost while promoting; not serving", i, lease)
	}
	a.hosted[k] = h
	a.mu.Unlock()
	a.startCheckpoints(ctx, h, s)
	a.feedTrainersTo(ctx, h)
	a.server.Host(spec.Name, i, s)
	took := time.Since(start)
	a.log.Info("promoted backup serving the slot", "job", spec.Name, "slot", i, "epoch", rec.Epoch, "version", s.Version(),
		"step", s.Step(), "isr", len(rec.Backups), "took", took.Round(time.Millisecond))
	metricFailovers.Inc()
	_, _ = a.meta.RecordJobEvent(ctx, &pb.JobEvent{Type: pb.JobEvent_PSERVER_PROMOTED, Job: spec.Name, Version: s.Version(),
		Message: fmt.Sprintf("slot %d on %s: %s at epoch %d, version %d, step %d, in %v (no restore, no rollback)",
			i, a.cfg.NodeID, what, rec.Epoch, s.Version(), s.Step(), took.Round(time.Millisecond))})
	return nil
}

// handOffLostSlot handles slot i's record that names this node as
// primary while it neither serves the slot nor holds a backup of it: it
// lost the slot (its lease ended while it was cut off from the Raft
// leader, say, and it fenced the slot), though gossip never reported it
// gone, so the master promotes nobody. Every update this node
// acknowledged is in each in-sync backup's state (the ack gate), so the
// first backup that is a live pserver peer is promoted, as the master's
// failover does (ReplicaRecord.Promote in a Txn that compares the epoch,
// so a promotion or drop meanwhile wins), and this node's claim, if it
// still holds one (own: its incarnation, 0 if none), is released so that
// the promoted node can claim the slot and serve what it holds, with no
// restore. With no such backup the record is deleted (dropStaleRecord)
// and the slot goes the R = 1 way. (Deleting it even with a backup in
// sync threw away every acknowledged update since the last checkpoint:
// integration/jepsen's TestJepsenReplicatedSlots, partition-primary-lead.)
func (a *Agent) handOffLostSlot(ctx context.Context, job string, i int32, rec schema.ReplicaRecord, own int64) {
	live := map[string]string{} // node → the instance it runs
	if pp, ok := a.members.(PServerPeers); ok {
		for _, m := range pp.PServerPeers() {
			live[m.Node] = m.Instance
		}
	}
	for _, b := range rec.Backups {
		inst, ok := live[b.Node]
		if !ok || b.Node == a.cfg.NodeID || !b.MayRun(inst) {
			continue // dead, this node, or restarted since the record named it (backups.go)
		}
		next, err := rec.Promote(b.Node)
		if err != nil {
			continue
		}
		cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		out, err := a.meta.Txn(cctx, &pb.TxnRequest{
			Compare: []*pb.Compare{schema.EpochCompare(job, i, rec.Epoch)},
			Success: []*pb.RequestOp{putOp([]byte(schema.ReplicaKey(job, i)), next.Marshal())},
		})
		cancel()
		if err != nil || !out.GetSucceeded() {
			return // the record changed (or is unknown): the next round reads it anew
		}
		if own != 0 {
			a.releaseKey(ctx, job, i, own)
		}
		a.log.Warn("replicated slot this node lost: backup promoted", "job", job, "slot", i, "to", b.Node,
			"epoch", out.GetHeader().GetRevision())
		return
	}
	a.dropStaleRecord(ctx, job, i, rec)
}

// dropStaleRecord deletes slot i's record that names this node as
// primary while it neither serves the slot nor holds a backup of it (it
// lost the slot): with the epoch compared, so a promotion meanwhile wins.
// The slot then goes the R = 1 way (claim, handover wait, restore).
func (a *Agent) dropStaleRecord(ctx context.Context, job string, i int32, rec schema.ReplicaRecord) {
	cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	k := []byte(schema.ReplicaKey(job, i))
	resp, err := a.meta.Txn(cctx, &pb.TxnRequest{
		Compare: []*pb.Compare{schema.EpochCompare(job, i, rec.Epoch)},
		Success: []*pb.RequestOp{{Request: &pb.RequestOp_RequestDeleteRange{RequestDeleteRange: &pb.DeleteRangeRequest{Key: k}}}},
	})
	if err == nil && resp.GetSucceeded() {
		a.log.Warn("replica record of a slot this node lost deleted: the slot falls back to a restore", "job", job, "slot", i, "epoch", rec.Epoch)
	}
}

// watchPromotions starts a reconciliation round at once when a replica
// record naming this node as primary is written (the master's or a
// report's promotion), so the promoted node claims and serves the slot it
// holds without waiting for its next Poll (300 ms by default: a third of
// a failover in `raftps demo`). The poll stays the backstop: a watch that
// fails or ends is opened again after a Poll, and events missed meanwhile
// are found by the rounds.
func (a *Agent) watchPromotions(ctx context.Context) {
	key, end := schema.PrefixRange(schema.JobsPrefix)
	for ctx.Err() == nil {
		wctx, cancel := context.WithCancel(ctx)
		ch, err := a.meta.Watch(wctx, &pb.WatchRequest{Key: []byte(key), RangeEnd: []byte(end)})
		if err == nil {
			for resp := range ch {
				for _, ev := range resp.GetEvents() {
					if a.primaryHere(ev.GetKv()) {
						select {
						case a.kick <- struct{}{}:
						default: // a round is already due
						}
					}
				}
			}
		}
		cancel()
		select {
		case <-ctx.Done():
		case <-time.After(a.cfg.Poll):
		}
	}
}

// primaryHere reports whether kv is a replica record naming this node as
// the primary of a slot it holds a backup of: a promotion to this node
// (its own writes, as primary, are not).
func (a *Agent) primaryHere(kv *pb.KeyValue) bool {
	job, kind, id, ok := schema.ParseJobKey(string(kv.GetKey()))
	if !ok || kind != schema.KindReplicas || len(kv.GetValue()) == 0 {
		return false
	}
	slot, err := schema.ParseSlot(id)
	if err != nil {
		return false
	}
	rec, err := schema.ParseReplicaRecord(kv.GetValue(), kv.GetModRevision())
	return err == nil && rec.Primary.Node == a.cfg.NodeID && a.holdsBackup(job, slot)
}

// pickBackups chooses up to n of cands (sorted by node, none of them a
// member of rec) as new backups of rec's slot. The candidates are taken
// in order from the one at rot (the slot index: the slots' backups spread
// over the nodes), except that a candidate in a zone no member holds yet
// (rec's primary and backups, and the picks before it) comes before one
// in a zone already held: with nodes in two zones, a slot's primary and
// its backup end in different zones whenever a live node allows it
// (HDFS's and Ceph's rule: replicas across failure domains). Nodes
// without a zone never count as sharing one. Without zones the picks are
// cands[rot], cands[rot+1], ... (mod len).
func pickBackups(cands []schema.ReplicaMember, rec schema.ReplicaRecord, rot, n int) []schema.ReplicaMember {
	if len(cands) == 0 || n <= 0 {
		return nil
	}
	held := map[string]bool{}
	hold := func(m schema.ReplicaMember) {
		if m.Zone != "" {
			held[m.Zone] = true
		}
	}
	hold(rec.Primary)
	for _, b := range rec.Backups {
		hold(b)
	}
	order := make([]schema.ReplicaMember, 0, len(cands))
	for k := range cands {
		order = append(order, cands[(rot+k)%len(cands)])
	}
	var picks []schema.ReplicaMember
	for len(picks) < n && len(order) > 0 {
		at := 0
		for k, m := range order {
			if m.Zone != "" && !held[m.Zone] {
				at = k
				break
			}
		}
		picks = append(picks, order[at])
		hold(order[at])
		order = append(order[:at], order[at+1:]...)
	}
	return picks
}

// writeRecord writes next as the slot's replica record in a Txn that
// compares the epoch rp knows and rp's claim (the writes of a primary: a
// drop, a re-replicated backup's join); resp.Succeeded is false when
// either changed (rp is deposed). The caller holds what guards rp.rec.
func (rp *replication) writeRecord(next schema.ReplicaRecord) (*pb.TxnResponse, error) {
	cctx, cancel := context.WithTimeout(rp.ctx, 2*time.Second)
	defer cancel()
	return rp.a.meta.Txn(cctx, &pb.TxnRequest{
		Compare: []*pb.Compare{schema.EpochCompare(rp.job, rp.slot, rp.rec.Epoch), pserver.FenceCompare(rp.job, rp.slot, rp.inc)},
		Success: []*pb.RequestOp{putOp([]byte(schema.ReplicaKey(rp.job, rp.slot)), next.Marshal())},
	})
}
