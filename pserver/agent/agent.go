// Package agent runs the pserver role of a node: it claims free parameter
// server slots of running jobs under the node's lease, restores each from
// its newest checkpoint (or the initializer), serves it, feeds it the job's
// trainer membership, checkpoints it by the job's policy, and fences it the
// moment the claim is lost.
//
//	a := agent.New(agent.Config{NodeID: "n1", Addr: grpcAddr}, meta, server, ckpt, members)
//	go a.Run(ctx)
//
// The agent decides nothing about other nodes: every claim is a Txn under
// its lease, so two agents can never serve the same slot at the same
// incarnation (DESIGN.md §5, §6).
//
// Sync jobs stay one consistent model across slots:
//   - checkpoints are step-exact: each slot snapshots inside the completion
//     of every N-th step (pserver.Slot.SnapshotEvery), so version N of every
//     slot is the model after exactly N steps;
//   - when a slot is restored from version V, it publishes V under
//     /jobs/<job>/rollback and every other slot of the job reloads V
//     (Horovod Elastic's restore-and-reset);
//   - each rollback starts a new trajectory epoch, and versions are
//     epoch*EpochStride + step, so no version can combine slots of an
//     abandoned trajectory with the new one.
//
// Restores are recorded under /jobs/<job>/restores/<slot> (shown by
// `raftps job status`) and as PSERVER_RESTORED job events.
package agent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"google.golang.org/protobuf/encoding/protojson"

	pb "github.com/raftps/raftps/api/raftpspb"
	"github.com/raftps/raftps/pserver"
	"github.com/raftps/raftps/pserver/checkpoint"
	"github.com/raftps/raftps/raftstore/client"
	"github.com/raftps/raftps/raftstore/client/concurrency"
)

// Meta is what the agent needs of the metadata store.
type Meta interface {
	pserver.Meta
	Put(ctx context.Context, req *pb.PutRequest) (*pb.PutResponse, error)
	LeaseRevoke(ctx context.Context, id int64) error
	DeleteRange(ctx context.Context, req *pb.DeleteRangeRequest) (*pb.DeleteRangeResponse, error)
	RecordJobEvent(ctx context.Context, ev *pb.JobEvent) error
	Jobs() []*pb.JobStatus
}

// Members counts the alive nodes with the pserver role (fair share of slots).
type Members interface {
	PServerNodes() int
}

// Config of the agent.
type Config struct {
	NodeID string
	// Addr is this node's gRPC address, where its PServer service listens.
	Addr string
	// LeaseTTL of the node's pserver lease in seconds (default 5).
	LeaseTTL int64
	// Poll is the interval between reconciliations (default 300ms).
	Poll   time.Duration
	Logger *slog.Logger
}

// Agent runs the pserver role.
type Agent struct {
	cfg     Config
	meta    Meta
	server  *pserver.Server
	ckpt    *checkpoint.Manager
	members Members
	log     *slog.Logger

	session *concurrency.Session
	mu      sync.Mutex
	lease   int64 // the session's lease as of the last round
	hosted  map[slotKey]*hosted
	wg      sync.WaitGroup
}

type slotKey struct {
	job  string
	slot int32
}

type hosted struct {
	key         slotKey
	spec        *pb.JobSpec
	slot        *pserver.Slot
	incarnation int64
	trainers    string // sorted, comma-joined: last SetTrainers
	writer      *checkpoint.Writer

	ckptMu        sync.Mutex // one checkpoint at a time
	lastCkptStep  int64
	lastCkptTime  time.Time
	lastVersion   int64
	checkpointing bool
	// snaps carries step-exact snapshots from the slot's SnapshotEvery
	// hook to the slot's checkpoint goroutine (latest wins when it lags).
	snaps chan *pserver.SlotSnapshot
	// epoch is the sync trajectory the slot is on (see EpochStride).
	epoch int64
	// rollbackRev is the mod revision of /jobs/<job>/rollback this slot has
	// already followed (or that was there when it was claimed).
	rollbackRev int64
}

