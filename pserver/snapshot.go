package pserver

import (
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	pb "github.com/raftps/raftps/api/raftpspb"
)

// SlotSnapshot is a consistent in-memory copy of a slot: every vshard it
// owns, values and optimizer state, taken at one version.
type SlotSnapshot struct {
	Job         string
	Slot        int32
	NumPservers int32
	Version     int64
	Step        int64
	VShards     map[int32]*VShardSnapshot

	// owner and releasable make Release give the buffers back (hook
	// snapshots only).
	owner      *Slot
	releasable atomic.Bool
}

// VShardSnapshot is one virtual shard: the unit of checkpoint and
// repartitioning.
type VShardSnapshot struct {
	Job        string
	VShard     int32
	NumVShards int32
	BlockSize  int64
	Version    int64
	Step       int64
	Optimizer  string
	StateSlots []string
	// Params lists the job's parameters (name, embedding, shape), so that a
	// blob can be read without the spec.
	Params  []ParamInfo
	Entries []EntrySnapshot // sorted by (param, index)
}

// ParamInfo describes one parameter in a vshard blob.
type ParamInfo struct {
	Name      string
	Embedding bool
	Shape     []int64
}

// EntrySnapshot is one dense block (Index = block) or embedding row
// (Index = row) of parameter Params[Param].
type EntrySnapshot struct {
	Param  int32
	Index  int64
	T      int64       // updates applied
	Values []float32   // block or row values
	State  [][]float32 // one per StateSlots entry, len(Values) each
}

// Snapshot returns a consistent copy of the slot's values, optimizer state,
// version and step per vshard, owned by the caller (it may modify it).
//
// It does not stop updates for the length of a copy: under the slot's
// write lock it only freezes the current buffers (one pointer per block
// or row), then copies the frozen buffers away outside the lock
// (copy-on-write, see freezeLocked) and returns the frozen ones. An update
// that reaches a block before the copier does copies that block itself.
// Gradients of a sync step still in progress are not part of it (they
// belong to no version yet; after a restore their trainers get ErrStale
// and re-pull). While a SnapshotEvery snapshot is still being copied away
// it falls back to copying under the read lock.
func (s *Slot) Snapshot() *SlotSnapshot {
	snap := s.newSnapshot()
	s.mu.Lock()
	if s.hold != nil {
		s.mu.Unlock()
		s.mu.RLock()
		s.copyLocked(snap)
		s.mu.RUnlock()
		s.finishSnapshot(snap)
		return snap
	}
	h := s.freezeLocked(snap)
	s.mu.Unlock()
	s.copyAway(h)
	s.finishSnapshot(snap)
	return snap
}

// Copy-on-write snapshots.
//
// A freeze (freezeLocked, write lock held, O(blocks + rows) pointer work)
// hands the snapshot the slot's current value and state buffers and marks
// every entry with the hold. From then on those buffers are never written.
// The copier (copyAway, no lock, every core) copies each frozen entry into
// its spare buffer (or a new one); an update that reaches a frozen entry
// (ownLocked, under the lock) takes the copier's copy if it is made, waits
// for it if it is being made, or makes it itself if the copier has not
// claimed the entry yet: only that wait or copy holds updates up, and only
// for entries an update reaches before the copier. When every entry is
// copied, the copies become the slot's buffers and the snapshot owns the
// frozen ones alone.
//
// Memory: the slot holds at most one extra copy of itself: the frozen
// buffers while they are copied away, or afterwards the spare buffers a
// released snapshot gave back (double buffering, so the next checkpoint
// allocates nothing). Each snapshot handed out owns one copy of the slot
// until its consumer calls Release (which returns the buffers as spares)
// or drops it.

// bufs is an entry's value buffer and optimizer state buffers.
type bufs struct {
	values []float32
	state  [][]float32
}

