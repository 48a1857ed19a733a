package raftstore

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"sync"

	"google.golang.org/grpc/peer"

	pb "github.com/raftps/raftps/api/raftpspb"
	"github.com/raftps/raftps/api/rpctypes"
	"github.com/raftps/raftps/fsm"
)

// watchBatch is the most events read from the FSM per step (the FSM
// returns whole revisions, so a revision is never split across responses).
const watchBatch = 512

// ErrTooManyWatchers is rpctypes.ErrTooManyWatchers: a watch over
// Config.MaxWatchers or Config.MaxWatchersPerConn (gRPC ResourceExhausted).
var ErrTooManyWatchers = rpctypes.ErrTooManyWatchers

// WatchEvent is one response for the watcher id on a channel that
// watchers share (WatchShared).
type WatchEvent struct {
	ID   int64
	Resp *pb.WatchResponse
}

// Watch streams the events of req.Key (or the range [Key, RangeEnd)) with
// mod revision >= req.StartRevision (0: from the next revision), in
// revision order, with no gaps and no duplicates; events of one revision
// are never split across responses. The channel is closed when ctx ends or
// the store closes. A watcher resumes after a reconnect by watching again
// from the last revision it saw + 1. A start below the compaction revision
// returns an error wrapping fsm.ErrCompacted; if compaction overtakes a
// slow watcher, a final response with Canceled set is sent. Errors also:
// ErrTooManyWatchers (the caps of WatchShared).
//
// Watch is WatchShared with a channel of its own and one goroutine that
// hands its responses on; a caller with many watchers (etcd's Watch
// stream) uses WatchShared and one goroutine for them all.
func (s *Store) Watch(ctx context.Context, req *pb.WatchRequest) (<-chan *pb.WatchResponse, error) {
	ctx, cancel := context.WithCancel(ctx)
	in := make(chan WatchEvent, 16)
	if err := s.WatchShared(ctx, req, 0, in); err != nil {
		cancel()
		return nil, err
	}
	ch := make(chan *pb.WatchResponse, 16)
	go func() {
		defer close(ch)
		defer cancel()
		for {
			select {
			case ev := <-in:
				select {
				case ch <- ev.Resp:
				case <-ctx.Done():
					return
				case <-s.stopping:
					return
				}
				if ev.Resp.Canceled {
					return
				}
			case <-ctx.Done():
				return
			case <-s.stopping:
				return
			}
		}
	}()
	return ch, nil
}

// WatchShared starts a watcher of req (Watch's semantics) whose responses
// go to out tagged with id; many watchers may share out. The watcher ends
// when ctx ends (nothing is sent for it after that, and out is never
// closed) or after a response with Canceled set. out's reader must keep
// reading while any of its watchers lives.
//
// Fan-out (etcd's watchableStore): one goroutine of the store reads each
// applied revision's events once and hands them to the watchers that are
// in sync and whose range matches (single keys by a map, ranges by a
// scan), without blocking: a watcher whose out is full, or that starts in
// the past, is out of sync and catches up on a goroutine of its own,
// reading the history at its own pace, until it is in sync again. So
// watchers cost no goroutine and no wakeup per apply while in sync, and a
// slow consumer delays only itself.
//
// Caps: at most Config.MaxWatchers watchers on the store and
// Config.MaxWatchersPerConn per client connection (the gRPC peer address
// in ctx); past them ErrTooManyWatchers naming the cap. Events come from
// this server's FSM (serializable, like etcd's watch).
func (s *Store) WatchShared(ctx context.Context, req *pb.WatchRequest, id int64, out chan<- WatchEvent) error {
	if err := s.checkOpen(); err != nil {
		return err
	}
	start := req.GetStartRevision()
	if start <= 0 {
		start = s.fsm.Revision() + 1
	}
	if _, err := s.fsm.Events(req.GetKey(), req.GetRangeEnd(), start, 1); err != nil && !errors.Is(err, fsm.ErrFutureRevision) {
		return fmt.Errorf("raftstore: watch from revision %d: %w", start, err)
	}
	w := &watcher{id: id, key: req.GetKey(), end: req.GetRangeEnd(), prevKV: req.GetPrevKv(), ctx: ctx, out: out, next: start}
	if p, ok := peer.FromContext(ctx); ok && p.Addr != nil {
		w.conn = p.Addr.String()
	}
	if err := s.addWatcher(w); err != nil {
		return err
	}
	context.AfterFunc(ctx, func() { s.hub.remove(w) })
	return nil
}

// watcher is one watch of the hub.
type watcher struct {
	id       int64
	key, end []byte
	prevKV   bool
	conn     string // the client connection's peer address ("" in-process)
	ctx      context.Context
	out      chan<- WatchEvent

	// Guarded by watchHub.mu.
	next     int64 // every event below next was sent (or did not match); a synced watcher's is at least watchHub.rev+1
	synced   bool  // fed by the dispatcher, not catching up
	removed  bool
	catching bool // a catch-up goroutine runs
}

