package etcdapi

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"time"

	etcdpb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"

	pb "github.com/raftps/raftps/api/raftpspb"
	"github.com/raftps/raftps/fsm"
	"github.com/raftps/raftps/raftstore"
)

// defaultProgressInterval is etcd's default progress-notify interval.
const defaultProgressInterval = 10 * time.Minute

// Reasons a watch is refused or ended, as etcd's mvcc package words them.
const (
	reasonCompacted   = "mvcc: required revision has been compacted"
	reasonDuplicateID = "mvcc: duplicate watch ID provided on the WatchStream"
	// progressWatchID is the watch id of the answer to a progress request
	// (etcd's clientv3.InvalidWatchID).
	progressWatchID = -1
)

type watchServer struct {
	etcdpb.UnimplementedWatchServer
	s *Server
}

// watchStream is one Watch RPC: the watchers it multiplexes and its send
// lock (gRPC allows one Send at a time).
type watchStream struct {
	s      *Server
	ctx    context.Context
	stream etcdpb.Watch_WatchServer
	abort  context.CancelCauseFunc
	wg     sync.WaitGroup

	sendMu sync.Mutex // serializes Send; held while checking a watcher is live

	mu       sync.Mutex // guards watchers, bySeq, nextID, seq, closed and wg.Add
	watchers map[int64]*watcher
	bySeq    map[int64]*watcher // by the store's id of the watcher (seq)
	nextID   int64
	seq      int64
	closed   bool // the RPC is ending: no new watcher

	// events carries every watcher's responses from the store
	// (raftstore.Store.WatchShared) to the stream's one sending goroutine.
	events chan raftstore.WatchEvent
}

// watcher is one watch of a stream.
type watcher struct {
	id       int64
	seq      int64 // the store's id of this watcher: unique in the stream, never reused
	progress bool  // ProgressNotify
	key, end []byte
	noPut    bool
	noDelete bool
	ctx      context.Context
	cancel   context.CancelFunc

	mu   sync.Mutex
	next int64 // every event below next has been sent (or filtered out)
}

// Watch serves one bidirectional watch stream: create, cancel and
// progress requests in, created/canceled/event/progress responses out.
func (w watchServer) Watch(stream etcdpb.Watch_WatchServer) error {
	ctx, abort := context.WithCancelCause(stream.Context())
	ws := &watchStream{s: w.s, ctx: ctx, stream: stream, abort: abort, watchers: map[int64]*watcher{},
		bySeq: map[int64]*watcher{}, events: make(chan raftstore.WatchEvent, 256)}
	ws.wg.Add(1)
	go ws.run()
	defer func() {
		abort(nil)
		ws.mu.Lock()
		ws.closed = true
		ws.mu.Unlock()
		ws.wg.Wait()
	}()
	recvErr := make(chan error, 1)
	go func() {
		for {
			req, err := stream.Recv()
			if err != nil {
				recvErr <- err
				return
			}
			switch u := req.RequestUnion.(type) {
			case *etcdpb.WatchRequest_CreateRequest:
				ws.create(u.CreateRequest)
			case *etcdpb.WatchRequest_CancelRequest:
				ws.cancel(u.CancelRequest.WatchId)
			case *etcdpb.WatchRequest_ProgressRequest:
				ws.progress()
			}
		}
	}()
	select {
	case err := <-recvErr:
		if errors.Is(err, io.EOF) {
			return nil
		}
		return err
	case <-ctx.Done():
		if cause := context.Cause(ctx); cause != nil && !errors.Is(cause, context.Canceled) {
			return cause
		}
		return ctx.Err()
	}
}

// send sends r unless w (nil: none) was canceled; an error ends the stream.
func (ws *watchStream) send(w *watcher, r *etcdpb.WatchResponse) bool {
	ws.sendMu.Lock()
	defer ws.sendMu.Unlock()
	if w != nil && w.ctx.Err() != nil {
		return false
	}
	if err := ws.stream.Send(r); err != nil {
		ws.abort(err)
		return false
	}
	return true
}

