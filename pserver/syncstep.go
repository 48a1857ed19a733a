package pserver

import (
	"context"
	"slices"
	"time"

	pb "github.com/raftps/raftps/api/raftpspb"
	"github.com/raftps/raftps/pserver/wire"
)

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

func (s *Slot) pushSync(ctx context.Context, req *pb.PushRequest, items []gradItem) (*pb.PushResponse, error) {
	trainer := req.GetTrainer()
	if trainer == "" {
		return nil, wire.Errorf(wire.ErrInvalid, "sync push without a trainer id")
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
				return nil, wire.Errorf(wire.ErrStale, "trainer %q is not a trainer of job %q after %v; register, re-pull and push again", trainer, s.spec.GetName(), MemberWait)
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
		return nil, wire.Errorf(wire.ErrStale, "push computed on incarnation %d of slot %d, which is at incarnation %d (restored under a new claim); re-pull", inc, s.slot, cur)
	}
	if step != s.step {
		cur := s.step
		s.mu.Unlock()
		return nil, wire.Errorf(wire.ErrStale, "push for step %d, slot %d is at step %d", step, s.slot, cur)
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
		return nil, wire.Errorf(wire.ErrStale, "trainer joined slot %d mid-step; re-pull (version %d)", s.slot, st.version)
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
// bounded by MaxGradient is bounded too: it fits a float32, and optim.Config.UpdateBound
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
