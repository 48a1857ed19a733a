package checkpoint

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"runtime/debug"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc/codes"

	pb "github.com/raftps/raftps/api/raftpspb"
	"github.com/raftps/raftps/api/rpctypes"
	"github.com/raftps/raftps/schema"
)

// RestoreRequest names the slot being (re)started and what it serves now.
type RestoreRequest struct {
	Job string
	// Slot and NumPservers are the new layout; they may differ from the
	// checkpoint's (repartitioning by vshard).
	Slot        int32
	NumPservers int32
	// VShards the slot needs. nil means every vshard v of the checkpoint
	// with v % NumPservers == Slot.
	VShards []int32
	// Async selects per-slot restore for async jobs, whose slots checkpoint
	// at unrelated versions: each old slot contributes its own newest usable
	// version. false (sync jobs) restores one version that every old slot
	// names: a globally consistent cut.
	Async bool
}

// Pointers reads every slot's pointer of job: slot → pointer. Undecodable
// pointers are returned in bad (slot → error) rather than failing the call.
func Pointers(ctx context.Context, meta Meta, job string) (ptrs map[int32]*pb.CheckpointPointer, bad map[int32]error, err error) {
	ptrs, bad, _, err = readPointersAll(ctx, meta, job)
	return ptrs, bad, err
}

// readPointers is Pointers with the mod revision of every pointer key read
// (decodable or not), for Txns that must be atomic against them.
func readPointers(ctx context.Context, meta Meta, job string) (ptrs map[int32]*pb.CheckpointPointer, revs map[int32]int64, err error) {
	ptrs, _, revs, err = readPointersAll(ctx, meta, job)
	return ptrs, revs, err
}

func readPointersAll(ctx context.Context, meta Meta, job string) (ptrs map[int32]*pb.CheckpointPointer, bad map[int32]error, revs map[int32]int64, err error) {
	key, end := schema.PrefixRange(schema.CheckpointPrefix(job))
	resp, err := meta.Range(ctx, &pb.RangeRequest{Key: key, RangeEnd: end})
	if err != nil {
		return nil, nil, nil, fmt.Errorf("read checkpoint pointers of %s: %w", job, err)
	}
	ptrs, bad, revs = map[int32]*pb.CheckpointPointer{}, map[int32]error{}, map[int32]int64{}
	for _, kv := range resp.GetKvs() {
		_, kind, id, ok := schema.ParseJobKey(string(kv.GetKey()))
		if !ok || kind != schema.KindCheckpoint {
			continue
		}
		s, err := schema.ParseSlot(id)
		if err != nil {
			continue
		}
		revs[s] = kv.GetModRevision()
		p, err := DecodePointer(kv.GetValue())
		if err != nil {
			bad[s] = err
			continue
		}
		ptrs[s] = p
	}
	return ptrs, bad, revs, nil
}

// holds reports whether p names version v (current or kept).
func holds(p *pb.CheckpointPointer, v int64) bool {
	return p != nil && (p.GetVersion() == v || slices.Contains(p.GetKeptVersions(), v))
}

// candidateVersions lists every version named by any pointer, newest first.
func candidateVersions(ptrs map[int32]*pb.CheckpointPointer) []int64 {
	var vs []int64
	for _, p := range ptrs {
		vs = append(vs, p.GetVersion())
		vs = append(vs, p.GetKeptVersions()...)
	}
	sort.Slice(vs, func(i, j int) bool { return vs[i] > vs[j] })
	return slices.Compact(vs)
}