// New returns an agent; Run starts it.
func New(cfg Config, meta Meta, server *pserver.Server, ckpt *checkpoint.Manager, members Members) *Agent {
	if cfg.LeaseTTL <= 0 {
		cfg.LeaseTTL = 5
	}
	if cfg.Poll <= 0 {
		cfg.Poll = 300 * time.Millisecond
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	return &Agent{cfg: cfg, meta: meta, server: server, ckpt: ckpt, members: members,
		session: concurrency.NewSession(meta, cfg.LeaseTTL),
		log:     cfg.Logger.With("component", "pserver-agent"), hosted: map[slotKey]*hosted{}}
}

// Run reconciles until ctx ends, then releases its slots (a graceful stop
// hands them over at once instead of waiting for the lease to expire).
func (a *Agent) Run(ctx context.Context) error {
	t := time.NewTicker(a.cfg.Poll)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			a.release()
			return nil
		case <-t.C:
		}
		id, lost, err := a.session.Ensure(ctx)
		if lost {
			a.log.Warn("pserver lease lost: fencing every hosted slot")
			a.fenceAll("lease lost")
		}
		if err != nil {
			a.log.Warn("pserver lease", "err", err)
			continue
		}
		a.mu.Lock()
		if a.lease != id {
			a.log.Info("pserver lease granted", "lease", id, "ttl_s", a.cfg.LeaseTTL)
		}
		a.lease = id
		a.mu.Unlock()
		a.reconcile(ctx)
	}
}

