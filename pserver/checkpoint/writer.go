package checkpoint

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"sort"
	"time"

	"github.com/google/uuid"
	"google.golang.org/protobuf/encoding/protojson"

	pb "github.com/raftps/raftps/api/raftpspb"
	"github.com/raftps/raftps/schema"
)

// Meta is the slice of the metadata store (raftstore) this package uses:
// etcd-semantics Txn and Range.
type Meta interface {
	Txn(ctx context.Context, req *pb.TxnRequest) (*pb.TxnResponse, error)
	Range(ctx context.Context, req *pb.RangeRequest) (*pb.RangeResponse, error)
}

// Peer is another node that can hold checkpoint replicas.
type Peer struct {
	ID   string // node id (what pointers' replicas name)
	Addr string // gRPC address of its CheckpointStore service
	Host string // physical host; replicas prefer hosts other than ours
}

// Peers lists the live nodes that can hold replicas (gossip membership).
type Peers interface {
	Peers() []Peer
}

// Membership is implemented by a Peers that also knows the members it does
// not list. Restore uses it to tell a replica holder that could not be
// asked (a member, failed or partitioned: retry later) from one that is
// gone (left or removed: its copies count as missing). A Peers without it
// treats every node it does not list as gone.
type Membership interface {
	// IsMember reports whether node id is still a cluster member, alive or
	// not; false once it left or was removed.
	IsMember(id string) bool
}

// StaticPeers is a fixed Peers list.
type StaticPeers []Peer

// Peers returns p.
func (p StaticPeers) Peers() []Peer { return p }

// Hook stages, in protocol order. A hook returning an error aborts
// Checkpoint there, as a crash would.
const (
	StageBlobsWritten  = "blobs-written"
	StageReplicated    = "replicated"
	StageBeforePointer = "before-pointer"
	StageAfterPointer  = "after-pointer"
	StageDeleting      = "deleting"
)

// DefaultReplicas is R when the policy leaves replicas at 0.
const DefaultReplicas = 2

// Config configures a Manager. Store and Meta are required.
type Config struct {
	// NodeID is this node's id (recorded in pointers' replicas).
	NodeID string
	// Host is this node's physical host (replica placement avoids it).
	Host string
	// Store is this node's local checkpoint store.
	Store *Store
	// Meta is the metadata store holding pointers and ps keys.
	Meta Meta
	// Peers lists other nodes; nil means no replication and no remote reads.
	Peers Peers
	// Client talks to other nodes; nil creates one (insecure gRPC).
	Client *Client
	// Logger; nil uses slog.Default().
	Logger *slog.Logger
	// DecodeIncarnation extracts the incarnation from the value of
	// /jobs/<job>/ps/<slot>. nil accepts protojson pb.PServerSlot or any JSON
	// object with an "incarnation" number.
	DecodeIncarnation func(value []byte) (int64, error)
}

// Manager writes, restores, lists, verifies and exports checkpoints of the
// jobs whose pservers run on this node. It is safe for concurrent use.
type Manager struct {
	cfg    Config
	client *Client
	logger *slog.Logger
}

// New returns a Manager for cfg.
func New(cfg Config) (*Manager, error) {
	if cfg.Store == nil || cfg.Meta == nil {
		return nil, fmt.Errorf("%w: checkpoint.New needs a Store and a Meta", ErrInvalid)
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.DecodeIncarnation == nil {
		cfg.DecodeIncarnation = decodeIncarnation
	}
	c := cfg.Client
	if c == nil {
		c = NewClient()
	}
	return &Manager{cfg: cfg, client: c, logger: cfg.Logger.With("component", "checkpoint", "node", cfg.NodeID)}, nil
}

// EncodePointer is the pointer's value (schema.MarshalPointer).
func EncodePointer(p *pb.CheckpointPointer) ([]byte, error) { return schema.MarshalPointer(p) }

// DecodePointer parses a pointer value (schema.ParsePointer); an error wraps
// ErrCorrupt.
func DecodePointer(b []byte) (*pb.CheckpointPointer, error) {
	p, err := schema.ParsePointer(b)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrCorrupt, err)
	}
	return p, nil
}