// Restore returns the blobs the slot needs from the newest globally
// consistent checkpoint version: the newest version that every old slot
// (0..num_pservers-1 of that version) still names in its pointer. Each blob
// is read locally or from any replica (the pointer's replicas, then every
// peer), MD5 verified. If a version fails definitively (manifest or blob
// missing or corrupt on every node that answered, or not globally
// consistent), the next older one is tried; if all fail, blobs is nil and
// rec.Reason starts with "initializer: " — the caller initializes.
// A version is not skipped, and Restore returns an error, when:
//   - a replica holder its pointer names could not be asked (Unavailable,
//     DeadlineExceeded, not alive but still a member: see Membership) and
//     no other source had the data: the error wraps ErrUnreachable, names
//     the version and the holders; retry later (falling back would throw
//     away trained progress, and in a sync job roll every slot back);
//   - a newer raftps wrote its manifest: the error wraps ErrNewerFormat
//     (upgrade this node).
//
// Otherwise err is non-nil only when the pointers cannot be read (Meta
// error) or ctx ends; Restore never panics. rec records version, manifest md5 (or
// "slot:md5,..." when several old slots contributed), source nodes, reason.
func (m *Manager) Restore(ctx context.Context, req RestoreRequest) (blobs map[int32][]byte, rec *pb.RestoreRecord, err error) {
	log := m.logger.With("job", req.Job, "slot", req.Slot, "num_pservers", req.NumPservers)
	rec = &pb.RestoreRecord{Slot: req.Slot}
	defer func() {
		if r := recover(); r != nil {
			log.Error("restore panicked; falling back to the initializer", "panic", r, "stack", string(debug.Stack()))
			blobs, err = nil, nil
			rec = &pb.RestoreRecord{Slot: req.Slot, Reason: fmt.Sprintf("initializer: restore panicked: %v", r)}
		}
		if rec != nil {
			rec.UnixNano = time.Now().UnixNano()
		}
	}()
	if err := validJob(req.Job); err != nil {
		return nil, nil, err
	}
	if req.NumPservers <= 0 || req.Slot < 0 || req.Slot >= req.NumPservers {
		return nil, nil, fmt.Errorf("%w: slot %d of %d", ErrInvalid, req.Slot, req.NumPservers)
	}
	ptrs, bad, err := Pointers(ctx, m.cfg.Meta, req.Job)
	if err != nil {
		return nil, nil, err
	}
	for s, e := range bad {
		log.Warn("checkpoint pointer does not decode; ignoring it", "old_slot", s, "err", e)
	}
	versions := candidateVersions(ptrs)
	if len(versions) == 0 {
		rec.Reason = "initializer: no checkpoint pointer for job " + req.Job
		log.Info("restore: no checkpoint; initializer", "reason", rec.Reason)
		return nil, rec, nil
	}
	if req.Async {
		got, ok, err := m.restoreAsync(ctx, req, ptrs, rec)
		if cerr := ctx.Err(); cerr != nil {
			return nil, nil, cerr
		}
		if err != nil {
			log.Warn("restore: a replica holder could not be reached; not falling back", "err", err)
			return nil, nil, fmt.Errorf("restore %s slot %d: %w", req.Job, req.Slot, err)
		}
		if !ok {
			log.Warn("restore: no usable checkpoint; initializer", "reason", rec.Reason)
			return nil, rec, nil
		}
		log.Info("restored checkpoint", "version", rec.Version, "md5", rec.Md5, "source", rec.Source, "vshards", len(got), "reason", rec.Reason)
		return got, rec, nil
	}
	var failures []string
	for _, v := range versions {
		if err := ctx.Err(); err != nil {
			return nil, nil, err
		}
		got, md5s, sources, err := m.restoreVersion(ctx, req, ptrs, v)
		if errors.Is(err, ErrNewerFormat) {
			// A newer raftps wrote it (a mixed-version cluster): falling
			// back to an older version would silently drop progress.
			log.Error("restore: checkpoint written by a newer raftps; upgrade this node", "version", v, "err", err)
			return nil, nil, fmt.Errorf("restore %s slot %d version %d: %w", req.Job, req.Slot, v, err)
		}
		if errors.Is(err, ErrUnreachable) {
			// The data may be intact on a holder that is loaded,
			// restarting or partitioned: retry rather than lose progress.
			log.Warn("restore: a replica holder could not be reached; not falling back", "version", v, "err", err)
			return nil, nil, fmt.Errorf("restore %s slot %d version %d: %w", req.Job, req.Slot, v, err)
		}
		if err != nil {
			log.Warn("restore: version unusable; trying an older one", "version", v, "err", err)
			failures = append(failures, fmt.Sprintf("version %d: %v", v, err))
			continue
		}
		rec.Version, rec.Md5, rec.Source = v, md5s, sources
		if len(failures) == 0 {
			rec.Reason = "newest"
		} else {
			rec.Reason = "fallback: " + strings.Join(failures, "; ")
		}
		log.Info("restored checkpoint", "version", v, "md5", md5s, "source", sources, "vshards", len(got), "reason", rec.Reason)
		return got, rec, nil
	}
	rec.Reason = "initializer: every kept version failed: " + strings.Join(failures, "; ")
	log.Warn("restore: no usable checkpoint; initializer", "reason", rec.Reason)
	return nil, rec, nil
}