func (a *Agent) fenceAll(reason string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	for k, h := range a.hosted {
		a.server.Unhost(k.job, k.slot)
		h.slot.Fence()
		delete(a.hosted, k)
		a.log.Warn("slot fenced", "job", k.job, "slot", k.slot, "reason", reason)
	}
	a.lease = 0
}

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
	prefix := "/jobs/" + job + "/ps/"
	cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	resp, err := a.meta.Range(cctx, &pb.RangeRequest{Key: []byte(prefix), RangeEnd: client.PrefixEnd([]byte(prefix)), Serializable: true})
	cancel()
	if err != nil {
		return
	}
	claims := map[int32]pserver.PSValue{}
	for _, kv := range resp.Kvs {
		idx, err := strconv.Atoi(strings.TrimPrefix(string(kv.Key), prefix))
		if err != nil {
			continue
		}
		var v pserver.PSValue
		if json.Unmarshal(kv.Value, &v) == nil {
			claims[int32(idx)] = v
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
		if _, taken := claims[i]; taken {
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

// RestoreKey is /jobs/<job>/restores/<slot>: the slot's latest restore
// record (protojson pb.RestoreRecord).
func RestoreKey(job string, slot int32) string { return fmt.Sprintf("/jobs/%s/restores/%d", job, slot) }

// RollbackKey is /jobs/<job>/rollback: in a sync job, the checkpoint
// version that a restored slot went back to, which every other slot of the
// job then goes back to as well, so the model stays one consistent version
// (Horovod Elastic's restore-and-reset; DESIGN.md §6).
func RollbackKey(job string) string { return "/jobs/" + job + "/rollback" }

// Rollback is the value of RollbackKey.
type Rollback struct {
	Version int64  `json:"version"`
	Slot    int32  `json:"slot"`
	Node    string `json:"node"`
	// Epoch is the trajectory that starts at Version: versions written
	// after the rollback are labelled with it (see EpochStride).
	Epoch int64 `json:"epoch"`
}

func (a *Agent) readRollback(ctx context.Context, job string) (Rollback, int64, bool) {
	cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	resp, err := a.meta.Range(cctx, &pb.RangeRequest{Key: []byte(RollbackKey(job)), Serializable: true})
	if err != nil || len(resp.Kvs) == 0 {
		return Rollback{}, 0, false
	}
	var rb Rollback
	if json.Unmarshal(resp.Kvs[0].Value, &rb) != nil {
		return Rollback{}, 0, false
	}
	return rb, resp.Kvs[0].ModRevision, true
}

// followRollback brings every hosted slot of a sync job back to a rollback
// version published by another slot's restore.
func (a *Agent) followRollback(ctx context.Context, spec *pb.JobSpec) {
	if spec.Mode != pb.UpdateMode_UPDATE_MODE_SYNC {
		return
	}
	rb, rev, ok := a.readRollback(ctx, spec.Name)
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
		if rb.Slot == h.key.slot || a.slotOf(h).Step() <= rb.Version%EpochStride {
			a.mu.Lock()
			h.epoch = max(h.epoch, rb.Epoch)
			a.mu.Unlock()
			continue
		}
		from := h.slot.Step()
		rctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		blobs, err := a.ckpt.ReadVersion(rctx, spec.Name, rb.Version)
		cancel()
		if err != nil {
			a.log.Error("rollback: cannot read the version; this slot stays ahead (model inconsistent until the next restore)",
				"job", spec.Name, "slot", h.key.slot, "version", rb.Version, "err", err)
			continue
		}
		mine := map[int32][]byte{}
		for v, b := range blobs {
			if pserver.SlotOfVShard(v, spec.NumPservers) == h.key.slot {
				mine[v] = b
			}
		}
		s, err := pserver.RestoreSlot(spec, h.key.slot, spec.NumPservers, mine)
		if err != nil {
			a.log.Error("rollback: blobs do not decode", "job", spec.Name, "slot", h.key.slot, "version", rb.Version, "err", err)
			continue
		}
		s.SetIncarnation(h.incarnation)
		s.SetTrainers(splitIDs(h.trainers))
		a.mu.Lock()
		if a.hosted[h.key] != h {
			a.mu.Unlock()
			continue
		}
		old := h.slot
		h.slot = s
		h.lastCkptStep = s.Step()
		h.lastVersion = rb.Version
		h.epoch = rb.Epoch
		a.mu.Unlock()
		a.installHook(h, s)
		a.server.Host(spec.Name, h.key.slot, s) // fences the old slot: its waiting pushes retry on this one
		old.Close()
		a.log.Warn("rolled back to keep the sync model consistent", "job", spec.Name, "slot", h.key.slot,
			"from_step", from, "to_version", rb.Version, "epoch", rb.Epoch, "because", fmt.Sprintf("slot %d restored on %s", rb.Slot, rb.Node))
		_ = a.meta.RecordJobEvent(ctx, &pb.JobEvent{Type: pb.JobEvent_PSERVER_RESTORED, Job: spec.Name, Version: rb.Version,
			Message: fmt.Sprintf("slot %d on %s: rolled back from step %d to version %d (slot %d was restored)", h.key.slot, a.cfg.NodeID, from, rb.Version, rb.Slot)})
	}
}

func splitIDs(s string) []string {
	if s == "" {
		return nil
	}
	return strings.Split(s, ",")
}

func (a *Agent) hosting(job string, slot int32) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	_, ok := a.hosted[slotKey{job, slot}]
	return ok
}

// claim takes slot i under lease, restores it and serves it.
func (a *Agent) claim(ctx context.Context, spec *pb.JobSpec, i int32, lease int64) error {
	cctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	inc, ok, err := pserver.ClaimSlot(cctx, a.meta, spec.Name, i, a.cfg.NodeID, a.cfg.Addr, lease)
	cancel()
	if err != nil || !ok {
		return err
	}
	start := time.Now()
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
		v, _ := json.Marshal(Rollback{Version: rec.Version, Slot: i, Node: a.cfg.NodeID, Epoch: h.epoch})
		pctx, pcancel := context.WithTimeout(ctx, 2*time.Second)
		if resp, err := a.meta.Txn(pctx, &pb.TxnRequest{Success: []*pb.RequestOp{{Request: &pb.RequestOp_RequestPut{
			RequestPut: &pb.PutRequest{Key: []byte(RollbackKey(spec.Name)), Value: v}}}}}); err == nil {
			h.rollbackRev = resp.GetHeader().GetRevision()
		}
		pcancel()
	}
	a.mu.Lock()
	a.hosted[h.key] = h
	a.mu.Unlock()
	a.startCheckpoints(ctx, h, s)
	a.feedTrainersTo(ctx, h)
	a.server.Host(spec.Name, i, s)
	a.log.Info("slot claimed and served", "job", spec.Name, "slot", i, "incarnation", inc, "epoch", h.epoch,
		"restored_version", rec.Version, "md5", rec.Md5, "source", rec.Source, "reason", rec.Reason,
		"step", s.Step(), "took", time.Since(start).Round(time.Millisecond))
	// The record (slot, version, md5, source, reason) is what `raftps job
	// status` shows and what checkers verify against the pointers.
	if b, err := protojson.Marshal(rec); err == nil {
		pctx, pcancel := context.WithTimeout(ctx, 2*time.Second)
		_, _ = a.meta.Put(pctx, &pb.PutRequest{Key: []byte(RestoreKey(spec.Name, i)), Value: b})
		pcancel()
	}
	_ = a.meta.RecordJobEvent(ctx, &pb.JobEvent{Type: pb.JobEvent_PSERVER_RESTORED, Job: spec.Name,
		Version: rec.Version, Message: fmt.Sprintf("slot %d on %s: version %d md5 %s from %s: %s", i, a.cfg.NodeID, rec.Version, rec.Md5, rec.Source, rec.Reason)})
	return nil
}