func decodeIncarnation(b []byte) (int64, error) {
	var s pb.PServerSlot
	if err := (protojson.UnmarshalOptions{DiscardUnknown: true}).Unmarshal(b, &s); err == nil {
		return s.GetIncarnation(), nil
	}
	r, err := schema.ParseSlotRecord(b)
	if err != nil {
		return 0, fmt.Errorf("decode slot record: %w", err)
	}
	return r.Incarnation, nil
}

// WriteRequest is one slot's checkpoint.
type WriteRequest struct {
	Job         string
	Slot        int32
	NumPservers int32
	// Version is the checkpoint version; it must be newer than the slot's
	// committed pointer. Sync jobs must use the same version on every slot
	// for the same step (e.g. the step) so that Restore finds a globally
	// consistent version.
	Version int64
	Step    int64
	// Incarnation is the writer's claim of /jobs/<job>/ps/<slot>; the pointer
	// commit fails with ErrFenced if the key carries another one.
	Incarnation int64
	// Blobs maps vshard id (v % NumPservers == Slot) to its encoded bytes,
	// taken from a consistent snapshot. Blobs must not be modified until
	// Checkpoint returns.
	Blobs  map[int32][]byte
	Policy *pb.CheckpointPolicy
}

// Writer checkpoints one slot of one job. Calls to Checkpoint must not
// overlap (one pserver per slot checkpoints sequentially).
type Writer struct {
	m    *Manager
	job  string
	slot int32
	// hook, when set, is called after each stage; an error aborts there.
	hook func(stage string) error
}

// Writer returns the Writer of (job, slot).
func (m *Manager) Writer(job string, slot int32) *Writer {
	return &Writer{m: m, job: job, slot: slot}
}

func (w *Writer) stage(s string) error {
	if w.hook == nil {
		return nil
	}
	if err := w.hook(s); err != nil {
		return fmt.Errorf("checkpoint aborted at %s: %w", s, err)
	}
	return nil
}

// Checkpoint runs the protocol: (1) blobs then manifest to the local store,
// synced; (2) copies to R-1 peers (fewer if fewer exist, recorded in the
// pointer's replicas); (3) commits the pointer through a Txn fenced on the
// ps key's incarnation; (4) only then deletes versions beyond keep_max
// locally and on replicas (best effort). It returns the committed pointer.
//
// Errors: ErrInvalid; ErrStaleVersion if req.Version is not above the
// committed pointer's version (after a fallback restore the caller must
// number on from above it); ErrFenced if the slot's claim is not (or no
// longer) req.Incarnation, in which case the pointer did not move and the
// pserver must stop serving; store and Meta errors. Replication failures
// are not errors (the pointer lists the replicas that succeeded). Deletion
// failures after the commit are logged only.
func (w *Writer) Checkpoint(ctx context.Context, req WriteRequest) (*pb.CheckpointPointer, error) {
	m := w.m
	log := m.logger.With("job", req.Job, "slot", req.Slot, "version", req.Version)
	policy, replicas, err := w.checkRequest(req)
	if err != nil {
		return nil, err
	}
	psKV, ptrKV, prev, err := m.readPrevious(ctx, req, log)
	if err != nil {
		return nil, err
	}

	// 1. Blobs, synced; then the manifest, synced.
	start := time.Now()
	man, manMD5, err := m.writeLocal(req, log)
	if err != nil {
		return nil, err
	}
	localDone := time.Now()
	if err := w.stage(StageBlobsWritten); err != nil {
		return nil, err
	}

	// 2. Replicas.
	got, targets := m.replicate(ctx, req, man, replicas, log)
	log.Debug("replicated", "replicas", got, "took", time.Since(localDone))
	if err := w.stage(StageReplicated); err != nil {
		return nil, err
	}

	// 3. Pointer, fenced, and atomic against the other slots' pointers the
	// keep decision read: a commit that drops versions compares their mod
	// revisions in the same Txn, and decides again if any moved.
	keepMax := int(policy.GetKeepMax())
	ptr, kept, err := w.commit(ctx, req, commitInput{psKV: psKV, ptrKV: ptrKV, prev: prev, man: man,
		manMD5: manMD5, replicas: got, keepMax: keepMax}, log)
	if err != nil {
		return nil, err
	}
	log.Info("checkpoint committed", "md5", manMD5, "bytes", man.Bytes, "replicas", got, "kept", kept, "took", time.Since(start))
	if err := w.stage(StageAfterPointer); err != nil {
		return ptr, err
	}

	// 4. Only now delete what the new pointer no longer names.
	if keepMax > 0 {
		if err := w.deleteOld(ctx, req, prev, kept, targets, log); err != nil {
			return ptr, err
		}
	}
	return ptr, nil
}