type source struct {
	id     string
	addr   string // "" = local store
	local  bool
	holder bool // the pointer names it among its replicas
}

// sourcesFor lists where old slot's blobs may be: local store, the pointer's
// replicas, then every other peer. absent lists the replicas the pointer
// names that Peers does not list but that are still cluster members
// (Membership): they could not be asked. Replicas that are no longer
// members are in neither: their copies count as missing.
func (m *Manager) sourcesFor(p *pb.CheckpointPointer) (srcs []source, absent []string) {
	srcs = []source{{id: m.cfg.NodeID, local: true, holder: slices.Contains(p.GetReplicas(), m.cfg.NodeID)}}
	seen := map[string]bool{m.cfg.NodeID: true}
	peers := m.peers()
	byID := map[string]string{}
	for _, pe := range peers {
		byID[pe.ID] = pe.Addr
	}
	members, _ := m.cfg.Peers.(Membership)
	for _, id := range p.GetReplicas() {
		if seen[id] {
			continue
		}
		seen[id] = true
		if addr, ok := byID[id]; ok {
			srcs = append(srcs, source{id: id, addr: addr, holder: true})
		} else if members != nil && members.IsMember(id) {
			absent = append(absent, id)
		}
	}
	for _, pe := range peers {
		if !seen[pe.ID] {
			seen[pe.ID] = true
			srcs = append(srcs, source{id: pe.ID, addr: pe.Addr})
		}
	}
	return srcs, absent
}

// transient reports whether err, from reading a source, says nothing about
// the data there: the source could not be asked (unreachable, loaded,
// restarting, store closing, timed out). Not found and corrupt are
// definitive; so is any other answer.
func transient(err error) bool {
	if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) {
		return true
	}
	switch rpctypes.Code(err) {
	case codes.Unavailable, codes.DeadlineExceeded, codes.Canceled, codes.ResourceExhausted, codes.Aborted:
		return true
	}
	return false
}

// unreached collects why a manifest or blob could not be read from any
// source: every source's error, and the holders that could not be asked.
type unreached struct {
	errs    []string
	holders []string // named by the pointer, not asked or not answering
}

func (u *unreached) add(src source, err error) {
	u.errs = append(u.errs, src.id+": "+shortErr(err))
	if src.holder && transient(err) {
		u.holders = append(u.holders, src.id)
	}
}

// err is what to report of what (a manifest or a blob) after every source
// failed: ErrUnreachable if a holder (or one of absent) could not be
// asked, else a definitive error.
func (u *unreached) err(what string, absent []string) error {
	if hs := append(slices.Clone(absent), u.holders...); len(hs) > 0 {
		return fmt.Errorf("%w: %s: holders %s could not be asked (%s)", ErrUnreachable, what, strings.Join(hs, ","), strings.Join(u.errs, ", "))
	}
	return fmt.Errorf("%s: %s", what, strings.Join(u.errs, ", "))
}

