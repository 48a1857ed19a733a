package pserver

import (
	"cmp"
	"context"
	"math"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	pb "github.com/raftps/raftps/api/raftpspb"
	"github.com/raftps/raftps/internal/shape"
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

// syncStep is the state of one synchronous step.
type syncStep struct {
	open   bool            // the step's membership is fixed (first push seen)
	opened time.Time       // when it opened
	expect map[string]bool // members that have neither pushed nor left
	pushed map[string]bool
	ids    map[string]uint64 // push id of each push counted (0: none)
	// contribs are the step's pushes in the order they were counted; the
	// mean is computed from them when the step completes (meanLocked). Their
	// gradients are the requests' own buffers, which stay valid while the
	// pushes wait for the step (waitStep). A push that stops waiting early
	// (cancelled, fenced) first folds every push up to its own into prefix
	// (foldContribution): prefix is Σ nᵢgᵢ of contribs[:folded] in float64,
	// summed as meanLocked sums, in the same order, so the step holds at
	// most one float64 buffer per key however many pushes stop waiting.
	contribs []contrib
	prefix   map[key][]float64
	folded   int
	// solo is the items of a push that completes the step as its only
	// contribution (set and consumed within that push's call): the
	// weighted mean of one gradient is the gradient itself, bit for bit
	// (float64(g)·n·(1/n) is within 2^-51 of g, so it rounds back to the
	// float32 g), so it is applied without the float64 round trip.
	solo     []gradItem
	examples int64
	trainers int
	done     chan struct{} // closed when the step completes
	version  int64         // slot version after completion
	err      error         // the step's update was refused (set before done closes)
}

// contrib is one push counted in a sync step: its gradients, weighted by
// its examples (nil items once folded into syncStep.prefix).
type contrib struct {
	trainer string
	w       float64
	items   []gradItem
}

func newSyncStep() *syncStep {
	return &syncStep{pushed: map[string]bool{}, ids: map[string]uint64{}, done: make(chan struct{})}
}

// Slot holds the virtual shards of one pserver slot of one job: parameter
// values, optimizer state, the model version and the sync-step state. It has
// no gRPC or Raft dependency; Server exposes it over gRPC and the node feeds
// it membership (SetTrainers) and lease loss (Fence).
//
// All methods are safe for concurrent use. Errors are *Error values carrying
// a gRPC status (see errors.go).
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
	layout    *Layout
	slot      int32
	opt       optConfig
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
			e := newEntry(int(hi-lo), len(s.opt.opt.stateSlots()))
			initValues(e.values, spec.GetSeed(), p, 'b', b)
			s.addDense(key{int32(p.Index), b}, e)
		}
	}
	s.sortKeys()
	return s, nil
}

func newEmptySlot(spec *pb.JobSpec, slot, numPservers int32) (*Slot, error) {
	l, err := NewLayout(spec, numPservers)
	if err != nil {
		return nil, err
	}
	if slot < 0 || slot >= numPservers {
		return nil, errorf(ErrBadSpec, "slot %d of %d pservers", slot, numPservers)
	}
	opt, err := newOptConfig(spec.GetOptimizer())
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

		maxReplyBytes: MaxMessageSize / 2,
	}
	for v := int32(0); v < l.NumVShards; v++ {
		s.owned[v] = SlotOfVShard(v, numPservers) == slot
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
func (s *Slot) Layout() *Layout { return s.layout }

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
		return errorf(ErrFenced, "slot %d", s.slot)
	}
	if d := s.deadline.Load(); d != nil && !d.Holds() {
		s.Fence()
		return errorf(ErrFenced, "slot %d: past its lease's serve-until deadline", s.slot)
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
		return errorf(ErrFenced, "slot %d: fenced while the request ran, so it is not acknowledged (a push may have applied here; retry it on the slot's next holder)", s.slot)
	}
	return nil
}

// MaxPullBytes bounds the tensor data of one named pull (a PullRequest
// that lists tensors): the response is sized before anything is allocated
// and a larger one is refused with ErrInvalid (split the request). It is
// gRPC's message limit (MaxMessageSize); a bigger response could not be
// sent anyway.
const MaxPullBytes = MaxMessageSize

// Pull returns the values the request names (dense blocks by name and block,
// embedding rows by name and rows); an empty request returns every dense
// block of the slot, in (param, block) order. A row never pushed is not
// stored: its initial value (seeded by seed, name and row) is computed into
// the response, so pulls never grow the slot. Data is packed little-endian
// float32.
//
// The request is validated and its response sized before anything is
// allocated: an unknown param, a block or row out of range or in another
// slot, a block or row named twice, rows on a dense param, or a response
// above MaxPullBytes are ErrInvalid (InvalidArgument) naming the param.
// Errors: ErrFenced, ErrInvalid.
func (s *Slot) Pull(ctx context.Context, req *pb.PullRequest) (*pb.PullResponse, error) {
	resp, _, err := s.pull(ctx, req)
	return resp, err
}

// pull is Pull, also returning the buffer every tensor of a whole-slot
// reply aliases (see pullAll; nil for a named pull).
func (s *Slot) pull(_ context.Context, req *pb.PullRequest) (*pb.PullResponse, []byte, error) {
	if err := s.checkFence(); err != nil {
		return nil, nil, err
	}
	if req.GetCheckpoint() {
		s.pullSnapshot()
	}
	resp, buf, err := s.read(req)
	if err = s.acked(err); err != nil {
		putDataBuf(buf)
		return nil, nil, err
	}
	return resp, buf, nil
}