// checkRequest validates req against the writer's (job, slot) and returns
// its policy (an empty one if nil) and the replica count it asks
// (DefaultReplicas if unset). Errors: ErrInvalid.
func (w *Writer) checkRequest(req WriteRequest) (*pb.CheckpointPolicy, int, error) {
	if err := validJob(req.Job); err != nil {
		return nil, 0, err
	}
	if req.Job != w.job || req.Slot != w.slot {
		return nil, 0, fmt.Errorf("%w: writer of %s/%d got request for %s/%d", ErrInvalid, w.job, w.slot, req.Job, req.Slot)
	}
	if req.Version <= 0 || req.NumPservers <= 0 || req.Slot < 0 || req.Slot >= req.NumPservers {
		return nil, 0, fmt.Errorf("%w: version %d slot %d num_pservers %d", ErrInvalid, req.Version, req.Slot, req.NumPservers)
	}
	for id := range req.Blobs {
		if id < 0 || id%req.NumPservers != req.Slot {
			return nil, 0, fmt.Errorf("%w: vshard %d does not belong to slot %d of %d", ErrInvalid, id, req.Slot, req.NumPservers)
		}
	}
	policy := req.Policy
	if policy == nil {
		policy = &pb.CheckpointPolicy{}
	}
	replicas := int(policy.GetReplicas())
	if replicas <= 0 {
		replicas = DefaultReplicas
	}
	return policy, replicas, nil
}

// readPrevious reads the slot's ps key (checking the fence) and its
// checkpoint pointer (prev: nil if none or undecodable). They are read
// before anything is written so that a stale version never overwrites a
// committed manifest. Errors: ErrFenced, ErrStaleVersion, Meta errors.
func (m *Manager) readPrevious(ctx context.Context, req WriteRequest, log *slog.Logger) (psKV, ptrKV *pb.KeyValue, prev *pb.CheckpointPointer, err error) {
	psKV, err = m.get(ctx, schema.SlotKey(req.Job, req.Slot))
	if err != nil {
		return nil, nil, nil, err
	}
	if err := m.checkFence(psKV, req); err != nil {
		return nil, nil, nil, err
	}
	ptrKV, err = m.get(ctx, schema.CheckpointKey(req.Job, req.Slot))
	if err != nil {
		return nil, nil, nil, err
	}
	if ptrKV != nil {
		if prev, err = DecodePointer(ptrKV.GetValue()); err != nil {
			log.Warn("previous pointer does not decode; treating as none", "err", err)
			prev = nil
		}
	}
	if prev != nil && req.Version <= prev.GetVersion() {
		return nil, nil, nil, fmt.Errorf("%w: version %d, pointer is at %d", ErrStaleVersion, req.Version, prev.GetVersion())
	}
	return psKV, ptrKV, prev, nil
}

// writeLocal writes req's blobs, synced, then their manifest, synced, to
// the local store; it returns the manifest and its MD5.
func (m *Manager) writeLocal(req WriteRequest, log *slog.Logger) (*Manifest, string, error) {
	start := time.Now()
	refs, total, err := m.cfg.Store.putBlobs(req.Blobs)
	if err != nil {
		return nil, "", fmt.Errorf("write blobs: %w", err)
	}
	man := &Manifest{
		UUID: uuid.NewString(), Job: req.Job, Version: req.Version, Slot: req.Slot,
		NumPservers: req.NumPservers, Step: req.Step, TimestampUnixNano: time.Now().UnixNano(),
		VShards: refs, Bytes: total,
	}
	_, manMD5, err := m.cfg.Store.putLocalManifest(man)
	if err != nil {
		return nil, "", fmt.Errorf("write manifest: %w", err)
	}
	log.Debug("checkpoint written locally", "bytes", total, "vshards", len(refs), "took", time.Since(start))
	return man, manMD5, nil
}

