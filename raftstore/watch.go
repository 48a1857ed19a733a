package raftstore

import (
	"context"
	"errors"
	"fmt"

	pb "github.com/raftps/raftps/api/raftpspb"
	"github.com/raftps/raftps/fsm"
)

// watchBatch is the most events read from the FSM per step (the FSM
// returns whole revisions, so a revision is never split across responses).
const watchBatch = 512

// Watch streams the events of req.Key (or the range [Key, RangeEnd)) with
// mod revision >= req.StartRevision (0: from the next revision), in
// revision order, with no gaps and no duplicates; events of one revision
// are never split across responses. The channel is closed when ctx ends or
// the store closes. A watcher resumes after a reconnect by watching again
// from the last revision it saw + 1. A start below the compaction revision
// returns an error wrapping fsm.ErrCompacted; if compaction overtakes a
// slow watcher, a final response with Canceled set is sent.
//
// Watchers pull: each has a goroutine that reads fsm.Events after an apply
// notification, so a slow consumer delays only itself, never Apply.
// Events come from this server's FSM (serializable, like etcd's watch).
func (s *Store) Watch(ctx context.Context, req *pb.WatchRequest) (<-chan *pb.WatchResponse, error) {
	if err := s.checkOpen(); err != nil {
		return nil, err
	}
	start := req.GetStartRevision()
	if start <= 0 {
		start = s.fsm.Revision() + 1
	}
	if _, err := s.fsm.Events(req.GetKey(), req.GetRangeEnd(), start, 1); err != nil && !errors.Is(err, fsm.ErrFutureRevision) {
		return nil, fmt.Errorf("raftstore: watch from revision %d: %w", start, err)
	}
	ch := make(chan *pb.WatchResponse, 16)
	go s.runWatch(ctx, req, start, ch)
	return ch, nil
}

func (s *Store) runWatch(ctx context.Context, req *pb.WatchRequest, next int64, ch chan<- *pb.WatchResponse) {
	defer close(ch)
	send := func(r *pb.WatchResponse) bool {
		select {
		case ch <- r:
			return true
		case <-ctx.Done():
			return false
		case <-s.stopping:
			return false
		}
	}
	for {
		wake := s.appliedWake()
		rev := s.fsm.Revision()
		evs, err := s.fsm.Events(req.GetKey(), req.GetRangeEnd(), next, watchBatch)
		if err != nil && !errors.Is(err, fsm.ErrFutureRevision) {
			r := &pb.WatchResponse{Header: s.header(rev), Canceled: true, CancelReason: err.Error()}
			if errors.Is(err, fsm.ErrCompacted) {
				r.CompactRevision = s.compactRevision()
			}
			s.logger.Warn("watch canceled", "from", next, "err", err)
			send(r)
			return
		}
		if len(evs) > 0 {
			if !req.GetPrevKv() {
				evs = stripPrev(evs)
			}
			if !send(&pb.WatchResponse{Header: s.header(max(rev, modRev(evs[len(evs)-1]))), Events: evs}) {
				return
			}
			next = modRev(evs[len(evs)-1]) + 1
			continue
		}
		if rev+1 > next {
			next = rev + 1 // nothing matched up to rev
		}
		select {
		case <-wake:
		case <-ctx.Done():
			return
		case <-s.stopping:
			return
		}
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