// read is pull after its fence check.
func (s *Slot) read(req *pb.PullRequest) (*pb.PullResponse, []byte, error) {
	if len(req.GetTensors()) == 0 {
		resp, buf := s.pullAll(math.MaxInt)
		return resp, buf, nil
	}
	params, total, err := s.checkPull(req.GetTensors())
	if err != nil {
		return nil, nil, err
	}
	buf := make([]byte, total)
	var scratch []float32
	s.mu.RLock()
	defer s.mu.RUnlock()
	resp := &pb.PullResponse{Version: s.version, Incarnation: s.incarnation, Tensors: make([]*pb.Tensor, 0, len(params))}
	off := 0
	for i, t := range req.GetTensors() {
		p := params[i]
		out := &pb.Tensor{Name: t.GetName()}
		if p.Embedding {
			d := int(p.Dim)
			out.Rows = slices.Clone(t.GetRows())
			n := 4 * d * len(out.Rows)
			out.Data = buf[off : off+n : off+n]
			for j, r := range out.Rows {
				dst := out.Data[4*j*d : 4*(j+1)*d]
				if e := s.rows[key{int32(p.Index), r}]; e != nil {
					putFloat32s(dst, e.values)
					continue
				}
				if cap(scratch) < d {
					scratch = make([]float32, d)
				}
				initValues(scratch[:d], s.spec.GetSeed(), p, 'r', r)
				putFloat32s(dst, scratch[:d])
			}
		} else {
			out.Block = t.GetBlock()
			v := s.dense[key{int32(p.Index), t.GetBlock()}].values
			n := 4 * len(v)
			out.Data = buf[off : off+n : off+n]
			putFloat32s(out.Data, v)
		}
		off += len(out.Data)
		resp.Tensors = append(resp.Tensors, out)
	}
	return resp, nil, nil
}

// checkPull validates a named pull and returns each tensor's param and the
// response's data bytes. It allocates in proportion to the request only.
// No lock is needed: the layout and ownership are immutable.
func (s *Slot) checkPull(ts []*pb.Tensor) ([]*ParamLayout, int, error) {
	params := make([]*ParamLayout, len(ts))
	seen := make(map[key]struct{}, len(ts))
	var total int64
	for i, t := range ts {
		p, ok := s.layout.Param(t.GetName())
		if !ok {
			return nil, 0, errorf(ErrInvalid, "pull: unknown param %q", t.GetName())
		}
		params[i] = p
		var n int64 // float32s this tensor adds to the response
		if p.Embedding {
			for _, r := range t.GetRows() {
				if err := s.checkRow(p, r); err != nil {
					return nil, 0, err
				}
				k := key{int32(p.Index), r}
				if _, dup := seen[k]; dup {
					return nil, 0, errorf(ErrInvalid, "pull: param %q row %d named twice", p.Spec.GetName(), r)
				}
				seen[k] = struct{}{}
			}
			// Rows are distinct and in range, so len(rows) <= buckets and
			// the product stays below shape.MaxElements.
			n = int64(len(t.GetRows())) * p.Dim
		} else {
			if len(t.GetRows()) != 0 {
				return nil, 0, errorf(ErrInvalid, "pull: param %q is dense; rows given", p.Spec.GetName())
			}
			b := t.GetBlock()
			if err := s.checkBlock(p, b); err != nil {
				return nil, 0, err
			}
			k := key{int32(p.Index), b}
			if _, dup := seen[k]; dup {
				return nil, 0, errorf(ErrInvalid, "pull: param %q block %d named twice", p.Spec.GetName(), b)
			}
			seen[k] = struct{}{}
			lo, hi := s.layout.BlockRange(p, b)
			n = hi - lo
		}
		if total += 4 * n; total > MaxPullBytes {
			return nil, 0, errorf(ErrInvalid, "pull: param %q: response would exceed %d bytes; split the request", p.Spec.GetName(), int64(MaxPullBytes))
		}
	}
	return params, int(total), nil
}

// pullAll copies every dense block of the slot into one buffer (from the
// data pool, see getDataBuf) and returns a response whose tensors alias
// it, and the buffer, which nothing else references: the Server lends it
// to the tensor codec, which returns it to the pool once the reply is on
// the wire (lendReply). Nil if the data would be more than limit bytes.
func (s *Slot) pullAll(limit int) (*pb.PullResponse, []byte) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	total := 0
	for _, k := range s.denseKeys {
		total += len(s.dense[k].values)
	}
	if 4*total > limit {
		return nil, nil
	}
	buf := getDataBuf(4 * total) // every byte is written below
	resp := &pb.PullResponse{Version: s.version, Incarnation: s.incarnation, Tensors: make([]*pb.Tensor, 0, len(s.denseKeys))}
	off := 0
	for _, k := range s.denseKeys {
		v := s.dense[k].values
		b := buf[off : off+4*len(v) : off+4*len(v)]
		putFloat32s(b, v)
		off += len(b)
		resp.Tensors = append(resp.Tensors, &pb.Tensor{Name: s.layout.Params[k.p].Spec.GetName(), Block: k.i, Data: b})
	}
	return resp, buf
}

// newRow returns embedding row r of p at its initial value with zero
// optimizer state, not stored (only a committed push stores rows).
func (s *Slot) newRow(p *ParamLayout, r int64) *entry {
	e := newEntry(int(p.Dim), len(s.opt.opt.stateSlots()))
	initValues(e.values, s.spec.GetSeed(), p, 'r', r)
	return e
}