// replicate copies man and its blobs to up to replicas-1 peers of the
// slot's placement; it returns the node IDs that hold the version (this
// node first) and the peers that took a copy. Failures are logged, not
// returned: the pointer lists the replicas that succeeded.
func (m *Manager) replicate(ctx context.Context, req WriteRequest, man *Manifest, replicas int, log *slog.Logger) ([]string, []Peer) {
	got := []string{m.cfg.NodeID}
	var targets []Peer
	if replicas > 1 {
		for _, p := range m.placement(req.Slot) {
			if len(got) >= replicas {
				break
			}
			if err := m.client.Replicate(ctx, p.Addr, man, req.Blobs); err != nil {
				log.Warn("replication failed; trying another peer", "peer", p.ID, "addr", p.Addr, "err", err)
				continue
			}
			got = append(got, p.ID)
			targets = append(targets, p)
		}
		if len(got) < replicas {
			log.Warn("fewer replicas than the policy asks", "want", replicas, "have", len(got), "replicas", got)
		}
	}
	return got, targets
}

// commitInput is what commit needs from the earlier steps of Checkpoint.
type commitInput struct {
	psKV, ptrKV *pb.KeyValue
	prev        *pb.CheckpointPointer
	man         *Manifest
	manMD5      string
	replicas    []string
	keepMax     int
}

// commit decides which previous versions survive keep_max and commits the
// new pointer, fenced on the ps key and compared on the other slots'
// pointers the decision read, deciding again if they moved. It returns the
// pointer and the kept versions (newest first).
func (w *Writer) commit(ctx context.Context, req WriteRequest, in commitInput, log *slog.Logger) (*pb.CheckpointPointer, []int64, error) {
	m, man, prev := w.m, in.man, in.prev
	var (
		ptr  *pb.CheckpointPointer
		kept []int64 // previous versions that survive keep_max, newest first
	)
	for attempt := 1; ; attempt++ {
		var others map[string]int64
		kept, others = m.decideKept(ctx, req, prev, in.keepMax, attempt <= maxKeepAttempts)
		ptr = &pb.CheckpointPointer{
			Uuid: man.UUID, Md5: in.manMD5, Version: req.Version, Step: req.Step,
			TimestampUnixNano: man.TimestampUnixNano, Bytes: man.Bytes, Replicas: in.replicas,
			NumPservers: req.NumPservers, Incarnation: req.Incarnation, KeptVersions: kept,
			KeptMd5S: keptMD5s(prev, kept),
		}
		val, err := EncodePointer(ptr)
		if err != nil {
			return nil, nil, err
		}
		if err := w.stage(StageBeforePointer); err != nil {
			return nil, nil, err
		}
		err = m.commitPointer(ctx, req, in.psKV, in.ptrKV, others, val)
		if errors.Is(err, errOthersMoved) {
			log.Info("other slots' pointers moved while deciding what to keep; deciding again", "attempt", attempt)
			continue
		}
		if err != nil {
			return nil, nil, err
		}
		break
	}
	return ptr, kept, nil
}