// ProbeTimeout bounds small remote calls (manifest reads, blob probes) so
// that a dead or partitioned node costs seconds, not the caller's deadline.
var ProbeTimeout = 5 * time.Second

// blobTimeout bounds one remote blob read: 30 s plus 10 MB/s.
func blobTimeout(bytes int64) time.Duration {
	return 30*time.Second + time.Duration(bytes/10e6)*time.Second
}

func (m *Manager) readManifest(ctx context.Context, src source, key string) ([]byte, error) {
	if src.local {
		return m.cfg.Store.GetManifest(key)
	}
	ctx, cancel := context.WithTimeout(ctx, ProbeTimeout)
	defer cancel()
	return m.client.GetManifest(ctx, src.addr, key)
}

func (m *Manager) readBlob(ctx context.Context, src source, ref VShardRef) ([]byte, error) {
	if src.local {
		return m.cfg.Store.GetBlob(ref.MD5)
	}
	ctx, cancel := context.WithTimeout(ctx, blobTimeout(ref.Bytes))
	defer cancel()
	return m.client.GetBlob(ctx, src.addr, ref.MD5, ref.Bytes)
}

type loadedManifest struct {
	m       *Manifest
	md5     string
	sources []source
	absent  []string // holders that could not be asked (sourcesFor)
}

// manifestOf finds the manifest of (old slot, v) on any source. When the
// pointer's current version is v its md5 must match the pointer's.
func (m *Manager) manifestOf(ctx context.Context, job string, slot int32, p *pb.CheckpointPointer, v int64) (*loadedManifest, error) {
	key := ManifestKey(job, v, slot)
	srcs, absent := m.sourcesFor(p)
	var failed unreached
	var newer error // a source holds it in a format newer than this build's
	for i, src := range srcs {
		raw, err := m.readManifest(ctx, src, key)
		if err == nil {
			var man *Manifest
			h := MD5Hex(raw)
			if want := pointerMD5(p, v); want != "" && h != want {
				err = fmt.Errorf("%w: manifest %s hashes to %s, pointer names %s", ErrCorrupt, key, h, want)
			} else if man, err = DecodeManifest(raw); err == nil && man.Key() != key {
				err = fmt.Errorf("%w: manifest under %s is %s", ErrCorrupt, key, man.Key())
			} else if err == nil && p.GetVersion() == v && man.NumPservers != p.GetNumPservers() {
				err = fmt.Errorf("%w: manifest %s says %d pservers, its pointer %d", ErrCorrupt, key, man.NumPservers, p.GetNumPservers())
			}
			if err == nil {
				// Blobs are looked for on this source first, then the others.
				order := append([]source{src}, append(slices.Clone(srcs[:i]), srcs[i+1:]...)...)
				return &loadedManifest{m: man, md5: h, sources: order, absent: absent}, nil
			}
		}
		m.logger.Debug("manifest not usable on source", "key", key, "source", src.id, "err", err)
		failed.add(src, err)
		if errors.Is(err, ErrNewerFormat) {
			newer = err
		}
	}
	if newer != nil {
		return nil, fmt.Errorf("manifest %s: %w", key, newer)
	}
	return nil, failed.err("manifest "+key, absent)
}

func shortErr(err error) string {
	if errors.Is(err, ErrNotFound) {
		return "not found"
	}
	return err.Error()
}