func (s *Slot) checkRow(p *ParamLayout, r int64) error {
	if r < 0 || r >= p.Buckets {
		return errorf(ErrInvalid, "param %q: row %d out of range [0, %d)", p.Spec.GetName(), r, p.Buckets)
	}
	if v := s.layout.VShardOfRow(p, r); !s.owned[v] {
		return errorf(ErrInvalid, "param %q: row %d is in vshard %d, not served by slot %d", p.Spec.GetName(), r, v, s.slot)
	}
	return nil
}

func (s *Slot) checkBlock(p *ParamLayout, b int64) error {
	if b < 0 || b >= p.Blocks {
		return errorf(ErrInvalid, "param %q: block %d out of range [0, %d)", p.Spec.GetName(), b, p.Blocks)
	}
	if v := s.layout.VShardOfBlock(p, b); !s.owned[v] {
		return errorf(ErrInvalid, "param %q: block %d is in vshard %d, not served by slot %d", p.Spec.GetName(), b, v, s.slot)
	}
	return nil
}

// Bounds on what a push may carry. They keep every finite gradient from
// poisoning the parameters through overflow: with |g| <= MaxGradient, g² and
// Adam's v stay far inside float32, and Σ examples·g of a sync step is
// accumulated in float64 from at most MaxExamples per push.
const (
	// MaxGradient bounds |g| of every gradient element; a larger, NaN or
	// Inf element is ErrInvalid.
	MaxGradient = 1e12
	// MaxTrainerIDLen bounds the trainer id of a push or LeaveStep (slots
	// remember ids: push ids, trainers away); a longer one is ErrInvalid.
	MaxTrainerIDLen = 256
	// MaxExamples bounds PushRequest.examples (the weight of a push in the
	// sync average); a larger or negative value is ErrInvalid.
	MaxExamples = 1 << 32
)

// gradItem is one validated gradient for one entry.
type gradItem struct {
	k    key
	p    *ParamLayout
	g    []float32
	gmax float64 // max |g|, or -1: not computed (see optConfig.boundOK)
	row  bool
}

// pushParser validates the tensors of one push, which may arrive in several
// messages (PushStream): each tensor is checked on arrival (known param,
// block or rows in range and in this slot, length, |g| <= MaxGradient, no
// block or row named twice), and the data of the whole push is capped at
// the most a push to this slot can carry (Slot.maxPushBytes). Nothing is
// touched on error.
type pushParser struct {
	s     *Slot
	items []gradItem
	seen  map[key]struct{}
	bytes int64
}

func (s *Slot) newPushParser() *pushParser {
	return &pushParser{s: s, seen: map[key]struct{}{}}
}

func (pp *pushParser) add(grads []*pb.Tensor) error {
	s := pp.s
	for _, t := range grads {
		p, ok := s.layout.Param(t.GetName())
		if !ok {
			return errorf(ErrInvalid, "push: unknown param %q", t.GetName())
		}
		if len(t.GetData())%4 != 0 {
			return errorf(ErrInvalid, "param %q: data length %d is not a multiple of 4", p.Spec.GetName(), len(t.GetData()))
		}
		if pp.bytes += int64(len(t.GetData())); pp.bytes > s.maxPushBytes {
			return errorf(ErrInvalid, "param %q: push carries more than the %d bytes of gradient slot %d can take", p.Spec.GetName(), s.maxPushBytes, s.slot)
		}
		if p.Embedding {
			rows := t.GetRows()
			if n, ok := shape.Mul(int64(len(rows)), p.Dim); !ok || int64(len(t.GetData())/4) != n {
				return errorf(ErrInvalid, "param %q: %d values for %d rows of dim %d", p.Spec.GetName(), len(t.GetData())/4, len(rows), p.Dim)
			}
			g := viewFloat32s(t.GetData())
			if err := checkGrad(p, g); err != nil {
				return err
			}
			d := int(p.Dim)
			for j, r := range rows {
				if err := s.checkRow(p, r); err != nil {
					return err
				}
				k := key{int32(p.Index), r}
				if _, dup := pp.seen[k]; dup {
					return errorf(ErrInvalid, "param %q: row %d pushed twice", p.Spec.GetName(), r)
				}
				pp.seen[k] = struct{}{}
				pp.items = append(pp.items, gradItem{k: k, p: p, g: g[j*d : (j+1)*d : (j+1)*d], gmax: -1, row: true})
			}
			continue
		}
		if len(t.GetRows()) != 0 {
			return errorf(ErrInvalid, "param %q is dense; rows given", p.Spec.GetName())
		}
		b := t.GetBlock()
		if err := s.checkBlock(p, b); err != nil {
			return err
		}
		lo, hi := s.layout.BlockRange(p, b)
		if int64(len(t.GetData())/4) != hi-lo {
			return errorf(ErrInvalid, "param %q: block %d has %d values, want %d", p.Spec.GetName(), b, len(t.GetData())/4, hi-lo)
		}
		k := key{int32(p.Index), b}
		if _, dup := pp.seen[k]; dup {
			return errorf(ErrInvalid, "param %q: block %d pushed twice", p.Spec.GetName(), b)
		}
		pp.seen[k] = struct{}{}
		g := viewFloat32s(t.GetData())
		if err := checkGrad(p, g); err != nil {
			return err
		}
		pp.items = append(pp.items, gradItem{k: k, p: p, g: g, gmax: -1})
	}
	return nil
}

// checkGrad refuses NaN, ±Inf and |g| > MaxGradient (see anyAbove);
// only a refused gradient is scanned again, for the message.
func checkGrad(p *ParamLayout, g []float32) error {
	if !anyAbove(g, maxGradientBits) {
		return nil
	}
	for _, v := range g {
		if math.Float32bits(v)&absMask > maxGradientBits {
			return errorf(ErrInvalid, "param %q: gradient element %g is NaN, Inf or larger than %g in magnitude", p.Spec.GetName(), v, MaxGradient)
		}
	}
	return nil
}