// snapHold is a frozen snapshot's claim on the buffers it shares with the
// slot, from the freeze until every entry is copied away.
type snapHold struct {
	entries []*entry // frozen entries, in freeze order (entry.holdIdx)
	frozen  []bufs   // their buffers at the freeze
	spare   []*bufs  // their spare buffers, taken at the freeze (nil: none)
	// claim[k] is set by whoever copies entry k (the copier or an update);
	// ready[k] is the copy once made.
	claim []atomic.Bool
	ready []atomic.Pointer[bufs]
}

// freezeLocked fills snap (from newSnapshot) with the current buffers of
// every entry, without copying them, and marks the entries frozen. The
// caller holds s.mu for writing and must run copyAway on the hold.
func (s *Slot) freezeLocked(snap *SlotSnapshot) *snapHold {
	n := len(s.denseKeys) + len(s.rows)
	h := &snapHold{entries: make([]*entry, 0, n), frozen: make([]bufs, 0, n), spare: make([]*bufs, 0, n),
		claim: make([]atomic.Bool, n), ready: make([]atomic.Pointer[bufs], n)}
	add := func(v *VShardSnapshot, k key, e *entry) {
		e.hold, e.holdIdx = h, len(h.entries)
		h.entries = append(h.entries, e)
		h.frozen = append(h.frozen, bufs{e.values, e.state})
		h.spare = append(h.spare, e.spare)
		e.spare = nil
		v.Entries = append(v.Entries, EntrySnapshot{Param: k.p, Index: k.i, T: e.t, Values: e.values, State: e.state})
	}
	snap.Version, snap.Step = s.version, s.step
	for _, k := range s.denseKeys {
		add(snap.VShards[s.layout.VShardOfBlock(s.layout.Params[k.p], k.i)], k, s.dense[k])
	}
	for k, e := range s.rows {
		add(snap.VShards[s.layout.VShardOfRow(s.layout.Params[k.p], k.i)], k, e)
	}
	s.hold = h
	s.freezes.Add(1)
	return h
}

// copyEntry makes the copy of frozen entry k (its claimer calls it).
func (h *snapHold) copyEntry(k int) *bufs {
	dst := takeSpare(h.spare[k], h.frozen[k])
	copyBufs(dst, h.frozen[k])
	h.spare[k] = nil
	h.ready[k].Store(&dst)
	return &dst
}

// copyAway copies every entry still frozen by h outside the lock, on every
// core, then makes the copies the slot's buffers and ends the hold:
// afterwards the snapshot alone refers to the frozen buffers. It starts
// goroutines of its own rather than use runChunks' helpers: a copy of a
// large slot would hold those helpers for its whole length, and the next
// step's update would run on one core (BenchmarkCheckpointPause's
// next/plain went from 1.05-1.07 to 1.9 in 2 of 5 runs when it did).
func (s *Slot) copyAway(h *snapHold) {
	var next atomic.Int64
	var wg sync.WaitGroup
	for range min(runtime.GOMAXPROCS(0), max(1, len(h.entries))) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for k := int(next.Add(1) - 1); k < len(h.entries); k = int(next.Add(1) - 1) {
				if h.claim[k].CompareAndSwap(false, true) {
					h.copyEntry(k)
				}
			}
		}()
	}
	wg.Wait()
	s.mu.Lock()
	defer s.mu.Unlock()
	for k, e := range h.entries {
		if e.hold == h {
			r := h.ready[k].Load() // every entry was claimed and copied above
			e.values, e.state, e.hold = r.values, r.state, nil
		}
	}
	if s.hold == h {
		s.hold = nil
	}
}

// ownLocked makes e's buffers the slot's own before an update writes them
// (write lock held): if a snapshot's freeze still shares them, e switches
// to the copy (made by the copier, or here if it has not claimed e yet).
func (s *Slot) ownLocked(e *entry) {
	h := e.hold
	if h == nil {
		return
	}
	t0 := time.Now()
	k := e.holdIdx
	var r *bufs
	if h.claim[k].CompareAndSwap(false, true) {
		r = h.copyEntry(k)
	} else {
		// The copier is copying e (one entry; it needs no lock).
		for r = h.ready[k].Load(); r == nil; r = h.ready[k].Load() {
			runtime.Gosched()
		}
	}
	e.values, e.state, e.hold = r.values, r.state, nil
	s.cowNanos.Add(int64(time.Since(t0)))
}