// deleteOld deletes, locally and on the replicas, the versions the new
// pointer (req.Version and kept) no longer names. Failures are logged
// only (orphans are harmless); the error is the test hook's.
func (w *Writer) deleteOld(ctx context.Context, req WriteRequest, prev *pb.CheckpointPointer, kept []int64, targets []Peer, log *slog.Logger) error {
	m := w.m
	keep := append([]int64{req.Version}, kept...)
	_, named, err := m.cfg.Store.deleteManifests(req.Job, req.Slot, keep)
	if err != nil {
		log.Warn("deleting old manifests failed (orphans are harmless)", "err", err)
	}
	if err := w.stage(StageDeleting); err != nil {
		return err
	}
	// Only the blobs the deleted manifests named: a full GC would read
	// every stored blob back to list them. Orphans of crashed attempts
	// are Prune's.
	if _, err := m.cfg.Store.GCBlobs(named); err != nil {
		log.Warn("blob gc failed (orphans are harmless)", "err", err)
	}
	// The replicas delete the versions the previous pointer named and
	// this one does not; each checks that against the pointer it reads.
	var dropped []int64
	if prev != nil {
		for _, v := range append([]int64{prev.GetVersion()}, prev.GetKeptVersions()...) {
			if !slices.Contains(keep, v) && !slices.Contains(dropped, v) {
				dropped = append(dropped, v)
			}
		}
	}
	remote := map[string]string{}
	for _, p := range targets {
		remote[p.ID] = p.Addr
	}
	if prev != nil {
		for _, id := range prev.GetReplicas() {
			if addr, ok := m.addrOf(id); ok && id != m.cfg.NodeID {
				remote[id] = addr
			}
		}
	}
	for id, addr := range remote {
		if len(dropped) == 0 {
			break
		}
		if _, err := m.client.DeleteVersions(ctx, addr, req.Job, req.Slot, dropped); err != nil {
			log.Warn("deleting old versions on replica failed (orphans are harmless)", "peer", id, "err", err)
		}
	}
	return nil
}

// maxKeepAttempts bounds how often a commit decides again what to keep
// because other slots' pointers moved meanwhile; after that it keeps every
// previous version (drops nothing, so it needs no compare on the others).
const maxKeepAttempts = 8

// errOthersMoved: another slot's pointer changed between the keep decision
// and the commit (commitPointer's compares on them failed).
var errOthersMoved = errors.New("checkpoint: other slots' pointers moved")

// decideKept returns the previous versions this commit keeps (newest
// first) and, when it drops any, the mod revisions of the other slots'
// pointers the decision was made on (pointer key → mod revision, 0 for
// absent), which the commit must compare. keep_max bounds the kept
// versions, except that the newest version every slot names is never
// dropped: until the other slots commit this version it is the only one a
// sync restore can use. When the pointers cannot be read, or strict is
// false, nothing is dropped.
func (m *Manager) decideKept(ctx context.Context, req WriteRequest, prev *pb.CheckpointPointer, keepMax int, strict bool) ([]int64, map[string]int64) {
	if prev == nil {
		return nil, nil
	}
	all := append([]int64{prev.GetVersion()}, prev.GetKeptVersions()...)
	all = slices.DeleteFunc(all, func(v int64) bool { return v >= req.Version })
	sort.Slice(all, func(i, j int) bool { return all[i] > all[j] })
	all = slices.Compact(all)
	if keepMax <= 0 || len(all) <= keepMax-1 {
		return all, nil
	}
	if !strict {
		m.logger.Warn("other slots keep moving; keeping every previous version this time", "job", req.Job, "slot", req.Slot, "kept", all)
		return all, nil
	}
	ptrs, revs, err := readPointers(ctx, m.cfg.Meta, req.Job)
	if err != nil {
		m.logger.Warn("cannot read pointers to find the complete version; keeping every previous version this time", "err", err)
		return all, nil
	}
	kept := slices.Clone(all[:keepMax-1])
	if vc, ok := newestComplete(ptrs, req, all); ok && !slices.Contains(kept, vc) {
		kept = append(kept, vc)
		m.logger.Info("keeping the newest globally complete version beyond keep_max", "job", req.Job, "slot", req.Slot, "complete_version", vc, "keep_max", keepMax)
	}
	// The decision rests on every other slot's pointer as read: those
	// present, and the absent ones of this write's layout. (Slot counts in
	// pointers are not trusted for sizing anything: a hostile one could
	// name 2^31 slots.)
	others := map[string]int64{}
	for s := int32(0); s < req.NumPservers; s++ {
		if s != req.Slot {
			others[schema.CheckpointKey(req.Job, s)] = revs[s]
		}
	}
	for s, rev := range revs {
		if s != req.Slot {
			others[schema.CheckpointKey(req.Job, s)] = rev
		}
	}
	return kept, others
}