// maxGradientBits is the bit pattern of MaxGradient as a float32 (the
// bound a float32 |g| <= MaxGradient compares with).
var maxGradientBits = math.Float32bits(MaxGradient)

// parseGrads validates every tensor of a one-message push (see pushParser).
func (s *Slot) parseGrads(grads []*pb.Tensor) ([]gradItem, error) {
	pp := s.newPushParser()
	if err := pp.add(grads); err != nil {
		return nil, err
	}
	return pp.items, nil
}

// applyLocked applies items (distinct entries) with the learning rate
// scaled by lrScale, all or nothing (write lock held): an update that the
// magnitude bound does not show safe is first computed without storing;
// if any value or optimizer state would be NaN or Inf in float32, nothing
// is stored and the error (ErrInvalid) names the first such entry. Rows
// not stored yet are created from their initializer only when the updates
// are committed. Dry runs and commits run in chunks on every core (see
// runChunks, chunkSpans).
func (s *Slot) applyLocked(items []gradItem, lrScale float64) error {
	c := &s.opt
	es := make([]*entry, len(items))
	lrs := make([]float64, len(items))
	ts := make([]int64, len(items))
	bounds := make([]float64, len(items))
	modes := make([]stepMode, len(items))
	var fresh, dry []int
	for i, it := range items {
		e := s.dense[it.k]
		if it.row {
			if e = s.rows[it.k]; e == nil {
				e = s.newRow(it.p, it.k.i)
				fresh = append(fresh, i)
			}
		}
		es[i] = e
		lrs[i], ts[i] = c.schedule(e, lrScale)
		bounds[i] = c.updateBound(e, it.g, it.gmax, lrs[i], ts[i])
		switch {
		case !(bounds[i] < safeBound):
			dry = append(dry, i)
			modes[i] = stepStore
		case ts[i]%exactMaxEvery == 0 || bounds[i] > exactMaxAbove:
			modes[i] = stepStore
		default:
			modes[i] = stepStoreFast
		}
	}
	if len(dry) > 0 {
		spans, chunks := chunkSpans(items, dry)
		bad := make([]bool, len(spans))
		runChunks(len(chunks)-1, func(k int) {
			for j := chunks[k]; j < chunks[k+1]; j++ {
				x := spans[j]
				ok, _ := c.opt.step(es[x.item], x.lo, items[x.item].g[x.lo:x.hi], c.weightDecay, lrs[x.item], ts[x.item], stepCheck)
				bad[j] = !ok
			}
		})
		if j := slices.Index(bad, true); j >= 0 {
			it := items[spans[j].item] // spans are in item order: the first refused entry
			what := "block"
			if it.row {
				what = "row"
			}
			return errorf(ErrInvalid, "param %q %s %d: the update would make values or optimizer state NaN or Inf (gradient too large for the current state); nothing applied",
				it.p.Spec.GetName(), what, it.k.i)
		}
	}
	for _, i := range fresh {
		s.rows[items[i].k] = es[i]
	}
	// Every update passed its bound or dry run, so every commit does too
	// (and a commit never stores a value that does not fit). An entry that
	// a snapshot still shares is made the slot's own (ownLocked) by the
	// first of its spans to commit, not all up front: the snapshot's copier
	// copies entries meanwhile, and each one it copies first is one copy
	// fewer for the update to wait for.
	spans, chunks := chunkSpans(items, nil)
	amax := make([]float64, len(spans))
	owned := make([]sync.Once, len(items))
	runChunks(len(chunks)-1, func(k int) {
		for j := chunks[k]; j < chunks[k+1]; j++ {
			x := spans[j]
			e := es[x.item]
			owned[x.item].Do(func() { s.ownLocked(e) })
			_, amax[j] = c.opt.step(e, x.lo, items[x.item].g[x.lo:x.hi], c.weightDecay, lrs[x.item], ts[x.item], modes[x.item])
		}
	})
	for j := 0; j < len(spans); {
		i, m, untaken := spans[j].item, 0.0, false
		for ; j < len(spans) && spans[j].item == i; j++ {
			m, untaken = max(m, amax[j]), untaken || amax[j] < 0
		}
		if untaken { // some range left its maximum untaken: the update's bound holds it
			m = bounds[i]
		}
		es[i].committed(m)
	}
	return nil
}

// exactMaxEvery: every this many updates of an entry, a commit takes the
// exact largest magnitude (stepStore). In between, an optimizer may leave
// it untaken (stepStoreFast: two passes over the entry fewer, most of
// momentum's commit) and the entry keeps the update's bound instead, which
// grows from one update to the next (by lr·μ·amax and lr·(1+μ)·MaxGradient
// for momentum); taking the exact maximum again keeps it from reaching
// safeBound, past which every update would pay for a dry run. An update
// whose bound is already above exactMaxAbove takes it at once (a learning
// rate of 10 multiplies the bound by about 10 per update), so the bound
// never runs up to safeBound between two exact maxima.
const (
	exactMaxEvery = 16
	exactMaxAbove = safeBound * 1e-6
)

// chunkElems is the grain of a parallel update: about 10 µs of a float64
// update loop on one core (momentum's float32 commit takes about 2.5 µs).
const chunkElems = 8192

// span is elements [lo, hi) of the update of items[item].
type span struct{ item, lo, hi int }