// takeSpare returns spare if it has the shape of like, else new buffers.
func takeSpare(spare *bufs, like bufs) bufs {
	if spare != nil && len(spare.values) == len(like.values) && len(spare.state) == len(like.state) {
		return *spare
	}
	b := bufs{values: make([]float32, len(like.values)), state: make([][]float32, len(like.state))}
	for i := range b.state {
		b.state[i] = make([]float32, len(like.values))
	}
	return b
}

func copyBufs(dst, src bufs) {
	copy(dst.values, src.values)
	for i := range src.state {
		copy(dst.state[i], src.state[i])
	}
}

// Release gives the snapshot's buffers back to its slot as spare buffers
// for the next snapshot (so it allocates nothing). The caller must not use
// the snapshot, nor any slice taken from it, afterwards. Optional: a
// snapshot that is dropped instead is collected. Only snapshots handed to
// a SnapshotEvery hook can be released; for others it is a no-op. Safe to
// call more than once.
func (snap *SlotSnapshot) Release() {
	s := snap.owner
	if s == nil || !snap.releasable.CompareAndSwap(true, false) {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, vs := range snap.VShards {
		for _, es := range vs.Entries {
			var e *entry
			k := key{es.Param, es.Index}
			if s.layout.Params[k.p].Embedding {
				e = s.rows[k]
			} else {
				e = s.dense[k]
			}
			if e == nil || e.spare != nil || e.hold != nil || len(es.Values) == 0 || &e.values[0] == &es.Values[0] {
				continue
			}
			e.spare = &bufs{es.Values, es.State}
		}
		vs.Entries = nil
	}
}

// newSnapshot prepares an empty snapshot (no lock needed: the layout and
// optimizer are immutable).
func (s *Slot) newSnapshot() *SlotSnapshot {
	params := make([]ParamInfo, len(s.layout.Params))
	for i, p := range s.layout.Params {
		params[i] = ParamInfo{Name: p.Spec.GetName(), Embedding: p.Embedding, Shape: slices.Clone(p.Spec.GetShape())}
	}
	snap := &SlotSnapshot{Job: s.spec.GetName(), Slot: s.slot, NumPservers: s.layout.NumPservers, VShards: map[int32]*VShardSnapshot{}}
	for v := int32(0); v < s.layout.NumVShards; v++ {
		if s.owned[v] {
			snap.VShards[v] = &VShardSnapshot{
				Job: s.spec.GetName(), VShard: v, NumVShards: s.layout.NumVShards, BlockSize: s.layout.BlockSize,
				Optimizer: s.opt.opt.name(), StateSlots: s.opt.opt.stateSlots(), Params: params,
			}
		}
	}
	return snap
}

// copyLocked copies values, optimizer state, version and step into snap.
// The caller holds s.mu (read or write): updates wait for this copy. Only
// the fallback when a freeze is still being copied away.
func (s *Slot) copyLocked(snap *SlotSnapshot) {
	cp := func(k key, e *entry) EntrySnapshot {
		es := EntrySnapshot{Param: k.p, Index: k.i, T: e.t, Values: slices.Clone(e.values), State: make([][]float32, len(e.state))}
		for i, st := range e.state {
			es.State[i] = slices.Clone(st)
		}
		return es
	}
	snap.Version, snap.Step = s.version, s.step
	// Dense blocks are copied by every core at once (the copy is what
	// updates wait for); each worker fills its own part of one slice.
	dense := make([]EntrySnapshot, len(s.denseKeys))
	workers := min(runtime.GOMAXPROCS(0), max(1, len(s.denseKeys)/4))
	var wg sync.WaitGroup
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			for i := w; i < len(s.denseKeys); i += workers {
				k := s.denseKeys[i]
				dense[i] = cp(k, s.dense[k])
			}
		}(w)
	}
	wg.Wait()
	for i, k := range s.denseKeys {
		v := snap.VShards[s.layout.VShardOfBlock(s.layout.Params[k.p], k.i)]
		v.Entries = append(v.Entries, dense[i])
	}
	for k, e := range s.rows {
		v := snap.VShards[s.layout.VShardOfRow(s.layout.Params[k.p], k.i)]
		v.Entries = append(v.Entries, cp(k, e))
	}
}