func (ws *watchStream) create(cr *etcdpb.WatchCreateRequest) {
	ws.mu.Lock()
	id := cr.WatchId
	if id == 0 { // etcd's AutoWatchID
		for ws.watchers[ws.nextID] != nil {
			ws.nextID++
		}
		id = ws.nextID
		ws.nextID++
	} else if ws.watchers[id] != nil {
		ws.mu.Unlock()
		ws.send(nil, &etcdpb.WatchResponse{Header: ws.s.header(0), WatchId: id, Created: true, Canceled: true,
			CancelReason: reasonDuplicateID})
		return
	}
	if ws.closed {
		ws.mu.Unlock()
		return
	}
	if max := ws.s.MaxWatchersPerStream; len(ws.watchers) >= max {
		ws.mu.Unlock()
		ws.send(nil, &etcdpb.WatchResponse{Header: ws.s.header(0), WatchId: id, Created: true, Canceled: true,
			CancelReason: fmt.Sprintf("%v: %d watchers on this stream (at most %d); cancel watchers or watch a range instead of many keys",
				raftstore.ErrTooManyWatchers, max, max)})
		return
	}
	hdr := ws.s.header(0)
	start := cr.StartRevision
	if start <= 0 {
		start = hdr.Revision + 1
	}
	wctx, cancel := context.WithCancel(ws.ctx)
	ws.seq++
	w := &watcher{id: id, seq: ws.seq, key: cr.Key, end: cr.RangeEnd, ctx: wctx, cancel: cancel, next: start,
		progress: cr.ProgressNotify && ws.s.ProgressInterval > 0}
	for _, f := range cr.Filters {
		switch f {
		case etcdpb.WatchCreateRequest_NOPUT:
			w.noPut = true
		case etcdpb.WatchCreateRequest_NODELETE:
			w.noDelete = true
		}
	}
	ws.watchers[id] = w
	ws.bySeq[w.seq] = w
	ws.mu.Unlock()

	refuse := func(reason string, compactRev int64) {
		ws.remove(id)
		ws.send(nil, &etcdpb.WatchResponse{Header: ws.s.header(0), WatchId: id, Created: true})
		ws.send(nil, &etcdpb.WatchResponse{Header: ws.s.header(0), WatchId: id, Canceled: true,
			CompactRevision: compactRev, CancelReason: reason})
	}
	if len(cr.Key) == 0 {
		refuse(rpctypes.ErrGRPCEmptyKey.Error(), 0)
		return
	}
	// Created goes out before the first event: the store sends nothing
	// for w before WatchShared returns only if w starts in the future,
	// so hold the send lock across it.
	ws.sendMu.Lock()
	err := ws.s.store.WatchShared(wctx, &pb.WatchRequest{Key: cr.Key, RangeEnd: cr.RangeEnd, StartRevision: start, PrevKv: cr.PrevKv}, w.seq, ws.events)
	if err == nil {
		if serr := ws.stream.Send(&etcdpb.WatchResponse{Header: hdr, WatchId: id, Created: true}); serr != nil {
			ws.abort(serr)
		}
	}
	ws.sendMu.Unlock()
	switch {
	case err == nil:
	case errors.Is(err, fsm.ErrCompacted):
		refuse(reasonCompacted, ws.s.store.FSM().CompactRevision())
	case errors.Is(err, raftstore.ErrTooManyWatchers):
		ws.remove(id) // one response, as etcd refuses a watcher it could not create
		ws.send(nil, &etcdpb.WatchResponse{Header: ws.s.header(0), WatchId: id, Created: true, Canceled: true, CancelReason: err.Error()})
	default:
		refuse(err.Error(), 0)
	}
}