// chunkSpans splits the updates of items (of those listed in only, or all
// if only is nil), in item order, into spans of at most chunkElems
// elements, and groups consecutive spans into chunks of about chunkElems
// elements (many small rows make one chunk): chunk k is spans
// [chunks[k], chunks[k+1]).
func chunkSpans(items []gradItem, only []int) (spans []span, chunks []int) {
	add := func(i int) {
		n := len(items[i].g)
		for lo := 0; lo < n || lo == 0; lo += chunkElems {
			spans = append(spans, span{i, lo, min(lo+chunkElems, n)})
		}
	}
	if only == nil {
		for i := range items {
			add(i)
		}
	} else {
		for _, i := range only {
			add(i)
		}
	}
	size := 0
	for j, x := range spans {
		if j == 0 || size+x.hi-x.lo > chunkElems {
			chunks = append(chunks, j)
			size = 0
		}
		size += x.hi - x.lo
	}
	return spans, append(chunks, len(spans))
}

// Push applies a trainer's gradients (packed little-endian float32, one
// tensor per dense block or per set of embedding rows). A push is validated
// whole before anything is touched: unknown param, wrong length, block or
// row out of range, in another slot or named twice, NaN, Inf or
// |g| > MaxGradient, examples < 0 or > MaxExamples → ErrInvalid
// (InvalidArgument) naming the param. An update whose result (values or
// optimizer state) would not be finite in float32 is refused the same way
// and leaves the slot byte-identical.
//
// Async mode: applied at once; with staleness k > 0 a push with
// version < Version()-k is refused with ErrStale (FailedPrecondition).
//
// Sync mode: the gradient joins the current step (req.step, which must equal
// Step(); else ErrStale). The step's members are the trainers of
// SetTrainers at the step's first push, minus those that called LeaveStep;
// trainers added later join from the next step (their push waits for the
// step to end, then gets ErrStale to re-pull). A push from a trainer that is
// not (yet) a member waits until SetTrainers adds it, at most MemberWait
// (then ErrStale). The step completes when every member has pushed or left
// (LeaveStep, or removal by SetTrainers); it applies one update with the
// example-weighted average Σ nᵢ·gᵢ / Σ nᵢ (nᵢ = req.examples, 0 counts as
// 1), accumulated in float64, so k trainers equal one process on the
// concatenated batch. Push blocks until then (bounded by ctx) and returns
// the new version. A repeated push by the same trainer in the same step is
// not counted twice (retries are safe).
//
// With spec.scale_lr_with_trainers the learning rate is multiplied by the
// number of trainers in the step (sync) or of members (async).
//
// With req.pull the reply also carries every dense block of the slot, read
// after the push applied (what a Pull right after it returns: version and
// incarnation are those of the tensors). If the slot is fenced by then, or
// its dense data is more than half of MaxMessageSize, the reply has the push's
// version and no tensors, and the caller pulls (the push stands).
//
// A push is acknowledged only if, after its update, the slot is neither
// fenced nor past its Deadline: the check is made again then, so a reply
// never leaves after the fence, however long the update took (a
// 100M-parameter Adam step takes longer than the handover margin).
// Otherwise the trainer gets ErrFenced (Unavailable) though the update
// may have applied here, and the client retries with the same push id on
// the slot's next holder, which does not know the id: async, it applies
// the gradient once to what it restored (the last checkpoint, which lacks
// this update unless this slot checkpointed after it while its claim still
// held; then the gradient counts twice, as any push whose reply was lost
// across a handover); sync, the next holder starts a new epoch and the
// retry, computed on this incarnation, is ErrStale (re-pull). Acknowledged
// updates all finished before the deadline, so before the next holder
// serves (schema.HandoverWait).
func (s *Slot) Push(ctx context.Context, req *pb.PushRequest) (*pb.PushResponse, error) {
	resp, _, err := s.pushReply(ctx, req)
	return resp, err
}

// pushReply is Push, also returning the buffer the reply's tensors alias
// (see pullAll; nil without them).
func (s *Slot) pushReply(ctx context.Context, req *pb.PushRequest) (*pb.PushResponse, []byte, error) {
	if err := s.checkFence(); err != nil {
		return nil, nil, err
	}
	items, err := s.parseGrads(req.GetGrads())
	if err != nil {
		return nil, nil, err
	}
	resp, err := s.push(ctx, req, items)
	if err != nil || !req.GetPull() || s.checkFence() != nil {
		return resp, nil, err
	}
	pr, buf := s.pullAll(s.maxReplyBytes)
	if pr == nil || s.checkFence() != nil {
		putDataBuf(buf)
		return resp, nil, nil
	}
	return &pb.PushResponse{Version: pr.Version, Tensors: pr.Tensors, Incarnation: pr.Incarnation}, buf, nil
}

// push applies a validated push (see Push).
func (s *Slot) push(ctx context.Context, req *pb.PushRequest, items []gradItem) (*pb.PushResponse, error) {
	if len(req.GetTrainer()) > MaxTrainerIDLen {
		return nil, errorf(ErrInvalid, "push: trainer id of %d bytes, more than %d", len(req.GetTrainer()), MaxTrainerIDLen)
	}
	if n := req.GetExamples(); n < 0 || n > MaxExamples {
		return nil, errorf(ErrInvalid, "push: examples %d not in [0, %d]", n, int64(MaxExamples))
	}
	var resp *pb.PushResponse
	var err error
	if s.mode == pb.UpdateMode_UPDATE_MODE_ASYNC {
		resp, err = s.pushAsync(req, items)
	} else {
		resp, err = s.pushSync(ctx, req, items)
	}
	if err = s.acked(err); err != nil {
		return nil, err
	}
	return resp, nil
}