func (w *watcher) matches(k []byte) bool {
	switch {
	case len(w.end) == 0:
		return bytes.Equal(k, w.key)
	case len(w.end) == 1 && w.end[0] == 0:
		return bytes.Compare(k, w.key) >= 0
	default:
		return bytes.Compare(k, w.key) >= 0 && bytes.Compare(k, w.end) < 0
	}
}

// watchHub is the store's watchers: the synced ones indexed by key (single
// keys) or in a set (ranges), and the counts the caps check.
type watchHub struct {
	mu     sync.Mutex
	rev    int64 // the dispatcher has handed out every event up to rev
	keys   map[string]map[*watcher]struct{}
	ranges map[*watcher]struct{}
	total  int
	byConn map[string]int
}

func newWatchHub() *watchHub {
	return &watchHub{keys: map[string]map[*watcher]struct{}{}, ranges: map[*watcher]struct{}{}, byConn: map[string]int{}}
}

// addWatcher counts w against the caps; it is synced if it starts after
// what the dispatcher handed out, else it catches up first.
func (s *Store) addWatcher(w *watcher) error {
	h, maxTotal, maxConn := s.hub, s.cfg.MaxWatchers, s.cfg.MaxWatchersPerConn
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.total >= maxTotal {
		return fmt.Errorf("%w: %d watchers on this node (at most %d); cancel watchers or watch a range instead of many keys", ErrTooManyWatchers, h.total, maxTotal)
	}
	if w.conn != "" && h.byConn[w.conn] >= maxConn {
		return fmt.Errorf("%w: %d watchers on connection %s (at most %d per connection); cancel watchers or watch a range instead of many keys",
			ErrTooManyWatchers, h.byConn[w.conn], w.conn, maxConn)
	}
	h.total++
	if w.conn != "" {
		h.byConn[w.conn]++
	}
	if w.next > h.rev {
		h.sync(w)
	} else {
		s.startCatchUp(w)
	}
	return nil
}

func (h *watchHub) sync(w *watcher) {
	w.synced = true
	if len(w.end) == 0 {
		set := h.keys[string(w.key)]
		if set == nil {
			set = map[*watcher]struct{}{}
			h.keys[string(w.key)] = set
		}
		set[w] = struct{}{}
		return
	}
	h.ranges[w] = struct{}{}
}

// unsync takes w out of the synced set; it has been sent every event up
// to h.rev.
func (h *watchHub) unsync(w *watcher) {
	if !w.synced {
		return
	}
	w.synced = false
	w.next = max(w.next, h.rev+1)
	if len(w.end) == 0 {
		set := h.keys[string(w.key)]
		delete(set, w)
		if len(set) == 0 {
			delete(h.keys, string(w.key))
		}
		return
	}
	delete(h.ranges, w)
}

// remove ends w (its context ended, or it was canceled): nothing is sent
// for it afterwards by the dispatcher, and its catch-up goroutine exits.
func (h *watchHub) remove(w *watcher) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if w.removed {
		return
	}
	w.removed = true
	h.unsync(w)
	h.total--
	if w.conn != "" {
		if h.byConn[w.conn]--; h.byConn[w.conn] <= 0 {
			delete(h.byConn, w.conn)
		}
	}
}

// runWatchDispatch is the store's one watch goroutine: after every apply
// it reads the new events once and hands them to the synced watchers.
func (s *Store) runWatchDispatch() {
	defer s.wg.Done()
	for {
		wake := s.appliedWake()
		s.dispatchWatches()
		select {
		case <-wake:
		case <-s.stopping:
			return
		}
	}
}

// dispatchWatches hands every event after hub.rev to the synced watchers
// it matches; a watcher whose channel is full goes out of sync.
func (s *Store) dispatchWatches() {
	h := s.hub
	for {
		rev := s.fsm.Revision()
		h.mu.Lock()
		if rev <= h.rev {
			h.mu.Unlock()
			return
		}
		evs, err := s.fsm.Events([]byte{0}, []byte{0}, h.rev+1, watchBatch)
		if err != nil && !errors.Is(err, fsm.ErrFutureRevision) {
			// The history moved past the dispatcher (a snapshot was
			// restored): every synced watcher catches up on its own, and
			// is canceled there if its revision is gone.
			var lag []*watcher
			for _, set := range h.keys {
				for w := range set {
					lag = append(lag, w)
				}
			}
			for w := range h.ranges {
				lag = append(lag, w)
			}
			for _, w := range lag {
				h.unsync(w)
				s.startCatchUp(w)
			}
			h.rev = rev
			h.mu.Unlock()
			continue
		}
		last := rev
		if len(evs) > 0 {
			last = max(rev, modRev(evs[len(evs)-1]))
			if len(evs) >= watchBatch {
				last = modRev(evs[len(evs)-1])
			}
		}
		s.deliver(evs, last)
		h.rev = last
		h.mu.Unlock()
	}
}