// newestComplete returns the newest version that every slot 0..P-1 names
// once this pointer commits, if that is older than req.Version, counting
// this slot as naming prevAll (its versions before truncation). P is the
// slot count recorded in pointers at that version, else req.NumPservers.
func newestComplete(ptrs map[int32]*pb.CheckpointPointer, req WriteRequest, prevAll []int64) (int64, bool) {
	ptrs = maps.Clone(ptrs)
	ptrs[req.Slot] = &pb.CheckpointPointer{Version: req.Version, NumPservers: req.NumPservers, KeptVersions: prevAll}
	for _, v := range append([]int64{req.Version}, prevAll...) { // newest first
		p := req.NumPservers
		for _, q := range ptrs {
			if q.GetVersion() == v && q.GetNumPservers() > 0 {
				p = q.GetNumPservers()
			}
		}
		complete := int(p) <= len(ptrs) // fewer pointers than slots: not complete, and no loop over a hostile count
		for s := int32(0); complete && s < p; s++ {
			if !holds(ptrs[s], v) {
				complete = false
				break
			}
		}
		if complete {
			// The new version itself is complete: nothing extra to keep.
			return v, v != req.Version
		}
	}
	return 0, false
}

func (m *Manager) checkFence(psKV *pb.KeyValue, req WriteRequest) error {
	if psKV == nil {
		return fmt.Errorf("%w: %s does not exist (slot not claimed)", ErrFenced, schema.SlotKey(req.Job, req.Slot))
	}
	inc, err := m.cfg.DecodeIncarnation(psKV.GetValue())
	if err != nil {
		return fmt.Errorf("%w: %s: %v", ErrFenced, schema.SlotKey(req.Job, req.Slot), err)
	}
	if inc != req.Incarnation {
		return fmt.Errorf("%w: %s holds incarnation %d, writer has %d", ErrFenced, schema.SlotKey(req.Job, req.Slot), inc, req.Incarnation)
	}
	return nil
}

// commitPointer writes the pointer iff the slot's claim (ps key create
// revision), the pointer (mod revision) and the other slots' pointers in
// others (key → mod revision) are unchanged since read. Errors: ErrFenced
// (claim changed), ErrStaleVersion (own pointer moved), errOthersMoved.
func (m *Manager) commitPointer(ctx context.Context, req WriteRequest, psKV, ptrKV *pb.KeyValue, others map[string]int64, val []byte) error {
	psKey := []byte(schema.SlotKey(req.Job, req.Slot))
	ptrKey := []byte(schema.CheckpointKey(req.Job, req.Slot))
	var ptrMod int64
	if ptrKV != nil {
		ptrMod = ptrKV.GetModRevision()
	}
	cmps := []*pb.Compare{
		// The claim's create revision: it changes only if the claim was
		// lost (lease expired, key deleted) and the slot re-claimed. The
		// incarnation in the value was checked against it when read.
		{Key: psKey, Target: pb.Compare_CREATE, Result: pb.Compare_EQUAL, TargetUnion: &pb.Compare_CreateRevision{CreateRevision: psKV.GetCreateRevision()}},
		{Key: ptrKey, Target: pb.Compare_MOD, Result: pb.Compare_EQUAL, TargetUnion: &pb.Compare_ModRevision{ModRevision: ptrMod}},
	}
	keys := slices.Sorted(maps.Keys(others))
	for _, k := range keys {
		cmps = append(cmps, &pb.Compare{Key: []byte(k), Target: pb.Compare_MOD, Result: pb.Compare_EQUAL,
			TargetUnion: &pb.Compare_ModRevision{ModRevision: others[k]}})
	}
	txn := &pb.TxnRequest{
		Compare: cmps,
		Success: []*pb.RequestOp{{Request: &pb.RequestOp_RequestPut{RequestPut: &pb.PutRequest{Key: ptrKey, Value: val}}}},
		Failure: []*pb.RequestOp{
			{Request: &pb.RequestOp_RequestRange{RequestRange: &pb.RangeRequest{Key: psKey}}},
			{Request: &pb.RequestOp_RequestRange{RequestRange: &pb.RangeRequest{Key: ptrKey}}},
		},
	}
	resp, err := m.cfg.Meta.Txn(ctx, txn)
	if err != nil {
		return fmt.Errorf("commit pointer %s: %w", ptrKey, err)
	}
	if resp.GetSucceeded() {
		return nil
	}
	// Say which compare failed.
	rangeKV := func(i int) *pb.KeyValue {
		if rs := resp.GetResponses(); len(rs) > i {
			if kvs := rs[i].GetResponseRange().GetKvs(); len(kvs) > 0 {
				return kvs[0]
			}
		}
		return nil
	}
	if nowPS := rangeKV(0); nowPS == nil || nowPS.GetCreateRevision() != psKV.GetCreateRevision() {
		return fmt.Errorf("%w: %s changed while checkpointing version %d (incarnation %d)", ErrFenced, psKey, req.Version, req.Incarnation)
	}
	if nowPtr := rangeKV(1); nowPtr.GetModRevision() != ptrMod {
		return fmt.Errorf("%w: pointer %s moved concurrently", ErrStaleVersion, ptrKey)
	}
	return errOthersMoved
}