func (s *Slot) pushAsync(req *pb.PushRequest, items []gradItem) (*pb.PushResponse, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.checkFence(); err != nil {
		return nil, err
	}
	if v, ok := s.pushIDs.lookup(req.GetTrainer(), req.GetPushId()); ok {
		return &pb.PushResponse{Version: v}, nil // a retry of an applied push
	}
	if s.staleness > 0 && req.GetVersion() < s.version-s.staleness {
		return nil, errorf(ErrStale, "push on version %d, slot %d at version %d, staleness bound %d",
			req.GetVersion(), s.slot, s.version, s.staleness)
	}
	scale := 1.0
	if s.spec.GetScaleLrWithTrainers() && len(s.members) > 1 {
		scale = float64(len(s.members))
	}
	if err := s.applyLocked(items, scale); err != nil {
		return nil, err
	}
	s.version++
	s.step++
	s.pushIDs.record(req.GetTrainer(), req.GetPushId(), s.version)
	return &pb.PushResponse{Version: s.version}, nil
}

// Push ids (PushRequest.push_id) make retried pushes apply at most once:
// each trainer's last pushIDWindow applied ids are remembered with the
// version they produced, for at most maxPushIDTrainers trainers (when full,
// the least recently pushing half is forgotten). The memory is the slot's, not the
// checkpoint's: after the slot moves to another node a retry is applied
// again if the push was not in the checkpoint the new owner restored.
const (
	pushIDWindow      = 64
	maxPushIDTrainers = 4096
)

// pushIDs is the per-trainer memory of applied push ids (guarded by Slot.mu).
type pushIDs struct {
	by    map[string]*pushIDRing
	clock int64
}

type pushIDRing struct {
	ids      [pushIDWindow]uint64
	versions [pushIDWindow]int64
	next     int
	used     int64 // clock of the last record
}

// lookup returns the version an applied push id produced (id 0: never).
func (p *pushIDs) lookup(trainer string, id uint64) (int64, bool) {
	r := p.by[trainer]
	if id == 0 || r == nil {
		return 0, false
	}
	for i, x := range r.ids {
		if x == id {
			return r.versions[i], true
		}
	}
	return 0, false
}

// record remembers that push id of trainer produced version.
func (p *pushIDs) record(trainer string, id uint64, version int64) {
	if id == 0 {
		return
	}
	if p.by == nil {
		p.by = map[string]*pushIDRing{}
	}
	r := p.by[trainer]
	if r == nil {
		if len(p.by) >= maxPushIDTrainers {
			// Forget the least recently pushing half at once (amortized
			// O(log n) per new trainer, not a scan per push).
			ts := make([]string, 0, len(p.by))
			for t := range p.by {
				ts = append(ts, t)
			}
			slices.SortFunc(ts, func(a, b string) int { return cmp.Compare(p.by[a].used, p.by[b].used) })
			for _, t := range ts[:len(ts)/2] {
				delete(p.by, t)
			}
		}
		r = &pushIDRing{}
		p.by[trainer] = r
	}
	p.clock++
	r.ids[r.next], r.versions[r.next], r.used = id, version, p.clock
	r.next = (r.next + 1) % pushIDWindow
}

// MemberWait bounds how long a sync push from a trainer that is not (yet)
// in the slot's trainer set waits for SetTrainers to add it, holding its
// decoded gradients; then it fails with ErrStale (the trainer re-pulls and
// pushes again).
var MemberWait = 30 * time.Second

func (s *Slot) pushSync(ctx context.Context, req *pb.PushRequest, items []gradItem) (*pb.PushResponse, error) {
	trainer := req.GetTrainer()
	if trainer == "" {
		return nil, errorf(ErrInvalid, "sync push without a trainer id")
	}
	step := req.GetStep()
	if step == 0 {
		step = req.GetVersion()
	}
	n := req.GetExamples()
	if n <= 0 {
		n = 1
	}
	s.mu.Lock()
	if !s.members[trainer] {
		wait := time.NewTimer(MemberWait)
		defer wait.Stop()
		for !s.members[trainer] {
			ch := s.membersCh
			s.mu.Unlock()
			select {
			case <-ch:
			case <-ctx.Done():
				return nil, ctx.Err()
			case <-s.fenceCh:
				return nil, s.checkFence()
			case <-wait.C:
				return nil, errorf(ErrStale, "trainer %q is not a trainer of job %q after %v; register, re-pull and push again", trainer, s.spec.GetName(), MemberWait)
			}
			s.mu.Lock()
		}
	}
	if err := s.checkFence(); err != nil {
		s.mu.Unlock()
		return nil, err
	}
	if v, ok := s.pushIDs.lookup(trainer, req.GetPushId()); ok {
		s.mu.Unlock()
		return &pb.PushResponse{Version: v}, nil // a retry after its step completed
	}
	if inc := req.GetIncarnation(); inc != 0 && inc != s.incarnation {
		cur := s.incarnation
		s.mu.Unlock()
		return nil, errorf(ErrStale, "push computed on incarnation %d of slot %d, which is at incarnation %d (restored under a new claim); re-pull", inc, s.slot, cur)
	}
	if step != s.step {
		cur := s.step
		s.mu.Unlock()
		return nil, errorf(ErrStale, "push for step %d, slot %d is at step %d", step, s.slot, cur)
	}
	st := s.cur
	if st.pushed[trainer] {
		s.mu.Unlock()
		return s.waitStep(ctx, st, trainer, false)
	}
	delete(s.away, trainer)
	if !st.open {
		st.open, st.opened = true, time.Now()
		st.expect = make(map[string]bool, len(s.members))
		for t := range s.members {
			if !s.away[t] {
				st.expect[t] = true
			}
		}
	}
	if !st.expect[trainer] {
		s.mu.Unlock()
		return s.waitStep(ctx, st, trainer, true)
	}
	if st.trainers == 0 && len(st.expect) == 1 {
		// The only contribution: maybeCompleteLocked below applies it as
		// it is (see syncStep.solo).
		st.solo = items
		items = nil
	}
	if len(items) > 0 {
		st.contribs = append(st.contribs, contrib{trainer: trainer, w: float64(n), items: items})
	}
	st.pushed[trainer] = true
	st.ids[trainer] = req.GetPushId()
	delete(st.expect, trainer)
	st.examples += n
	st.trainers++
	s.maybeCompleteLocked()
	s.mu.Unlock()
	return s.waitStep(ctx, st, trainer, false)
}