// deliver hands evs (every event up to last) to the synced watchers; h.mu
// is held.
func (s *Store) deliver(evs []*pb.Event, last int64) {
	h := s.hub
	per := map[*watcher][]*pb.Event{}
	for _, e := range evs {
		k := e.GetKv().GetKey()
		for w := range h.keys[string(k)] {
			if modRev(e) >= w.next {
				per[w] = append(per[w], e)
			}
		}
		for w := range h.ranges {
			if modRev(e) >= w.next && w.matches(k) {
				per[w] = append(per[w], e)
			}
		}
	}
	for w, wevs := range per {
		if !w.prevKV {
			wevs = stripPrev(wevs)
		}
		select {
		case w.out <- WatchEvent{ID: w.id, Resp: &pb.WatchResponse{Header: s.header(max(last, modRev(wevs[len(wevs)-1]))), Events: wevs}}:
		default:
			h.unsync(w) // its reader lags: it catches up from h.rev+1 (this batch)
			s.startCatchUp(w)
		}
	}
}

// startCatchUp starts w's catch-up goroutine unless one runs; h.mu is held.
func (s *Store) startCatchUp(w *watcher) {
	if w.catching || w.removed {
		return
	}
	select {
	case <-s.stopping:
		return
	default:
	}
	w.catching = true
	s.wg.Add(1)
	go s.runCatchUp(w)
}

// runCatchUp sends w the history from w.next on, blocking on its reader,
// until it reaches what the dispatcher handed out; then w is synced again.
func (s *Store) runCatchUp(w *watcher) {
	defer s.wg.Done()
	h := s.hub
	for {
		h.mu.Lock()
		if w.removed {
			w.catching = false
			h.mu.Unlock()
			return
		}
		if w.next > h.rev {
			w.catching = false
			h.sync(w)
			h.mu.Unlock()
			return
		}
		next, upto := w.next, h.rev
		h.mu.Unlock()

		evs, err := s.fsm.Events(w.key, w.end, next, watchBatch)
		if err != nil && !errors.Is(err, fsm.ErrFutureRevision) {
			r := &pb.WatchResponse{Header: s.header(s.fsm.Revision()), Canceled: true, CancelReason: err.Error()}
			if errors.Is(err, fsm.ErrCompacted) {
				r.CompactRevision = s.compactRevision()
			}
			s.logger.Warn("watch canceled", "from", next, "err", err)
			s.send(w, r)
			h.remove(w)
			h.mu.Lock()
			w.catching = false
			h.mu.Unlock()
			return
		}
		done := len(evs) < watchBatch
		for i, e := range evs {
			if modRev(e) > upto {
				evs, done = evs[:i], true
				break
			}
		}
		reached := upto
		if !done {
			reached = modRev(evs[len(evs)-1])
		}
		if len(evs) > 0 {
			if !w.prevKV {
				evs = stripPrev(evs)
			}
			if !s.send(w, &pb.WatchResponse{Header: s.header(max(reached, modRev(evs[len(evs)-1]))), Events: evs}) {
				h.mu.Lock()
				w.catching = false
				h.mu.Unlock()
				return
			}
		}
		h.mu.Lock()
		w.next = max(w.next, reached+1)
		h.mu.Unlock()
	}
}

// send hands r to w's reader, waiting; false if w's context ended or the
// store is closing.
func (s *Store) send(w *watcher, r *pb.WatchResponse) bool {
	select {
	case w.out <- WatchEvent{ID: w.id, Resp: r}:
		return true
	case <-w.ctx.Done():
		return false
	case <-s.stopping:
		return false
	}
}

func modRev(e *pb.Event) int64 { return e.GetKv().GetModRevision() }

// stripPrev drops prev_kv from events (shallow copies; FSM events are shared).
func stripPrev(evs []*pb.Event) []*pb.Event {
	out := make([]*pb.Event, len(evs))
	for i, e := range evs {
		if e.PrevKv == nil {
			out[i] = e
			continue
		}
		out[i] = &pb.Event{Type: e.Type, Kv: e.Kv}
	}
	return out
}

func (s *Store) header(rev int64) *pb.ResponseHeader {
	h := &pb.ResponseHeader{Revision: rev, MemberId: s.cfg.ID}
	if s.raft != nil {
		h.RaftTerm = s.raft.CurrentTerm()
	}
	return h
}

// compactRevision asks the FSM for its compaction revision if it offers one.
func (s *Store) compactRevision() int64 {
	if c, ok := any(s.fsm).(interface{ CompactRevision() int64 }); ok {
		return c.CompactRevision()
	}
	return 0
}