func (m *Manager) restoreVersion(ctx context.Context, req RestoreRequest, ptrs map[int32]*pb.CheckpointPointer, v int64) (map[int32][]byte, string, string, error) {
	// Any slot naming v tells how many old slots version v had.
	var holders []int32
	for s, p := range ptrs {
		if holds(p, v) {
			holders = append(holders, s)
		}
	}
	slices.Sort(holders)
	if len(holders) == 0 {
		return nil, "", "", fmt.Errorf("no pointer names it")
	}
	// A pointer whose current version is v tells its slot count: a version
	// not every old slot names is unusable whether or not its manifests can
	// be read (so an unreachable holder does not block a fallback it could
	// not prevent).
	for _, s := range holders {
		if p := ptrs[s]; p.GetVersion() == v {
			if err := consistent(ptrs, v, p.GetNumPservers(), fmt.Sprintf("slot %d's pointer", s)); err != nil {
				return nil, "", "", err
			}
			break
		}
	}
	mans := map[int32]*loadedManifest{}
	first, err := m.manifestOf(ctx, req.Job, holders[0], ptrs[holders[0]], v)
	if err != nil {
		return nil, "", "", err
	}
	mans[holders[0]] = first
	oldP := first.m.NumPservers
	if err := consistent(ptrs, v, oldP, "manifest "+first.m.Key()); err != nil {
		return nil, "", "", err
	}
	load := func(s int32) (*loadedManifest, error) {
		if lm, ok := mans[s]; ok {
			return lm, nil
		}
		lm, err := m.manifestOf(ctx, req.Job, s, ptrs[s], v)
		if err != nil {
			return nil, err
		}
		if lm.m.NumPservers != oldP {
			return nil, fmt.Errorf("%w: manifest %s says %d pservers, slot %d's says %d", ErrCorrupt, lm.m.Key(), lm.m.NumPservers, holders[0], oldP)
		}
		mans[s] = lm
		return lm, nil
	}
	out := map[int32][]byte{}
	srcUsed := map[string]bool{}
	var parts []string
	for s := int32(0); s < oldP; s++ {
		need, ok := neededFrom(req, s, oldP)
		if !ok {
			continue // the request names no vshard of old slot s
		}
		lm, err := load(s)
		if err != nil {
			return nil, "", "", err
		}
		n, err := m.fetchBlobs(ctx, lm, req, need, out, srcUsed)
		if err != nil {
			return nil, "", "", err
		}
		if n > 0 {
			parts = append(parts, fmt.Sprintf("%d:%s", s, lm.md5))
		}
	}
	if err := checkAllFound(req, out); err != nil {
		return nil, "", "", err
	}
	return out, joinMD5s(parts), joinSources(srcUsed), nil
}