// waitStep waits for st to complete; joined reports a trainer that joined
// mid-step, which gets ErrStale (re-pull) once the step is over. If it
// stops waiting first (ctx, fence), the gradients trainer counted in st
// are folded into the step's sums (foldContribution): the caller then
// releases its request.
func (s *Slot) waitStep(ctx context.Context, st *syncStep, trainer string, joined bool) (*pb.PushResponse, error) {
	select {
	case <-st.done:
	case <-ctx.Done():
		s.foldContribution(st, trainer)
		return nil, ctx.Err()
	case <-s.fenceCh:
		s.foldContribution(st, trainer)
		return nil, s.checkFence()
	}
	if joined {
		return nil, errorf(ErrStale, "trainer joined slot %d mid-step; re-pull (version %d)", s.slot, st.version)
	}
	if st.err != nil {
		return nil, st.err
	}
	return &pb.PushResponse{Version: st.version}, nil
}

// maybeCompleteLocked completes the current sync step if no member is
// still expected (write lock held). If the step's update is refused (a
// result would not be finite), the slot is unchanged, the step does not
// advance and every push of the step gets the error.
func (s *Slot) maybeCompleteLocked() {
	st := s.cur
	if !st.open || len(st.expect) > 0 {
		return
	}
	if st.trainers > 0 {
		scale := 1.0
		if s.spec.GetScaleLrWithTrainers() {
			scale = float64(st.trainers)
		}
		var items []gradItem
		solo := st.solo != nil
		if solo {
			items = slices.Clone(st.solo)
			slices.SortFunc(items, func(a, b gradItem) int { return keyLess(a.k, b.k) })
			st.solo = nil
			s.meanFree = nil
		} else {
			items = s.meanLocked(st)
		}
		if st.err = s.applyLocked(items, scale); st.err == nil {
			s.version++
			s.step++
			for t, id := range st.ids {
				s.pushIDs.record(t, id, s.version)
			}
			s.stepSnapshotLocked()
		}
		if !solo {
			if s.meanFree == nil {
				s.meanFree = map[key][]float32{}
			}
			for _, it := range items {
				if !it.row {
					s.meanFree[it.k] = it.g
				}
			}
		}
	}
	st.version = s.version
	close(st.done)
	s.cur = newSyncStep()
}

// meanLocked returns the step's weighted mean gradient, Σ nᵢ·gᵢ / Σ nᵢ
// over its pushes, one item per key in key order. Each element is summed
// in float64 in the order the pushes were counted, starting from zero, and
// rounded to float32 once: the mean does not depend on how the pushes were
// cut into chunks or cores, on which of them stopped waiting, and hardly
// on their order. It runs in one pass over the pushes' gradients (and the
// folded prefix) on every core (runChunks), into buffers kept from an
// earlier step (meanFree) where there are. The weighted mean of gradients
// bounded by MaxGradient is bounded too: it fits a float32, and boundOK
// may use MaxGradient for it (gmax -1). Write lock held.
func (s *Slot) meanLocked(st *syncStep) []gradItem {
	type sources struct {
		prefix []float64 // the folded pushes' sum, or nil
		g      [][]float32
		w      []float64
	}
	src := map[key]*sources{}
	for k, a := range st.prefix {
		src[k] = &sources{prefix: a}
	}
	for _, c := range st.contribs[st.folded:] {
		for _, it := range c.items {
			x := src[it.k]
			if x == nil {
				x = &sources{}
				src[it.k] = x
			}
			x.g, x.w = append(x.g, it.g), append(x.w, c.w)
		}
	}
	keys := make([]key, 0, len(src))
	for k := range src {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, keyLess)
	items := make([]gradItem, len(keys))
	srcs := make([]*sources, len(keys))
	for j, k := range keys {
		x := src[k]
		srcs[j] = x
		n := len(x.prefix)
		if x.prefix == nil {
			n = len(x.g[0])
		}
		g := s.meanFree[k]
		if len(g) == n {
			delete(s.meanFree, k)
		} else {
			g = make([]float32, n)
		}
		p := s.layout.Params[k.p]
		items[j] = gradItem{k: k, p: p, g: g, gmax: -1, row: p.Embedding}
	}
	inv := 1 / float64(st.examples)
	spans, chunks := chunkSpans(items, nil)
	runChunks(len(chunks)-1, func(k int) {
		for _, x := range spans[chunks[k]:chunks[k+1]] {
			y := srcs[x.item]
			weightedMean(items[x.item].g[x.lo:x.hi], y.prefix, y.g, y.w, x.lo, inv)
		}
	})
	return items
}

