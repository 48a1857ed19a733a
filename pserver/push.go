package pserver

import (
	"context"
	"math"
	"slices"
	"sync"

	pb "github.com/raftps/raftps/api/raftpspb"
	"github.com/raftps/raftps/internal/shape"
	"github.com/raftps/raftps/pserver/optim"
	"github.com/raftps/raftps/pserver/wire"
)

// gradItem is one validated gradient for one entry.
type gradItem struct {
	k    key
	p    *wire.ParamLayout
	g    []float32
	gmax float64 // max |g|, or -1: not computed (see optim.Config.UpdateBound)
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
			return wire.Errorf(wire.ErrInvalid, "push: unknown param %q", t.GetName())
		}
		if len(t.GetData())%4 != 0 {
			return wire.Errorf(wire.ErrInvalid, "param %q: data length %d is not a multiple of 4", p.Spec.GetName(), len(t.GetData()))
		}
		if pp.bytes += int64(len(t.GetData())); pp.bytes > s.maxPushBytes {
			return wire.Errorf(wire.ErrInvalid, "param %q: push carries more than the %d bytes of gradient slot %d can take", p.Spec.GetName(), s.maxPushBytes, s.slot)
		}
		if p.Embedding {
			rows := t.GetRows()
			if n, ok := shape.Mul(int64(len(rows)), p.Dim); !ok || int64(len(t.GetData())/4) != n {
				return wire.Errorf(wire.ErrInvalid, "param %q: %d values for %d rows of dim %d", p.Spec.GetName(), len(t.GetData())/4, len(rows), p.Dim)
			}
			g := wire.ViewFloat32s(t.GetData())
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
					return wire.Errorf(wire.ErrInvalid, "param %q: row %d pushed twice", p.Spec.GetName(), r)
				}
				pp.seen[k] = struct{}{}
				pp.items = append(pp.items, gradItem{k: k, p: p, g: g[j*d : (j+1)*d : (j+1)*d], gmax: -1, row: true})
			}
			continue
		}
		if len(t.GetRows()) != 0 {
			return wire.Errorf(wire.ErrInvalid, "param %q is dense; rows given", p.Spec.GetName())
		}
		b := t.GetBlock()
		if err := s.checkBlock(p, b); err != nil {
			return err
		}
		lo, hi := s.layout.BlockRange(p, b)
		if int64(len(t.GetData())/4) != hi-lo {
			return wire.Errorf(wire.ErrInvalid, "param %q: block %d has %d values, want %d", p.Spec.GetName(), b, len(t.GetData())/4, hi-lo)
		}
		k := key{int32(p.Index), b}
		if _, dup := pp.seen[k]; dup {
			return wire.Errorf(wire.ErrInvalid, "param %q: block %d pushed twice", p.Spec.GetName(), b)
		}
		pp.seen[k] = struct{}{}
		g := wire.ViewFloat32s(t.GetData())
		if err := checkGrad(p, g); err != nil {
			return err
		}
		pp.items = append(pp.items, gradItem{k: k, p: p, g: g, gmax: -1})
	}
	return nil
}

// checkGrad refuses NaN, ±Inf and |g| > MaxGradient (see optim.AnyAbove);
// only a refused gradient is scanned again, for the message.
func checkGrad(p *wire.ParamLayout, g []float32) error {
	if !optim.AnyAbove(g, maxGradientBits) {
		return nil
	}
	for _, v := range g {
		if math.Float32bits(v)&optim.AbsMask > maxGradientBits {
			return wire.Errorf(wire.ErrInvalid, "param %q: gradient element %g is NaN, Inf or larger than %g in magnitude", p.Spec.GetName(), v, MaxGradient)
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
	hs := make([]optim.Hyper, len(items))
	bounds := make([]float64, len(items))
	modes := make([]optim.Mode, len(items))
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
		hs[i] = c.Schedule(e.t, lrScale)
		bounds[i] = c.UpdateBound(e.magnitude(), it.g, it.gmax, MaxGradient, hs[i])
		switch {
		case !(bounds[i] < optim.SafeBound):
			dry = append(dry, i)
			modes[i] = optim.Store
		case hs[i].T%exactMaxEvery == 0 || bounds[i] > exactMaxAbove:
			modes[i] = optim.Store
		default:
			modes[i] = optim.StoreFast
		}
	}
	if len(dry) > 0 {
		spans, chunks := chunkSpans(items, dry)
		bad := make([]bool, len(spans))
		runChunks(len(chunks)-1, func(k int) {
			for j := chunks[k]; j < chunks[k+1]; j++ {
				x := spans[j]
				e := es[x.item]
				ok, _ := c.Apply(e.values, e.state, x.lo, items[x.item].g[x.lo:x.hi], hs[x.item], optim.Check)
				bad[j] = !ok
			}
		})
		if j := slices.Index(bad, true); j >= 0 {
			it := items[spans[j].item] // spans are in item order: the first refused entry
			what := "block"
			if it.row {
				what = "row"
			}
			return wire.Errorf(wire.ErrInvalid, "param %q %s %d: the update would make values or optimizer state NaN or Inf (gradient too large for the current state); nothing applied",
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
			_, amax[j] = c.Apply(e.values, e.state, x.lo, items[x.item].g[x.lo:x.hi], hs[x.item], modes[x.item])
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
// exact largest magnitude (optim.Store). In between, an optimizer may leave
// it untaken (optim.StoreFast: two passes over the entry fewer, most of
// momentum's commit) and the entry keeps the update's bound instead, which
// grows from one update to the next (by lr·μ·amax and lr·(1+μ)·MaxGradient
// for momentum); taking the exact maximum again keeps it from reaching
// optim.SafeBound, past which every update would pay for a dry run. An update
// whose bound is already above exactMaxAbove takes it at once (a learning
// rate of 10 multiplies the bound by about 10 per update), so the bound
// never runs up to optim.SafeBound between two exact maxima.
const (
	exactMaxEvery = 16
	exactMaxAbove = optim.SafeBound * 1e-6
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
		wire.PutDataBuf(buf)
		return resp, nil, nil
	}
	return &pb.PushResponse{Version: pr.Version, Tensors: pr.Tensors, Incarnation: pr.Incarnation}, buf, nil
}

// push applies a validated push (see Push).
func (s *Slot) push(ctx context.Context, req *pb.PushRequest, items []gradItem) (*pb.PushResponse, error) {
	if err := s.checkEpoch(req.GetEpoch()); err != nil {
		return nil, err
	}
	if len(req.GetTrainer()) > MaxTrainerIDLen {
		return nil, wire.Errorf(wire.ErrInvalid, "push: trainer id of %d bytes, more than %d", len(req.GetTrainer()), MaxTrainerIDLen)
	}
	if n := req.GetExamples(); n < 0 || n > MaxExamples {
		return nil, wire.Errorf(wire.ErrInvalid, "push: examples %d not in [0, %d]", n, int64(MaxExamples))
	}
	var resp *pb.PushResponse
	var err error
	if s.mode == pb.UpdateMode_UPDATE_MODE_ASYNC {
		resp, err = s.pushAsync(req, items)
	} else {
		resp, err = s.pushSync(ctx, req, items)
	}
	if err == nil {
		err = s.waitAckGate(ctx, resp.GetVersion())
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
		return nil, wire.Errorf(wire.ErrStale, "push on version %d, slot %d at version %d, staleness bound %d",
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
	if s.onUpdate != nil { // no allocation per push without replication
		s.emitLocked(items, scale, []*pb.PushID{{Trainer: req.GetTrainer(), PushId: req.GetPushId()}})
	}
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
