package pserver

import (
	"math"
	"slices"
	"sync"
	"sync/atomic"

	pb "github.com/raftps/raftps/api/raftpspb"
	"github.com/raftps/raftps/pserver/optim"
	"github.com/raftps/raftps/pserver/wire"
)

// key names one entry of a slot: a dense block or an embedding row of the
// parameter with index p in JobSpec.params.
type key struct {
	p int32
	i int64 // block (dense) or row (embedding)
}

func keyLess(a, b key) int {
	if a.p != b.p {
		return int(a.p - b.p)
	}
	switch {
	case a.i < b.i:
		return -1
	case a.i > b.i:
		return 1
	}
	return 0
}

// entry is one dense block or embedding row with its optimizer state.
type entry struct {
	values []float32
	state  [][]float32 // one per optimizer state slot, len(values) each
	t      int64       // updates applied (Adam's t, the lr schedule's step)
	// amax bounds |values| and |state| when amaxKnown (see optimizer).
	amax      float64
	amaxKnown bool
	// hold is the snapshot whose freeze shares values and state and that
	// has not copied them away yet (nil: the slot's own; see ownLocked),
	// holdIdx the entry's index in it; spare is a buffer set of the same shape a released snapshot gave
	// back, for the next copy.
	hold    *snapHold
	holdIdx int
	spare   *bufs
}

func newEntry(n, nstate int) *entry {
	e := &entry{values: make([]float32, n), state: make([][]float32, nstate)}
	for i := range e.state {
		e.state[i] = make([]float32, n)
	}
	return e
}

// committed counts an update whose commit stored at most amax in magnitude
// (the largest of its ranges', or the update's bound) in e.t and e's
// magnitude bound.
func (e *entry) committed(amax float64) {
	e.t++
	// A maximum taken before rounding to float32, or a bound computed in
	// exact arithmetic: widen it by more than the relative error of the
	// few float32 roundings of an element (2^-24 each).
	e.amax, e.amaxKnown = amax*(1+1e-6), true
}

// magnitude returns the largest |value| or |state| of e (computed once,
// then maintained by committed updates).
func (e *entry) magnitude() float64 {
	if !e.amaxKnown {
		m := optim.MaxAbs(e.values)
		for _, st := range e.state {
			m = max(m, optim.MaxAbs(st))
		}
		e.amax, e.amaxKnown = m, true
	}
	return e.amax
}