// finishSnapshot stamps and sorts the vshards (outside the lock).
func (s *Slot) finishSnapshot(snap *SlotSnapshot) {
	for _, v := range snap.VShards {
		v.Version, v.Step = snap.Version, snap.Step
		slices.SortFunc(v.Entries, func(a, b EntrySnapshot) int { return keyLess(key{a.Param, a.Index}, key{b.Param, b.Index}) })
	}
}

// SnapshotEvery makes the slot take a snapshot at the end of every sync
// step whose number is a multiple of n, inside the step's completion (so
// every slot of a sync job snapshots exactly the same step, and a
// checkpoint version is one consistent model across slots), and hand it to
// fn. Updates wait only for the freeze (a pointer per block or row; see
// Snapshot): the copy is made by a goroutine of its own while training
// goes on. fn runs on that goroutine, may take its time (encode, write,
// replicate) and should call snap.Release when done with it, so the next
// snapshot reuses its buffers. n <= 0 or fn nil turns it off. Steps count
// in sync mode; in async mode a step is one update.
func (s *Slot) SnapshotEvery(n int64, fn func(*SlotSnapshot)) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.snapEvery, s.snapFn = n, fn
}

// stepSnapshotLocked runs the SnapshotEvery hook after a completed step
// (write lock held).
func (s *Slot) stepSnapshotLocked() {
	if s.snapFn == nil || s.snapEvery <= 0 || s.step%s.snapEvery != 0 {
		return
	}
	t0 := time.Now()
	defer func() { s.freezeNanos.Add(int64(time.Since(t0))) }()
	s.snapshotLocked(s.snapFn)
}

// SnapshotOnPull makes the slot snapshot the parameters a pull that asks
// for it (PullRequest.checkpoint: an eval's pull) reads, at most once per
// step, and hand the snapshot to fn as SnapshotEvery does (same freeze,
// same copy goroutine; fn should call snap.Release). The snapshot is taken
// right before the pull reads, under the write lock: its step and version
// are the reply's unless a step completes in between (in a sync job none
// does while an eval runs: its trainers are out of the steps), and a
// checkpoint of it names its own step either way. fn nil turns it off.
func (s *Slot) SnapshotOnPull(fn func(*SlotSnapshot)) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.pullSnapFn, s.pullSnapStep = fn, -1
}

// pullSnapshot runs the SnapshotOnPull hook for a pull asking for it.
func (s *Slot) pullSnapshot() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.pullSnapFn == nil || s.pullSnapStep == s.step {
		return
	}
	s.pullSnapStep = s.step
	s.snapshotLocked(s.pullSnapFn)
}

// snapshotLocked freezes a snapshot of the slot (write lock held) and hands
// it to fn on a goroutine of its own once copied away.
func (s *Slot) snapshotLocked(fn func(*SlotSnapshot)) {
	snap := s.newSnapshot()
	if s.hold != nil { // an earlier freeze is still being copied away
		s.copyLocked(snap)
		go func() {
			s.finishSnapshot(snap)
			fn(snap)
		}()
		return
	}
	h := s.freezeLocked(snap)
	snap.owner = s
	snap.releasable.Store(true)
	go func() {
		s.copyAway(h)
		s.finishSnapshot(snap)
		fn(snap)
	}()
}