// keptMD5s returns the manifest md5 of each kept version (aligned with
// kept; "" where prev does not tell it), from the previous pointer.
func keptMD5s(prev *pb.CheckpointPointer, kept []int64) []string {
	if len(kept) == 0 {
		return nil
	}
	out := make([]string, len(kept))
	for i, v := range kept {
		out[i] = pointerMD5(prev, v)
	}
	return out
}

// pointerMD5 is the manifest md5 p records for version v ("" if none).
func pointerMD5(p *pb.CheckpointPointer, v int64) string {
	if p == nil {
		return ""
	}
	if p.GetVersion() == v {
		return p.GetMd5()
	}
	if i := slices.Index(p.GetKeptVersions(), v); i >= 0 && i < len(p.GetKeptMd5S()) {
		return p.GetKeptMd5S()[i]
	}
	return ""
}

func (m *Manager) get(ctx context.Context, key string) (*pb.KeyValue, error) {
	return getKV(ctx, m.cfg.Meta, key)
}

// getKV reads one key (nil if absent).
func getKV(ctx context.Context, meta Meta, key string) (*pb.KeyValue, error) {
	resp, err := meta.Range(ctx, &pb.RangeRequest{Key: []byte(key)})
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", key, err)
	}
	if len(resp.GetKvs()) == 0 {
		return nil, nil
	}
	return resp.GetKvs()[0], nil
}

func (m *Manager) peers() []Peer {
	if m.cfg.Peers == nil {
		return nil
	}
	var out []Peer
	for _, p := range m.cfg.Peers.Peers() {
		if p.ID != m.cfg.NodeID && p.Addr != "" {
			out = append(out, p)
		}
	}
	return out
}

func (m *Manager) addrOf(id string) (string, bool) {
	for _, p := range m.peers() {
		if p.ID == id {
			return p.Addr, true
		}
	}
	return "", false
}

// placement orders candidate replica peers: one per other host first (hosts
// rotated by slot so slots spread their copies), then the rest of the other
// hosts, then peers on our own host.
func (m *Manager) placement(slot int32) []Peer {
	ps := m.peers()
	sort.Slice(ps, func(i, j int) bool { return ps[i].ID < ps[j].ID })
	var hosts []string
	byHost := map[string][]Peer{}
	var same []Peer
	for _, p := range ps {
		if m.cfg.Host != "" && p.Host == m.cfg.Host {
			same = append(same, p)
			continue
		}
		h := p.Host
		if h == "" {
			h = "id:" + p.ID
		}
		if _, ok := byHost[h]; !ok {
			hosts = append(hosts, h)
		}
		byHost[h] = append(byHost[h], p)
	}
	var out []Peer
	if n := len(hosts); n > 0 {
		rot := int(slot) % n
		hosts = append(hosts[rot:], hosts[:rot]...)
	}
	for round := 0; ; round++ {
		added := false
		for _, h := range hosts {
			if round < len(byHost[h]) {
				out = append(out, byHost[h][round])
				added = true
			}
		}
		if !added {
			break
		}
	}
	return append(out, same...)
}
