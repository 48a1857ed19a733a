package fsm

import (
	"fmt"
	"sort"

	pb "github.com/raftps/raftps/api/raftpspb"
)

// revEvents are the watch events of one revision, in the order they happened.
// Both the slice and the events are immutable once recorded, so snapshots
// share them.
type revEvents struct {
	rev    int64
	size   int64 // eventsSize(events)
	events []*pb.Event
}

// eventsSize is what a revision's events count against HistoryBytes: the
// keys and values of every event and prev_kv, plus a fixed 64 per event.
func eventsSize(events []*pb.Event) int64 {
	var n int64
	for _, ev := range events {
		n += 64 + int64(len(ev.GetKv().GetKey())+len(ev.GetKv().GetValue())+len(ev.GetPrevKv().GetKey())+len(ev.GetPrevKv().GetValue()))
	}
	return n
}

// record appends the events of revision rev and compacts history beyond the
// last histRevs revisions or histBytes bytes. Both bounds depend only on the
// replicated state, so every replica compacts at the same revision.
func (f *FSM) record(rev int64, events []*pb.Event) {
	g := revEvents{rev: rev, size: eventsSize(events), events: events}
	f.hist = append(f.hist, g)
	f.histSize += g.size
	floor := f.rev - f.histRevs
	if f.histSize > f.histBytes {
		var drop int64
		for _, old := range f.hist[:len(f.hist)-1] {
			drop += old.size
			floor = max(floor, old.rev)
			if f.histSize-drop <= f.histBytes {
				break
			}
		}
	}
	if floor > f.compactRev {
		f.compactTo(floor)
	}
}

func prefixSize(h []revEvents) int64 {
	var n int64
	for _, g := range h {
		n += g.size
	}
	return n
}

// compactTo drops the events of revisions <= rev.
func (f *FSM) compactTo(rev int64) {
	f.compactRev = rev
	n := sort.Search(len(f.hist), func(i int) bool { return f.hist[i].rev > rev })
	f.histSize -= prefixSize(f.hist[:n])
	clear(f.hist[:n]) // let the GC have them before append reallocates
	f.hist = f.hist[n:]
}

// applyCompact compacts the watch history to req.Revision: Events then
// answers ErrCompacted for any fromRev <= it. A revision above the store's
// is ErrFutureRevision, one at or below the current compaction ErrCompacted.
// The store revision does not change.
func (f *FSM) applyCompact(_ *applyCtx, req *pb.CompactRequest) (*pb.CompactResponse, error) {
	switch {
	case req.Revision > f.rev:
		return nil, fmt.Errorf("%w: compact %d, store at %d", ErrFutureRevision, req.Revision, f.rev)
	case req.Revision <= f.compactRev:
		return nil, fmt.Errorf("%w: compact %d, already compacted to %d", ErrCompacted, req.Revision, f.compactRev)
	}
	f.compactTo(req.Revision)
	return &pb.CompactResponse{}, nil
}

// Events returns the events of key (rangeEnd empty), of every key >= key
// (rangeEnd "\x00") or of [key, rangeEnd), with mod_revision >= fromRev, in
// revision order (and within a revision in the order they happened). A
// fromRev <= 0 means 1. limit > 0 bounds the number of events, but a
// revision is never split: the answer ends at a revision boundary, and holds
// at least the first matching revision whole even if that exceeds limit, so
// a caller resumes at the last event's mod_revision + 1. A fromRev <=
// CompactRevision (once anything was compacted) is ErrCompacted; a fromRev
// beyond the store revision just returns nothing.
//
// The returned events are fresh messages (safe to modify); their KeyValues'
// byte slices are shared with the store and must not be written to.
func (f *FSM) Events(key, rangeEnd []byte, fromRev int64, limit int) ([]*pb.Event, error) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	if fromRev < 1 {
		fromRev = 1
	}
	if f.compactRev > 0 && fromRev <= f.compactRev {
		return nil, fmt.Errorf("%w: events from revision %d, compacted to %d", ErrCompacted, fromRev, f.compactRev)
	}
	r := parseRange(key, rangeEnd)
	i := sort.Search(len(f.hist), func(i int) bool { return f.hist[i].rev >= fromRev })
	var out []*pb.Event
	for ; i < len(f.hist); i++ {
		if limit > 0 && len(out) >= limit {
			break
		}
		for _, ev := range f.hist[i].events {
			if r.contains(ev.Kv.Key) {
				out = append(out, &pb.Event{Type: ev.Type, Kv: copyKV(ev.Kv, true), PrevKv: copyKV(ev.PrevKv, true)})
			}
		}
	}
	return out, nil
}