// Vshard blob format, version 1. All integers little-endian.
//
//	magic       [4]byte  "RPVS"
//	format      uint16   1
//	flags       uint16   0
//	vshard      int32
//	num_vshards int32
//	block_size  int64
//	version     int64
//	step        int64
//	job         str      (str = uint32 length + UTF-8 bytes)
//	optimizer   str
//	nslots      uint32, then nslots × str   (optimizer state names, e.g. "m", "v")
//	nparams     uint32, then per param:
//	              name str, embedding uint8, rank uint32, rank × int64 shape
//	nentries    uint32, then per entry:
//	              param uint32 (index into params), index int64 (block or row),
//	              t int64 (updates applied), n uint32 (float32 count)
//	data        per entry in order: n float32 values, then nslots × n float32 state
//	crc         uint32   CRC-32C (Castagnoli) of every preceding byte
//
// Entries are sorted by (param, index); a param's embedding flag says
// whether index is a dense block or an embedding row.
const (
	vshardMagic  = "RPVS"
	vshardFormat = 1
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// EncodeVShard encodes vshard v of snap in the vshard blob format (see above).
func EncodeVShard(snap *SlotSnapshot, v int32) ([]byte, error) {
	vs, ok := snap.VShards[v]
	if !ok {
		return nil, fmt.Errorf("pserver: encode: vshard %d not in snapshot of slot %d", v, snap.Slot)
	}
	return vs.Encode(), nil
}

// Encode encodes the vshard in the vshard blob format.
func (vs *VShardSnapshot) Encode() []byte {
	size := 64 + len(vs.Job) + len(vs.Optimizer)
	for _, n := range vs.StateSlots {
		size += 4 + len(n)
	}
	for _, p := range vs.Params {
		size += 9 + len(p.Name) + 8*len(p.Shape)
	}
	for _, e := range vs.Entries {
		size += 24 + 4*len(e.Values)*(1+len(vs.StateSlots))
	}
	b := make([]byte, 0, size)
	le := binary.LittleEndian
	str := func(s string) []byte { b = le.AppendUint32(b, uint32(len(s))); return append(b, s...) }
	b = append(b, vshardMagic...)
	b = le.AppendUint16(b, vshardFormat)
	b = le.AppendUint16(b, 0)
	b = le.AppendUint32(b, uint32(vs.VShard))
	b = le.AppendUint32(b, uint32(vs.NumVShards))
	b = le.AppendUint64(b, uint64(vs.BlockSize))
	b = le.AppendUint64(b, uint64(vs.Version))
	b = le.AppendUint64(b, uint64(vs.Step))
	b = str(vs.Job)
	b = str(vs.Optimizer)
	b = le.AppendUint32(b, uint32(len(vs.StateSlots)))
	for _, n := range vs.StateSlots {
		b = str(n)
	}
	b = le.AppendUint32(b, uint32(len(vs.Params)))
	for _, p := range vs.Params {
		b = str(p.Name)
		emb := byte(0)
		if p.Embedding {
			emb = 1
		}
		b = append(b, emb)
		b = le.AppendUint32(b, uint32(len(p.Shape)))
		for _, d := range p.Shape {
			b = le.AppendUint64(b, uint64(d))
		}
	}
	b = le.AppendUint32(b, uint32(len(vs.Entries)))
	for _, e := range vs.Entries {
		b = le.AppendUint32(b, uint32(e.Param))
		b = le.AppendUint64(b, uint64(e.Index))
		b = le.AppendUint64(b, uint64(e.T))
		b = le.AppendUint32(b, uint32(len(e.Values)))
	}
	for _, e := range vs.Entries {
		b = appendFloats(b, e.Values)
		for _, st := range e.State {
			b = appendFloats(b, st)
		}
	}
	return le.AppendUint32(b, crc32.Checksum(b, castagnoli))
}

func appendFloats(b []byte, f []float32) []byte {
	n := len(b)
	b = slices.Grow(b, 4*len(f))[:n+4*len(f)]
	putFloat32s(b[n:], f)
	return b
}

// reader decodes with bounds checks; the first failure sticks.
type reader struct {
	b   []byte
	err error
}

func (r *reader) take(n int, what string) []byte {
	if r.err != nil {
		return nil
	}
	if n < 0 || n > len(r.b) {
		r.err = fmt.Errorf("%w: truncated reading %s (need %d bytes, have %d)", ErrCorrupt, what, n, len(r.b))
		return nil
	}
	out := r.b[:n]
	r.b = r.b[n:]
	return out
}
func (r *reader) u8(what string) uint8 {
	if b := r.take(1, what); b != nil {
		return b[0]
	}
	return 0
}
func (r *reader) u16(what string) uint16 {
	if b := r.take(2, what); b != nil {
		return binary.LittleEndian.Uint16(b)
	}
	return 0
}
func (r *reader) u32(what string) uint32 {
	if b := r.take(4, what); b != nil {
		return binary.LittleEndian.Uint32(b)
	}
	return 0
}
func (r *reader) u64(what string) uint64 {
	if b := r.take(8, what); b != nil {
		return binary.LittleEndian.Uint64(b)
	}
	return 0
}
func (r *reader) str(what string) string {
	n := r.u32(what)
	return string(r.take(int(n), what))
}

// count reads a uint32 count of items of at least minSize bytes each,
// refusing counts the remaining bytes cannot hold (no huge allocations from
// corrupt input).
func (r *reader) count(minSize int, what string) int {
	n := int(r.u32(what))
	if r.err == nil && n*minSize > len(r.b) {
		r.err = fmt.Errorf("%w: %s count %d exceeds remaining %d bytes", ErrCorrupt, what, n, len(r.b))
		return 0
	}
	return n
}

// DecodeVShard decodes a vshard blob (format above), checking magic, format
// version, CRC-32C and every length. Errors wrap ErrCorrupt, or
// ErrNewerFormat for a format version above this build's; it never panics
// on bad input.
func DecodeVShard(blob []byte) (*VShardSnapshot, error) {
	if len(blob) < 8+4 {
		return nil, fmt.Errorf("%w: %d bytes is too short", ErrCorrupt, len(blob))
	}
	if string(blob[:4]) != vshardMagic {
		return nil, fmt.Errorf("%w: bad magic %q", ErrCorrupt, blob[:4])
	}
	// The envelope (magic, format, CRC-32C trailer) is every format's: the
	// CRC first, so that a damaged format field reads as damage, not as a
	// newer raftps.
	body, sum := blob[:len(blob)-4], binary.LittleEndian.Uint32(blob[len(blob)-4:])
	if got := crc32.Checksum(body, castagnoli); got != sum {
		return nil, fmt.Errorf("%w: CRC-32C %08x, want %08x (truncated or damaged)", ErrCorrupt, got, sum)
	}
	if f := binary.LittleEndian.Uint16(blob[4:]); f > vshardFormat {
		return nil, fmt.Errorf("%w: format %d, this build reads formats up to %d; upgrade this node (`raftps version`)", ErrNewerFormat, f, vshardFormat)
	} else if f != vshardFormat {
		return nil, fmt.Errorf("%w: unknown format version %d", ErrCorrupt, f)
	}
	r := &reader{b: body[8:]}
	vs := &VShardSnapshot{}
	vs.VShard = int32(r.u32("vshard"))
	vs.NumVShards = int32(r.u32("num_vshards"))
	vs.BlockSize = int64(r.u64("block_size"))
	vs.Version = int64(r.u64("version"))
	vs.Step = int64(r.u64("step"))
	vs.Job = r.str("job")
	vs.Optimizer = r.str("optimizer")
	ns := r.count(4, "state slots")
	for range ns {
		vs.StateSlots = append(vs.StateSlots, r.str("state slot name"))
	}
	np := r.count(9, "params")
	for range np {
		p := ParamInfo{Name: r.str("param name"), Embedding: r.u8("embedding") == 1}
		rank := r.count(8, "rank")
		for range rank {
			p.Shape = append(p.Shape, int64(r.u64("shape")))
		}
		vs.Params = append(vs.Params, p)
	}
	ne := r.count(24, "entries")
	ns1 := len(vs.StateSlots) + 1
	vs.Entries = make([]EntrySnapshot, ne)
	var total int
	for i := range vs.Entries {
		e := &vs.Entries[i]
		e.Param = int32(r.u32("entry param"))
		e.Index = int64(r.u64("entry index"))
		e.T = int64(r.u64("entry t"))
		n := int(r.u32("entry length"))
		if r.err == nil && (e.Param < 0 || int(e.Param) >= len(vs.Params)) {
			r.err = fmt.Errorf("%w: entry %d names param %d of %d", ErrCorrupt, i, e.Param, len(vs.Params))
		}
		total += n * ns1 * 4
		if r.err == nil && total > len(r.b) {
			r.err = fmt.Errorf("%w: entries need more data than the blob holds", ErrCorrupt)
		}
		if r.err != nil {
			return nil, r.err
		}
		e.Values = make([]float32, n)
	}
	if r.err != nil {
		return nil, r.err
	}
	if total != len(r.b) {
		return nil, fmt.Errorf("%w: %d data bytes, entries describe %d", ErrCorrupt, len(r.b), total)
	}
	for i := range vs.Entries {
		e := &vs.Entries[i]
		n := len(e.Values)
		getFloat32s(e.Values, r.take(4*n, "values"))
		e.State = make([][]float32, len(vs.StateSlots))
		for j := range e.State {
			e.State[j] = make([]float32, n)
			getFloat32s(e.State[j], r.take(4*n, "state"))
		}
	}
	return vs, r.err
}

// RestoreSlot builds slot `slot` of numPservers for spec from vshard blobs
// (keyed by vshard; extra vshards are ignored). Every vshard the slot owns
// (v mod numPservers == slot) must be present, whatever number of pservers
// wrote it: repartitioning is a different choice of blobs. Values,
// optimizer state and per-entry update counts are restored exactly; the
// slot's version and step are the largest among its vshards.
//
// Restored state is not trusted: values and optimizer state must be
// finite, second-moment state (Adam's v, Adagrad's accumulator) >= 0 and
// update counts in [0, MaxUpdates] (Adam with t = -1 divides by zero), or
// the blob is ErrCorrupt; a block or row present twice is ErrIncompatible.
//
// Errors wrap ErrCorrupt (bad blob), ErrIncompatible (blob does not fit
// spec: number of vshards, block size, optimizer, param kind/shape, missing,
// misplaced or repeated blocks and rows) or ErrMissingVShard.
func RestoreSlot(spec *pb.JobSpec, slot, numPservers int32, blobs map[int32][]byte) (*Slot, error) {
	s, err := newEmptySlot(spec, slot, numPservers)
	if err != nil {
		return nil, err
	}
	l := s.layout
	for v := int32(0); v < l.NumVShards; v++ {
		if !s.owned[v] {
			continue
		}
		blob, ok := blobs[v]
		if !ok {
			return nil, fmt.Errorf("%w: vshard %d of slot %d", ErrMissingVShard, v, slot)
		}
		vs, err := DecodeVShard(blob)
		if err != nil {
			return nil, fmt.Errorf("vshard %d: %w", v, err)
		}
		if err := s.restoreVShard(v, vs); err != nil {
			return nil, fmt.Errorf("vshard %d: %w", v, err)
		}
		s.version = max(s.version, vs.Version)
		s.step = max(s.step, vs.Step)
	}
	// Every dense block must have been restored.
	for _, p := range l.Params {
		if p.Embedding {
			continue
		}
		for b := int64(0); b < p.Blocks; b++ {
			if s.owned[l.VShardOfBlock(p, b)] && s.dense[key{int32(p.Index), b}] == nil {
				return nil, fmt.Errorf("%w: param %q block %d missing from vshard %d", ErrIncompatible, p.Spec.GetName(), b, l.VShardOfBlock(p, b))
			}
		}
	}
	s.sortKeys()
	return s, nil
}

func (s *Slot) restoreVShard(v int32, vs *VShardSnapshot) error {
	l := s.layout
	if vs.VShard != v || vs.NumVShards != l.NumVShards || vs.BlockSize != l.BlockSize {
		return fmt.Errorf("%w: blob is vshard %d/%d block size %d, want %d/%d block size %d",
			ErrIncompatible, vs.VShard, vs.NumVShards, vs.BlockSize, v, l.NumVShards, l.BlockSize)
	}
	if vs.Optimizer != s.opt.opt.name() || !slices.Equal(vs.StateSlots, s.opt.opt.stateSlots()) {
		return fmt.Errorf("%w: blob optimizer %q %v, spec wants %q", ErrIncompatible, vs.Optimizer, vs.StateSlots, s.opt.opt.name())
	}
	// Map blob params to spec params by name, checking kind and shape.
	pm := make([]*ParamLayout, len(vs.Params))
	for i, pi := range vs.Params {
		p, ok := l.Param(pi.Name)
		if !ok {
			continue // a param dropped from the spec: its entries are ignored
		}
		if p.Embedding != pi.Embedding || !slices.Equal(p.Spec.GetShape(), pi.Shape) {
			return fmt.Errorf("%w: param %q is embedding=%v shape %v in blob, embedding=%v shape %v in spec",
				ErrIncompatible, pi.Name, pi.Embedding, pi.Shape, p.Embedding, p.Spec.GetShape())
		}
		pm[i] = p
	}
	for _, es := range vs.Entries {
		p := pm[es.Param]
		if p == nil {
			continue
		}
		if err := s.opt.checkEntry(es); err != nil {
			return fmt.Errorf("%w: param %q index %d: %v", ErrCorrupt, p.Spec.GetName(), es.Index, err)
		}
		e := &entry{values: es.Values, state: es.State, t: es.T}
		k := key{int32(p.Index), es.Index}
		if p.Embedding {
			if es.Index < 0 || es.Index >= p.Buckets || l.VShardOfRow(p, es.Index) != v || int64(len(es.Values)) != p.Dim {
				return fmt.Errorf("%w: param %q row %d (len %d) does not belong in vshard %d", ErrIncompatible, p.Spec.GetName(), es.Index, len(es.Values), v)
			}
			if s.rows[k] != nil {
				return fmt.Errorf("%w: param %q row %d twice", ErrIncompatible, p.Spec.GetName(), es.Index)
			}
			s.rows[k] = e
			continue
		}
		if es.Index < 0 || es.Index >= p.Blocks || l.VShardOfBlock(p, es.Index) != v {
			return fmt.Errorf("%w: param %q block %d does not belong in vshard %d", ErrIncompatible, p.Spec.GetName(), es.Index, v)
		}
		lo, hi := l.BlockRange(p, es.Index)
		if int64(len(es.Values)) != hi-lo {
			return fmt.Errorf("%w: param %q block %d has %d values, want %d", ErrIncompatible, p.Spec.GetName(), es.Index, len(es.Values), hi-lo)
		}
		if s.dense[k] != nil {
			return fmt.Errorf("%w: param %q block %d twice", ErrIncompatible, p.Spec.GetName(), es.Index)
		}
		s.addDense(k, e)
	}
	return nil
}

// ValueRun is a run of one parameter's values from a vshard blob: a dense
// block or an embedding row, without optimizer state. It has the fields of
// checkpoint.Block, so cmd can adapt DecodeVShardValues to
// checkpoint.Decoder (export and inspection of checkpoints).
type ValueRun struct {
	Name string
	// Shape is the whole parameter's shape.
	Shape []int64
	// Offset is the index of Data[0] in the parameter flattened row-major
	// (block·block_size for a dense block, row·dim for an embedding row).
	Offset int64
	Data   []float32
}

// DecodeVShardValues decodes a vshard blob into value runs, in
// (param, block|row) order. Errors wrap ErrCorrupt.
func DecodeVShardValues(blob []byte) ([]ValueRun, error) {
	vs, err := DecodeVShard(blob)
	if err != nil {
		return nil, err
	}
	runs := make([]ValueRun, 0, len(vs.Entries))
	for _, e := range vs.Entries {
		p := vs.Params[e.Param]
		off := e.Index * vs.BlockSize
		if p.Embedding {
			if len(p.Shape) != 2 {
				return nil, fmt.Errorf("%w: embedding %q has shape %v", ErrCorrupt, p.Name, p.Shape)
			}
			off = e.Index * p.Shape[1]
		}
		runs = append(runs, ValueRun{Name: p.Name, Shape: p.Shape, Offset: off, Data: e.Values})
	}
	return runs, nil
}