// Slot holds the virtual shards of one pserver slot of one job: parameter
// values, optimizer state, the model version and the sync-step state. It has
// no gRPC or Raft dependency; Server exposes it over gRPC and the node feeds
// it membership (SetTrainers) and lease loss (Fence).
//
// All methods are safe for concurrent use. Errors are *Error values carrying
// a gRPC status (see pserver/wire, errors.go).
type Slot struct {
	// snapEvery and snapFn are the SnapshotEvery hook (guarded by mu).
	snapEvery int64
	snapFn    func(*SlotSnapshot)
	// pullSnapFn is the SnapshotOnPull hook and pullSnapStep the step it
	// last snapshotted (-1: none yet) (guarded by mu).
	pullSnapFn   func(*SlotSnapshot)
	pullSnapStep int64
	// hold is the freeze being copied away, if any (guarded by mu; at most
	// one at a time). For benchmarks: freezes counts freezes, freezeNanos
	// the time step snapshots held the lock, cowNanos the time updates
	// spent copying frozen entries (ownLocked).
	hold        *snapHold
	freezes     atomic.Int64
	freezeNanos atomic.Int64
	cowNanos    atomic.Int64

	spec      *pb.JobSpec
	layout    *wire.Layout
	slot      int32
	opt       optim.Config
	mode      pb.UpdateMode
	staleness int64
	owned     []bool // by vshard
	// maxPushBytes is the most gradient data one push can carry: 4 bytes
	// per owned dense element plus every embedding table in full.
	maxPushBytes int64
	// maxReplyBytes bounds the tensor data a push with pull gets back
	// (half of MaxMessageSize): a larger slot answers without it, since a
	// push that succeeded must not fail on the size of its reply (the
	// client pulls, streamed, instead).
	maxReplyBytes int

	fenced    atomic.Bool
	fenceCh   chan struct{}
	fenceOnce sync.Once
	// deadline is the serve-until of the lease the slot is served under
	// (nil: none; SetDeadline): checkFence fences the slot once it passed.
	deadline atomic.Pointer[Deadline]
	// epoch is the replica epoch the slot serves under (SetEpoch; 0:
	// unreplicated), deposedBy the newer epoch that deposed it (Depose;
	// 0: not deposed): checkEpoch compares trainers' requests with them.
	epoch     atomic.Int64
	deposedBy atomic.Int64

	mu          sync.RWMutex
	dense       map[key]*entry
	denseKeys   []key // sorted
	rows        map[key]*entry
	version     int64
	step        int64
	incarnation int64

	pushIDs   pushIDs // push ids applied, per trainer (at most once per id)
	members   map[string]bool
	away      map[string]bool // left sync steps (LeaveStep) until they push again
	membersCh chan struct{}   // closed and replaced whenever members change
	cur       *syncStep
	// meanFree keeps, between sync steps of two or more trainers, each
	// dense entry's buffer of the mean gradient for the next step: 4
	// bytes per dense param that such a step needs anyway, kept instead of
	// allocated, zeroed and collected again every step. A step completed
	// by one trainer alone drops them. Embedding rows, a different set
	// every step, are not kept.
	meanFree map[key][]float32
	// onUpdate is the OnUpdate hook (replicate.go; guarded by mu).
	onUpdate func(*pb.ReplicateRequest)
	// ackGate is the SetAckGate hook (replicate.go; nil: none).
	ackGate atomic.Pointer[AckGate]
}

// NewSlot builds slot `slot` of numPservers for spec, with every dense block
// it owns initialized from the spec's initializers (seeded by spec.seed,
// parameter name and block, so values do not depend on numPservers).
// Embedding rows are stored from their first applied push; a pull of a row
// never pushed returns its initial value without storing it.
//
// In sync mode the caller must keep the slot's trainer set current with
// SetTrainers: a push from a trainer not in the set waits for it.
func NewSlot(spec *pb.JobSpec, slot, numPservers int32) (*Slot, error) {
	s, err := newEmptySlot(spec, slot, numPservers)
	if err != nil {
		return nil, err
	}
	l := s.layout
	for _, p := range l.Params {
		if p.Embedding {
			continue
		}
		for b := int64(0); b < p.Blocks; b++ {
			if !s.owned[l.VShardOfBlock(p, b)] {
				continue
			}
			lo, hi := l.BlockRange(p, b)
			e := newEntry(int(hi-lo), len(s.opt.StateSlots()))
			initValues(e.values, spec.GetSeed(), p, 'b', b)
			s.addDense(key{int32(p.Index), b}, e)
		}
	}
	s.sortKeys()
	return s, nil
}

func newEmptySlot(spec *pb.JobSpec, slot, numPservers int32) (*Slot, error) {
	l, err := wire.NewLayout(spec, numPservers)
	if err != nil {
		return nil, err
	}
	if slot < 0 || slot >= numPservers {
		return nil, wire.Errorf(wire.ErrBadSpec, "slot %d of %d pservers", slot, numPservers)
	}
	opt, err := optim.New(spec.GetOptimizer())
	if err != nil {
		return nil, err
	}
	s := &Slot{
		spec:      spec,
		layout:    l,
		slot:      slot,
		opt:       opt,
		mode:      spec.GetMode(),
		staleness: int64(spec.GetStaleness()),
		owned:     make([]bool, l.NumVShards),
		fenceCh:   make(chan struct{}),
		dense:     map[key]*entry{},
		rows:      map[key]*entry{},
		members:   map[string]bool{},
		away:      map[string]bool{},
		membersCh: make(chan struct{}),
		cur:       newSyncStep(),

		maxReplyBytes: wire.MaxMessageSize / 2,
	}
	for v := int32(0); v < l.NumVShards; v++ {
		s.owned[v] = wire.SlotOfVShard(v, numPservers) == slot
	}
	for _, p := range l.Params {
		n := p.Size // an embedding's rows may hash anywhere: all of it
		if !p.Embedding {
			n = 0
			for b := int64(0); b < p.Blocks; b++ {
				if s.owned[l.VShardOfBlock(p, b)] {
					lo, hi := l.BlockRange(p, b)
					n += hi - lo
				}
			}
		}
		// Sizes are at most shape.MaxElements each: saturate the sum.
		s.maxPushBytes = min(s.maxPushBytes+4*n, math.MaxInt64/2)
	}
	return s, nil
}