// weightedMean sets out[i] = float32((p + w₀·g₀[lo+i] + w₁·g₁[lo+i] + …)·inv)
// with the sum in float64 and p = prefix[lo+i], or 0 if prefix is nil, a
// block of elements at a time (the block's sums stay in cache, so the
// pass reads each input and writes out once).
func weightedMean(out []float32, prefix []float64, g [][]float32, w []float64, lo int, inv float64) {
	var acc [512]float64
	for b := 0; b < len(out); b += len(acc) {
		a := acc[:min(len(acc), len(out)-b)]
		at := lo + b
		c0 := 0
		if prefix != nil {
			copy(a, prefix[at:at+len(a)])
		} else {
			for i, v := range g[0][at : at+len(a)] {
				a[i] = 0 + w[0]*float64(v)
			}
			c0 = 1
		}
		for c := c0; c < len(g); c++ {
			wc := w[c]
			for i, v := range g[c][at : at+len(a)] {
				a[i] += wc * float64(v)
			}
		}
		o := out[b : b+len(a)]
		for i, v := range a {
			o[i] = float32(v * inv)
		}
	}
}

// foldContribution folds the pushes of st up to and including trainer's
// into st.prefix, if st is still open and they are not folded yet, so
// that trainer's gradients outlive its push: called by a push that stops
// waiting for its step (cancelled, fenced) before its request's buffers
// are released. Folding a prefix, not the one push, keeps the order of
// the sums; the pushes after it stay by reference (their calls still
// wait). Write lock taken.
func (s *Slot) foldContribution(st *syncStep, trainer string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	select {
	case <-st.done:
		return
	default:
	}
	i := slices.IndexFunc(st.contribs, func(c contrib) bool { return c.trainer == trainer })
	if i < st.folded {
		return // not counted in st, or folded already
	}
	if st.prefix == nil {
		st.prefix = map[key][]float64{}
	}
	for j := st.folded; j <= i; j++ {
		c := st.contribs[j]
		sums := make([][]float64, len(c.items))
		for n, it := range c.items {
			a := st.prefix[it.k]
			if a == nil {
				a = make([]float64, len(it.g))
				st.prefix[it.k] = a
			}
			sums[n] = a
		}
		spans, chunks := chunkSpans(c.items, nil)
		runChunks(len(chunks)-1, func(k int) {
			for _, x := range spans[chunks[k]:chunks[k+1]] {
				a := sums[x.item][x.lo:x.hi]
				for n, v := range c.items[x.item].g[x.lo:x.hi] {
					a[n] += c.w * float64(v)
				}
			}
		})
		st.contribs[j].items = nil
	}
	st.folded = i + 1
}

// StepWait describes the current sync step of a slot while it waits for
// trainers (see Slot.Waiting).
type StepWait struct {
	Step    int64         // the step's number
	For     time.Duration // since its first push
	Waiting []string      // trainers expected that have neither pushed nor left, sorted
	Pushed  []string      // trainers that pushed, sorted
}

// Waiting reports the current sync step if it is open (a trainer pushed)
// and still waits for others; ok is false otherwise (async mode, no push
// yet). A step that waits long names the trainers that hold it up: the
// node logs it (pserver/agent), since a sync step waits for every live
// trainer by design.
func (s *Slot) Waiting() (w StepWait, ok bool) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	st := s.cur
	if s.mode == pb.UpdateMode_UPDATE_MODE_ASYNC || !st.open || len(st.expect) == 0 {
		return StepWait{}, false
	}
	w = StepWait{Step: s.step, For: time.Since(st.opened)}
	for t := range st.expect {
		w.Waiting = append(w.Waiting, t)
	}
	for t := range st.pushed {
		w.Pushed = append(w.Pushed, t)
	}
	slices.Sort(w.Waiting)
	slices.Sort(w.Pushed)
	return w, true
}

// maxAway bounds the trainers remembered as away (LeaveStep) that are no
// longer in the trainer set; beyond it those are forgotten.
const maxAway = 4096

// pruneAwayLocked forgets away trainers that are not members once more
// than maxAway are remembered (write lock held).
func (s *Slot) pruneAwayLocked() {
	if len(s.away) <= maxAway {
		return
	}
	for t := range s.away {
		if !s.members[t] {
			delete(s.away, t)
		}
	}
}

// SetTrainers sets the live trainers of the job (the node calls it whenever
// /jobs/<job>/trainers/ changes). Trainers no longer listed leave the
// current sync step, which completes with the others; new ones join from
// the next step. A trainer that left sync steps (LeaveStep) stays away
// across membership changes (a lease that flaps) until it pushes again.
func (s *Slot) SetTrainers(ids []string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	m := make(map[string]bool, len(ids))
	for _, id := range ids {
		m[id] = true
	}
	s.members = m
	s.pruneAwayLocked()
	if s.cur.open {
		for t := range s.cur.expect {
			if !m[t] {
				delete(s.cur.expect, t)
			}
		}
		s.maybeCompleteLocked()
	}
	close(s.membersCh)
	s.membersCh = make(chan struct{})
}

// Away returns, sorted, the trainers that left sync steps (LeaveStep) and
// have not pushed since. A slot that replaces this one (a rollback) is
// told of them, so that its steps do not wait for trainers that are not
// training.
func (s *Slot) Away() []string {
	s.mu.RLock()
	defer s.mu.RUnlock()
	ids := make([]string, 0, len(s.away))
	for t := range s.away {
		ids = append(ids, t)
	}
	slices.Sort(ids)
	return ids
}

// LeaveStep removes trainer from the current and later sync steps (it ran
// out of data or is leaving) until it pushes again. A no-op in async mode.
func (s *Slot) LeaveStep(trainer string) {
	if s.mode == pb.UpdateMode_UPDATE_MODE_ASYNC {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.away[trainer] = true
	s.pruneAwayLocked()
	if s.cur.open {
		delete(s.cur.expect, trainer)
		s.maybeCompleteLocked()
	}
}