// feedTrainers gives every hosted slot of job the job's live trainers.
func (a *Agent) feedTrainers(ctx context.Context, job string) {
	a.mu.Lock()
	var hs []*hosted
	for k, h := range a.hosted {
		if k.job == job {
			hs = append(hs, h)
		}
	}
	a.mu.Unlock()
	for _, h := range hs {
		a.feedTrainersTo(ctx, h)
	}
}

func (a *Agent) feedTrainersTo(ctx context.Context, h *hosted) {
	prefix := "/jobs/" + h.key.job + "/trainers/"
	cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	resp, err := a.meta.Range(cctx, &pb.RangeRequest{Key: []byte(prefix), RangeEnd: client.PrefixEnd([]byte(prefix)), KeysOnly: true, Serializable: true})
	cancel()
	if err != nil {
		return
	}
	ids := make([]string, 0, len(resp.Kvs))
	for _, kv := range resp.Kvs {
		ids = append(ids, strings.TrimPrefix(string(kv.Key), prefix))
	}
	sort.Strings(ids)
	joined := strings.Join(ids, ",")
	if joined == h.trainers {
		return
	}
	h.trainers = joined
	h.slot.SetTrainers(ids)
	a.log.Info("sync membership", "job", h.key.job, "slot", h.key.slot, "trainers", joined)
}

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
		stepsByPoll := p.EverySteps > 0 && h.spec.Mode != pb.UpdateMode_UPDATE_MODE_SYNC
		if (stepsByPoll && step/p.EverySteps > h.lastCkptStep/p.EverySteps) ||
			(p.EverySeconds > 0 && time.Since(h.lastCkptTime) >= time.Duration(p.EverySeconds)*time.Second && step > h.lastCkptStep) {
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

// checkpoint writes one snapshot of a slot through the checkpoint protocol.
func (a *Agent) checkpoint(ctx context.Context, h *hosted, snap *pserver.SlotSnapshot) (*pb.CheckpointPointer, error) {
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
	if version <= h.lastVersion {
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
	a.log.Info("checkpoint committed", "job", h.key.job, "slot", h.key.slot, "version", ptr.Version, "md5", ptr.Md5,
		"bytes", ptr.Bytes, "replicas", ptr.Replicas, "took", time.Since(start).Round(time.Millisecond))
	_ = a.meta.RecordJobEvent(ctx, &pb.JobEvent{Type: pb.JobEvent_CHECKPOINT_COMMITTED, Job: h.key.job, Version: ptr.Version,
		Message: fmt.Sprintf("slot %d version %d md5 %s replicas %s", h.key.slot, ptr.Version, ptr.Md5, strings.Join(ptr.Replicas, ","))})
	return ptr, nil
}

// EpochStride separates sync trajectories in checkpoint versions:
// version = epoch*EpochStride + step. A rollback (a slot restored from an
// older version, every other slot following it) starts a new epoch, so
// versions written on the new trajectory are newer than everything the
// abandoned one wrote, and the two never share a version number (which
// would let Restore combine slots of different trajectories).
const EpochStride = 1_000_000_000

// checkpointVersion names a snapshot's version: epoch*EpochStride + its
// step. In sync jobs the step-based snapshots are taken inside the
// completion of every N-th step (pserver.Slot.SnapshotEvery), so every
// slot's version is the model after exactly that step, and Restore finds
// versions all slots have.
func checkpointVersion(epoch int64, snap *pserver.SlotSnapshot) int64 {
	return epoch*EpochStride + snap.Step
}

// startCheckpoints starts h's checkpoint goroutine and installs the
// step-exact snapshot hook on s (sync jobs with every_steps).
func (a *Agent) startCheckpoints(ctx context.Context, h *hosted, s *pserver.Slot) {
	h.snaps = make(chan *pserver.SlotSnapshot, 1)
	a.installHook(h, s)
	a.wg.Add(1)
	go func() {
		defer a.wg.Done()
		for {
			select {
			case <-ctx.Done():
				return
			case snap := <-h.snaps:
				if a.slotOf(h).Fenced() {
					return
				}
				h.ckptMu.Lock()
				h.checkpointing = true
				h.ckptMu.Unlock()
				_, _ = a.checkpoint(ctx, h, snap)
				h.ckptMu.Lock()
				h.checkpointing = false
				h.ckptMu.Unlock()
			}
		}
	}()
}

// slotOf is h's current slot (a rollback replaces it under a.mu).
func (a *Agent) slotOf(h *hosted) *pserver.Slot {
	a.mu.Lock()
	defer a.mu.Unlock()
	return h.slot
}

func (a *Agent) installHook(h *hosted, s *pserver.Slot) {
	n := h.spec.GetCheckpoint().GetEverySteps()
	if h.spec.Mode != pb.UpdateMode_UPDATE_MODE_SYNC || n <= 0 {
		return
	}
	s.SnapshotEvery(n, func(snap *pserver.SlotSnapshot) {
		for {
			select {
			case h.snaps <- snap:
				return
			default:
			}
			select { // the writer lags: drop the older pending snapshot
			case old := <-h.snaps:
				a.log.Warn("checkpoint writer lags: skipping a version", "job", h.key.job, "slot", h.key.slot, "skipped", old.Step)
			default:
			}
		}
	})
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
	a.log.Info("job ended: slot released", "job", h.key.job, "slot", h.key.slot, "step", snap.Step)
}

// releaseKey deletes our claim of a slot: only if its create revision is
// still our incarnation, so a claim taken over meanwhile is left alone.
func (a *Agent) releaseKey(ctx context.Context, job string, slot int32, incarnation int64) {
	cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	k := []byte(pserver.PSKey(job, slot))
	_, _ = a.meta.Txn(cctx, &pb.TxnRequest{
		Compare: []*pb.Compare{{Target: pb.Compare_CREATE, Result: pb.Compare_EQUAL, Key: k, TargetUnion: &pb.Compare_CreateRevision{CreateRevision: incarnation}}},
		Success: []*pb.RequestOp{{Request: &pb.RequestOp_RequestDeleteRange{RequestDeleteRange: &pb.DeleteRangeRequest{Key: k}}}},
	})
}

// release revokes the node's pserver lease at shutdown: every claim goes
// with it, so other nodes take the slots over without waiting for the TTL.
func (a *Agent) release() {
	a.wg.Wait()
	a.mu.Lock()
	for k, h := range a.hosted {
		a.server.Unhost(k.job, k.slot)
		h.slot.Fence()
		delete(a.hosted, k)
	}
	a.lease = 0
	a.mu.Unlock()
	if err := a.session.Close(context.Background()); err != nil {
		a.log.Warn("revoke pserver lease at shutdown", "err", err)
	}
}