func (s *Slot) addDense(k key, e *entry) {
	s.dense[k] = e
	s.denseKeys = append(s.denseKeys, k)
}

func (s *Slot) sortKeys() { slices.SortFunc(s.denseKeys, keyLess) }

// Layout returns the slot's (immutable) sharding layout.
func (s *Slot) Layout() *wire.Layout { return s.layout }

// Index returns the slot number.
func (s *Slot) Index() int32 { return s.slot }

// Version is the number of updates applied (async: accepted pushes; sync:
// completed steps with at least one gradient).
func (s *Slot) Version() int64 {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.version
}

// Step is the current sync step (the step the next push belongs to). In
// async mode it equals Version.
func (s *Slot) Step() int64 {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.step
}

// SetIncarnation records the incarnation (claim revision) reported in pull
// responses. A sync push that names another incarnation is stale
// (PushRequest.incarnation): it was computed on the slot as another claim
// served it, before a restore.
func (s *Slot) SetIncarnation(inc int64) {
	s.mu.Lock()
	s.incarnation = inc
	s.mu.Unlock()
}

// Fence makes the slot refuse every call, from now on, with ErrFenced (gRPC
// Unavailable "slot lost its lease; re-resolve"); blocked sync pushes return
// at once. The node calls it when the slot's lease is lost. Safe to call
// more than once.
func (s *Slot) Fence() {
	s.fenced.Store(true)
	s.fenceOnce.Do(func() { close(s.fenceCh) })
}

// SetDeadline attaches d, the serve-until of the lease the slot is served
// under: from the moment d passes, every call is refused with ErrFenced
// (and the slot fenced, as by Fence), and an update that finishes after
// it is not acknowledged (see Push). The node sets it before it serves
// the slot. A slot without one is fenced only by Fence.
func (s *Slot) SetDeadline(d *Deadline) { s.deadline.Store(d) }

// Deadline returns the slot's serve-until (nil if none).
func (s *Slot) Deadline() *Deadline { return s.deadline.Load() }

// Close fences the slot. Safe to call more than once.
func (s *Slot) Close() error {
	s.Fence()
	return nil
}

// Fenced reports whether Fence or Close was called.
func (s *Slot) Fenced() bool { return s.fenced.Load() }

// checkFence returns ErrFenced if the slot was fenced or its deadline has
// passed (then it fences the slot, waking the pushes waiting in it). Every
// call checks it on entry and, before it replies, again after it read or
// updated the slot (acked), so nothing is acknowledged after the fence.
func (s *Slot) checkFence() error {
	if s.fenced.Load() {
		return wire.Errorf(wire.ErrFenced, "slot %d", s.slot)
	}
	if d := s.deadline.Load(); d != nil && !d.Holds() {
		s.Fence()
		return wire.Errorf(wire.ErrFenced, "slot %d: past its lease's serve-until deadline", s.slot)
	}
	return nil
}

// acked returns err, or ErrFenced if the slot was fenced or its deadline
// passed while the call ran: a push then is not acknowledged, though its
// update applied (the trainer retries on the slot's next holder; see Push).
func (s *Slot) acked(err error) error {
	if err != nil {
		return err
	}
	if s.checkFence() != nil {
		return wire.Errorf(wire.ErrFenced, "slot %d: fenced while the request ran, so it is not acknowledged (a push may have applied here; retry it on the slot's next holder)", s.slot)
	}
	return nil
}