// consistent checks global consistency: every old slot 0..oldP-1 (oldP as
// by, a manifest or pointer) still names v. A count greater than the number
// of pointers cannot be (and is not looped over: it may be forged).
func consistent(ptrs map[int32]*pb.CheckpointPointer, v int64, oldP int32, by string) error {
	if int(oldP) > len(ptrs) {
		return fmt.Errorf("not globally consistent: %s says %d slots, %d pointers exist", by, oldP, len(ptrs))
	}
	var missing []string
	for s := int32(0); s < oldP && len(missing) < 10; s++ {
		if !holds(ptrs[s], v) {
			missing = append(missing, strconv.Itoa(int(s)))
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("not globally consistent: old slots %s of %d do not name it", strings.Join(missing, ","), oldP)
	}
	return nil
}

// neededFrom returns the requested vshards old slot s (of oldP) holds; nil
// with ok=true means "those of the manifest that the new slot owns".
func neededFrom(req RestoreRequest, s, oldP int32) (need []int32, ok bool) {
	if req.VShards == nil {
		// Some v has v%oldP == s and v%NumPservers == Slot iff s ≡ Slot
		// (mod gcd(oldP, NumPservers)) (Chinese remainder theorem): other
		// old slots' manifests need not even be read.
		return nil, (s-req.Slot)%gcd(oldP, req.NumPservers) == 0
	}
	for _, id := range req.VShards {
		if id%oldP == s {
			need = append(need, id)
		}
	}
	return need, len(need) > 0
}

func checkAllFound(req RestoreRequest, out map[int32][]byte) error {
	for _, id := range req.VShards {
		if _, ok := out[id]; !ok {
			return fmt.Errorf("vshard %d is in no manifest", id)
		}
	}
	return nil
}

// fetchBlobs reads into out the blobs of lm's manifest that the request
// needs (need, or if nil every vshard v with v % req.NumPservers ==
// req.Slot), each from the first source that returns it MD5-intact.
func (m *Manager) fetchBlobs(ctx context.Context, lm *loadedManifest, req RestoreRequest, need []int32, out map[int32][]byte, srcUsed map[string]bool) (int, error) {
	if need == nil {
		for _, r := range lm.m.VShards {
			if r.ID%req.NumPservers == req.Slot {
				need = append(need, r.ID)
			}
		}
	}
	refs := make([]VShardRef, len(need))
	for k, id := range need {
		i := slices.IndexFunc(lm.m.VShards, func(r VShardRef) bool { return r.ID == id })
		if i < 0 {
			return 0, fmt.Errorf("vshard %d is not in manifest %s", id, lm.m.Key())
		}
		refs[k] = lm.m.VShards[i]
	}
	// RestoreParallelism blobs are read (and MD5 verified) at once.
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var (
		mu    sync.Mutex
		first error
		wg    sync.WaitGroup
	)
	work := make(chan VShardRef)
	for w := 0; w < RestoreParallelism; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ref := range work {
				b, src, err := m.readAnySourceSafe(ctx, lm, ref)
				mu.Lock()
				if err != nil && first == nil {
					first = err
					cancel()
				}
				if err == nil {
					out[ref.ID] = b
					srcUsed[src] = true
				}
				mu.Unlock()
			}
		}()
	}
	for _, ref := range refs {
		if ctx.Err() != nil {
			break
		}
		work <- ref
	}
	close(work)
	wg.Wait()
	if first != nil {
		return 0, first
	}
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	return len(need), nil
}

// RestoreParallelism is how many blobs Restore reads and verifies at once.
var RestoreParallelism = max(2, runtime.GOMAXPROCS(0))

// readAnySourceSafe is readAnySource in a worker goroutine: a panic (a bug
// reached by bad input) becomes an error instead of killing the node.
func (m *Manager) readAnySourceSafe(ctx context.Context, lm *loadedManifest, ref VShardRef) (b []byte, src string, err error) {
	defer func() {
		if r := recover(); r != nil {
			m.logger.Error("reading a blob panicked", "vshard", ref.ID, "md5", ref.MD5, "panic", r, "stack", string(debug.Stack()))
			b, src, err = nil, "", fmt.Errorf("%w: vshard %d blob %s: read panicked: %v", ErrCorrupt, ref.ID, ref.MD5, r)
		}
	}()
	return m.readAnySource(ctx, lm, ref)
}

// readAnySource returns ref's blob from the first of lm's sources holding
// it intact; if none does, an error wrapping ErrUnreachable when a holder
// could not be asked.
func (m *Manager) readAnySource(ctx context.Context, lm *loadedManifest, ref VShardRef) ([]byte, string, error) {
	var failed unreached
	for _, src := range lm.sources {
		b, err := m.readBlob(ctx, src, ref)
		if err == nil && int64(len(b)) != ref.Bytes {
			err = fmt.Errorf("%w: blob %s has %d bytes, manifest says %d", ErrCorrupt, ref.MD5, len(b), ref.Bytes)
		}
		if err != nil {
			if ctx.Err() != nil {
				return nil, "", ctx.Err()
			}
			m.logger.Warn("blob not usable on source; trying the next", "vshard", ref.ID, "md5", ref.MD5, "source", src.id, "err", err)
			failed.add(src, err)
			continue
		}
		return b, src.id, nil
	}
	return nil, "", failed.err(fmt.Sprintf("vshard %d blob %s", ref.ID, ref.MD5), lm.absent)
}

