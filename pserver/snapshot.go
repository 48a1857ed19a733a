package pserver

import (
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/raftps/raftps/pserver/vshard"
)

// SlotSnapshot is a consistent in-memory copy of a slot: every vshard it
// owns, values and optimizer state, taken at one version.
type SlotSnapshot struct {
	Job         string
	Slot        int32
	NumPservers int32
	Version     int64
	Step        int64
	VShards     map[int32]*vshard.Snapshot

	// owner and releasable make Release give the buffers back (hook
	// snapshots only).
	owner      *Slot
	releasable atomic.Bool
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
func (s *Slot) Snapshot() *SlotSnapshot { return s.snapshot(nil) }

// snapshot is Snapshot, calling also (if not nil) under the same lock as
// the freeze or copy, so what it reads is of the snapshot's version.
func (s *Slot) snapshot(also func()) *SlotSnapshot {
	snap := s.newSnapshot()
	s.mu.Lock()
	if s.hold != nil {
		s.mu.Unlock()
		s.mu.RLock()
		s.copyLocked(snap)
		if also != nil {
			also()
		}
		s.mu.RUnlock()
		s.finishSnapshot(snap)
		return snap
	}
	h := s.freezeLocked(snap)
	if also != nil {
		also()
	}
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
	add := func(v *vshard.Snapshot, k key, e *entry) {
		e.hold, e.holdIdx = h, len(h.entries)
		h.entries = append(h.entries, e)
		h.frozen = append(h.frozen, bufs{e.values, e.state})
		h.spare = append(h.spare, e.spare)
		e.spare = nil
		v.Entries = append(v.Entries, vshard.Entry{Param: k.p, Index: k.i, T: e.t, Values: e.values, State: e.state})
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
	params := make([]vshard.ParamInfo, len(s.layout.Params))
	for i, p := range s.layout.Params {
		params[i] = vshard.ParamInfo{Name: p.Spec.GetName(), Embedding: p.Embedding, Shape: slices.Clone(p.Spec.GetShape())}
	}
	snap := &SlotSnapshot{Job: s.spec.GetName(), Slot: s.slot, NumPservers: s.layout.NumPservers, VShards: map[int32]*vshard.Snapshot{}}
	for v := int32(0); v < s.layout.NumVShards; v++ {
		if s.owned[v] {
			snap.VShards[v] = &vshard.Snapshot{
				Job: s.spec.GetName(), VShard: v, NumVShards: s.layout.NumVShards, BlockSize: s.layout.BlockSize,
				Optimizer: s.opt.Name(), StateSlots: s.opt.StateSlots(), Params: params,
			}
		}
	}
	return snap
}

// copyLocked copies values, optimizer state, version and step into snap.
// The caller holds s.mu (read or write): updates wait for this copy. Only
// the fallback when a freeze is still being copied away.
func (s *Slot) copyLocked(snap *SlotSnapshot) {
	cp := func(k key, e *entry) vshard.Entry {
		es := vshard.Entry{Param: k.p, Index: k.i, T: e.t, Values: slices.Clone(e.values), State: make([][]float32, len(e.state))}
		for i, st := range e.state {
			es.State[i] = slices.Clone(st)
		}
		return es
	}
	snap.Version, snap.Step = s.version, s.step
	// Dense blocks are copied by every core at once (the copy is what
	// updates wait for); each worker fills its own part of one slice.
	dense := make([]vshard.Entry, len(s.denseKeys))
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
		slices.SortFunc(v.Entries, func(a, b vshard.Entry) int { return keyLess(key{a.Param, a.Index}, key{b.Param, b.Index}) })
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