// run is the stream's one sending goroutine: it forwards every watcher's
// events from the store, and progress notifications every
// ProgressInterval to the watchers that asked for them.
func (ws *watchStream) run() {
	defer ws.wg.Done()
	var tick <-chan time.Time
	if ws.s.ProgressInterval > 0 {
		t := time.NewTicker(ws.s.ProgressInterval)
		defer t.Stop()
		tick = t.C
	}
	for {
		select {
		case ev := <-ws.events:
			ws.mu.Lock()
			w := ws.bySeq[ev.ID]
			ws.mu.Unlock()
			if w != nil {
				ws.forward(w, ev.Resp)
			}
		case <-tick:
			ws.mu.Lock()
			var due []*watcher
			for _, w := range ws.watchers {
				if w.progress {
					due = append(due, w)
				}
			}
			ws.mu.Unlock()
			for _, w := range due {
				ws.send(w, &etcdpb.WatchResponse{Header: ws.s.header(ws.progressRev(w)), WatchId: w.id})
			}
		case <-ws.ctx.Done():
			return
		}
	}
}

// forward sends one store response of w to the client.
func (ws *watchStream) forward(w *watcher, resp *pb.WatchResponse) {
	if resp.Canceled {
		r := &etcdpb.WatchResponse{Header: ws.s.header(0), WatchId: w.id, Canceled: true,
			CompactRevision: resp.CompactRevision, CancelReason: resp.CancelReason}
		if resp.CompactRevision != 0 {
			r.CancelReason = reasonCompacted
		}
		ws.send(w, r)
		ws.remove(w.id)
		return
	}
	if len(resp.Events) == 0 {
		return
	}
	evs := w.convert(resp.Events)
	last := resp.Events[len(resp.Events)-1].GetKv().GetModRevision()
	if len(evs) > 0 && !ws.send(w, &etcdpb.WatchResponse{Header: ws.s.header(max(resp.GetHeader().GetRevision(), last)),
		WatchId: w.id, Events: evs}) {
		return
	}
	w.mu.Lock()
	w.next = last + 1
	w.mu.Unlock()
}

func (w *watcher) convert(in []*pb.Event) []*mvccpb.Event {
	out := make([]*mvccpb.Event, 0, len(in))
	for _, e := range in {
		switch {
		case e.Type == pb.Event_PUT && w.noPut, e.Type == pb.Event_DELETE && w.noDelete:
			continue
		}
		out = append(out, &mvccpb.Event{Type: mvccpb.Event_EventType(e.Type), Kv: toKV(e.Kv), PrevKv: toKV(e.PrevKv)})
	}
	return out
}

// progressRev is the revision up to which w has been sent every event:
// the store's revision if no event of w's range lies between what was
// sent and it, else the last revision sent.
func (ws *watchStream) progressRev(w *watcher) int64 {
	w.mu.Lock()
	next := w.next
	w.mu.Unlock()
	f := ws.s.store.FSM()
	rev := f.Revision()
	if next > rev {
		return rev
	}
	evs, err := f.Events(w.key, w.end, next, 1)
	if err == nil && (len(evs) == 0 || evs[0].GetKv().GetModRevision() > rev) {
		return rev
	}
	return next - 1
}

// progress answers a progress request: one response with watch id -1 at
// the revision every watcher of the stream has been sent up to.
func (ws *watchStream) progress() {
	rev := ws.s.store.FSM().Revision()
	ws.mu.Lock()
	ws2 := make([]*watcher, 0, len(ws.watchers))
	for _, w := range ws.watchers {
		ws2 = append(ws2, w)
	}
	ws.mu.Unlock()
	for _, w := range ws2 {
		rev = min(rev, ws.progressRev(w))
	}
	ws.send(nil, &etcdpb.WatchResponse{Header: ws.s.header(rev), WatchId: progressWatchID})
}

func (ws *watchStream) cancel(id int64) {
	ws.mu.Lock()
	w := ws.watchers[id]
	ws.mu.Unlock()
	if w == nil {
		return
	}
	ws.sendMu.Lock() // no event of w is sent after its canceled response
	w.cancel()
	ws.sendMu.Unlock()
	ws.remove(id)
	ws.send(nil, &etcdpb.WatchResponse{Header: ws.s.header(0), WatchId: id, Canceled: true})
}

func (ws *watchStream) remove(id int64) {
	ws.mu.Lock()
	if w := ws.watchers[id]; w != nil {
		w.cancel()
		delete(ws.watchers, id)
		delete(ws.bySeq, w.seq)
	}
	ws.mu.Unlock()
}