func joinMD5s(parts []string) string {
	if len(parts) == 1 {
		_, h, _ := strings.Cut(parts[0], ":")
		return h
	}
	return strings.Join(parts, ",")
}

func joinSources(used map[string]bool) string {
	srcs := make([]string, 0, len(used))
	for id := range used {
		srcs = append(srcs, id)
	}
	slices.Sort(srcs)
	return strings.Join(srcs, ",")
}

// restoreAsync restores an async job: versions are per slot (no global
// cut), so each old slot independently uses its newest version that works,
// falling back through its kept versions. The old layout is the one of the
// most recently written pointer. A version that fails because a holder
// could not be asked is not fallen back from: err wraps ErrUnreachable.
func (m *Manager) restoreAsync(ctx context.Context, req RestoreRequest, ptrs map[int32]*pb.CheckpointPointer, rec *pb.RestoreRecord) (map[int32][]byte, bool, error) {
	var newest *pb.CheckpointPointer
	for _, p := range ptrs {
		if newest == nil || p.GetTimestampUnixNano() > newest.GetTimestampUnixNano() {
			newest = p
		}
	}
	oldP := newest.GetNumPservers()
	if oldP <= 0 || int(oldP) > len(ptrs) {
		rec.Reason = fmt.Sprintf("initializer: newest pointer says %d pservers, %d pointers exist", oldP, len(ptrs))
		return nil, false, nil
	}
	out := map[int32][]byte{}
	srcUsed := map[string]bool{}
	var parts, failures, used []string
	var maxV int64
	for s := int32(0); s < oldP; s++ {
		need, ok := neededFrom(req, s, oldP)
		if !ok {
			continue
		}
		p := ptrs[s]
		if p == nil || p.GetNumPservers() != oldP {
			rec.Reason = fmt.Sprintf("initializer: old slot %d of %d has no pointer of that layout", s, oldP)
			return nil, false, nil
		}
		done := false
		for _, v := range append([]int64{p.GetVersion()}, p.GetKeptVersions()...) {
			lm, err := m.manifestOf(ctx, req.Job, s, p, v)
			if err == nil && lm.m.NumPservers != oldP {
				err = fmt.Errorf("%w: manifest %s has %d pservers, want %d", ErrCorrupt, lm.m.Key(), lm.m.NumPservers, oldP)
			}
			part := map[int32][]byte{}
			if err == nil {
				_, err = m.fetchBlobs(ctx, lm, req, need, part, srcUsed)
			}
			if errors.Is(err, ErrUnreachable) {
				return nil, false, fmt.Errorf("old slot %d version %d: %w", s, v, err)
			}
			if err != nil {
				m.logger.Warn("restore: old slot version unusable; trying an older one", "old_slot", s, "version", v, "err", err)
				failures = append(failures, fmt.Sprintf("slot %d version %d: %v", s, v, err))
				continue
			}
			for id, b := range part {
				out[id] = b
			}
			parts = append(parts, fmt.Sprintf("%d:%s", s, lm.md5))
			used = append(used, fmt.Sprintf("slot %d version %d", s, v))
			maxV = max(maxV, v)
			done = true
			break
		}
		if !done {
			rec.Reason = "initializer: every kept version failed: " + strings.Join(failures, "; ")
			return nil, false, nil
		}
	}
	if err := checkAllFound(req, out); err != nil {
		rec.Reason = "initializer: " + err.Error()
		return nil, false, nil
	}
	rec.Version, rec.Md5, rec.Source = maxV, joinMD5s(parts), joinSources(srcUsed)
	if len(failures) == 0 {
		rec.Reason = "newest (async, per slot: " + strings.Join(used, ", ") + ")"
	} else {
		rec.Reason = "fallback: " + strings.Join(failures, "; ") + " (async, per slot: " + strings.Join(used, ", ") + ")"
	}
	return out, true, nil
}

func gcd(a, b int32) int32 {
	for b != 0 {
		a, b = b, a%b
	}
	return a
}
