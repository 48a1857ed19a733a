package fsm

import (
	"fmt"
	"maps"
	"slices"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	pb "github.com/raftps/raftps/api/raftpspb"
)

// Client sessions: exactly-once application of commands (Raft thesis §6.3).
//
// A command that carries a client_id and a seq (> 0) is applied once: the
// FSM keeps its Result, and the same (client_id, seq) proposed again (a
// client retrying after an unknown outcome: a lost leadership, a timeout)
// gets the first Result back without being applied again. The client sends
// acked, the seq below which it has every Result, and the FSM forgets those.
//
// Memory is bounded, deterministically (every replica forgets the same
// things at the same log index): at most MaxSessionResults Results per
// client (beyond it the lowest seq is forgotten), MaxCachedResultBytes per
// Result (a larger one is kept as "applied, response too large"), and at
// most MaxClientSessions clients and MaxSessionBytes in all (beyond them
// the client whose last command is oldest is forgotten). A seq that was
// forgotten (below the client's floor) is refused with
// ErrFailedPrecondition: its outcome is unknown to the FSM, and applying
// it again could apply it twice. A client whose whole session was
// forgotten is not recognised: its retry is applied again, so clients
// should not stay idle with unknown outcomes longer than the busiest
// MaxClientSessions clients take to cycle.
//
// Sessions are part of the snapshot (one record per session and per kept
// Result), so a replica restored from a snapshot answers retries as the
// others do.
const (
	// MaxClientSessions bounds the clients remembered.
	MaxClientSessions = 4096
	// MaxSessionResults bounds the unacknowledged Results kept per client.
	MaxSessionResults = 256
	// MaxCachedResultBytes bounds one kept Result's encoding.
	MaxCachedResultBytes = 64 << 10
	// MaxSessionBytes bounds the Results kept over all clients.
	MaxSessionBytes = 64 << 20
	// maxClientIDBytes bounds a client id.
	maxClientIDBytes = 128
)

// clientSession is one client's kept Results.
type clientSession struct {
	last    uint64                // log index of the client's latest command
	floor   uint64                // seq below which Results are forgotten
	results map[uint64]*pb.Result // seq -> first Result
	bytes   int                   // encoded size of results
}

// clientSessions are every client's sessions. The zero value is empty.
type clientSessions struct {
	byID  map[string]*clientSession
	bytes int
}

func resultSize(r *pb.Result) int { return proto.Size(r) }

// applyOnce applies cmd unless it is a retry of a command this FSM applied
// already (then it returns the first Result), and keeps the Result of a
// command that carries a client id and seq. Called under f.mu.
func (f *FSM) applyOnce(c *applyCtx, index uint64, i int, cmd *pb.Command) *pb.Result {
	id, seq := cmd.GetClientId(), cmd.GetSeq()
	if id == "" || seq == 0 {
		return f.applyCommand(c, index, i, cmd)
	}
	if len(id) > maxClientIDBytes {
		return errResult(f.rev, fmt.Errorf("%w: client id of %d bytes (at most %d)", ErrInvalid, len(id), maxClientIDBytes))
	}
	s := &f.sessions
	cs := s.byID[id]
	if cs != nil {
		s.ack(cs, cmd.GetAcked())
		cs.last = index
		if r, ok := cs.results[seq]; ok {
			return r
		}
		if seq < cs.floor {
			return errResult(f.rev, fmt.Errorf("%w: request %d of client %q is older than the results kept for it (from %d): its outcome is unknown; do not retry it",
				ErrFailedPrecondition, seq, id, cs.floor))
		}
	}
	r := f.applyCommand(c, index, i, cmd)
	s.keep(id, cmd.GetAcked(), seq, index, r)
	return r
}

// ack forgets cs's Results below acked.
func (s *clientSessions) ack(cs *clientSession, acked uint64) {
	if acked <= cs.floor {
		return
	}
	for seq, r := range cs.results {
		if seq < acked {
			s.drop(cs, seq, r)
		}
	}
	cs.floor = acked
}

func (s *clientSessions) drop(cs *clientSession, seq uint64, r *pb.Result) {
	n := resultSize(r)
	cs.bytes -= n
	s.bytes -= n
	delete(cs.results, seq)
}

// keep records r as the Result of (id, seq) applied at index, then
// enforces the bounds.
func (s *clientSessions) keep(id string, acked, seq, index uint64, r *pb.Result) {
	if s.byID == nil {
		s.byID = map[string]*clientSession{}
	}
	cs := s.byID[id]
	if cs == nil {
		cs = &clientSession{results: map[uint64]*pb.Result{}}
		s.byID[id] = cs
	}
	s.ack(cs, acked)
	cs.last = index
	if seq < cs.floor {
		return
	}
	if resultSize(r) > MaxCachedResultBytes {
		r = &pb.Result{Revision: r.GetRevision(), Error: &pb.Status{Code: int32(Code(ErrFailedPrecondition)),
			Message: fmt.Sprintf("%v: request %d of client %q was applied at revision %d; its response was too large to keep for a retry",
				ErrFailedPrecondition, seq, id, r.GetRevision())}}
	}
	n := resultSize(r)
	cs.results[seq] = r
	cs.bytes += n
	s.bytes += n
	for len(cs.results) > MaxSessionResults {
		low := slices.Min(slices.Collect(maps.Keys(cs.results)))
		s.drop(cs, low, cs.results[low])
		cs.floor = low + 1
	}
	for len(s.byID) > MaxClientSessions || (s.bytes > MaxSessionBytes && len(s.byID) > 1) {
		s.evictOldest(id)
	}
}

// evictOldest forgets the session whose last command is oldest (ties: the
// smallest id), never keep's.
func (s *clientSessions) evictOldest(keep string) {
	var victim string
	var vs *clientSession
	for id, cs := range s.byID {
		if id == keep {
			continue
		}
		if vs == nil || cs.last < vs.last || (cs.last == vs.last && id < victim) {
			victim, vs = id, cs
		}
	}
	if vs == nil {
		return
	}
	s.bytes -= vs.bytes
	delete(s.byID, victim)
}

// marshal encodes the sessions as snapshot records, by client id: one
// header record (seq 0: id, last, floor) per session, then one per kept
// Result (id, last, floor, seq, Result) in seq order.
func (s *clientSessions) marshal() [][]byte {
	var recs [][]byte
	mo := proto.MarshalOptions{Deterministic: true}
	for _, id := range slices.Sorted(maps.Keys(s.byID)) {
		cs := s.byID[id]
		head := func(seq uint64) []byte {
			b := protowire.AppendString(nil, id)
			b = protowire.AppendVarint(b, cs.last)
			b = protowire.AppendVarint(b, cs.floor)
			return protowire.AppendVarint(b, seq)
		}
		recs = append(recs, head(0))
		for _, seq := range slices.Sorted(maps.Keys(cs.results)) {
			b, err := mo.MarshalAppend(head(seq), cs.results[seq])
			if err != nil { // cannot happen for a generated message
				continue
			}
			recs = append(recs, b)
		}
	}
	return recs
}

// unmarshalSessions decodes marshal's records (in order).
func unmarshalSessions(recs [][]byte) (clientSessions, error) {
	s := clientSessions{byID: map[string]*clientSession{}}
	var lastID string
	for _, b := range recs {
		id, n := protowire.ConsumeString(b)
		if n < 0 || id == "" || len(id) > maxClientIDBytes {
			return clientSessions{}, malformed("session record: client id")
		}
		b = b[n:]
		var vals [3]uint64
		for k := range vals {
			v, n := protowire.ConsumeVarint(b)
			if n < 0 {
				return clientSessions{}, malformed("session record of %q: truncated", id)
			}
			vals[k], b = v, b[n:]
		}
		last, floor, seq := vals[0], vals[1], vals[2]
		cs := s.byID[id]
		switch {
		case seq == 0:
			if cs != nil || id <= lastID || len(b) != 0 {
				return clientSessions{}, malformed("session record of %q out of order", id)
			}
			cs = &clientSession{last: last, floor: floor, results: map[uint64]*pb.Result{}}
			s.byID[id] = cs
			lastID = id
		case cs == nil || id != lastID || last != cs.last || floor != cs.floor || seq < floor || cs.results[seq] != nil:
			return clientSessions{}, malformed("session result %d of %q does not follow its session", seq, id)
		default:
			r := &pb.Result{}
			if err := proto.Unmarshal(b, r); err != nil {
				return clientSessions{}, malformed("session result %d of %q: %v", seq, id, err)
			}
			n := resultSize(r)
			cs.results[seq] = r
			cs.bytes += n
			s.bytes += n
		}
		if len(s.byID) > MaxClientSessions || len(cs.results) > MaxSessionResults {
			return clientSessions{}, malformed("sessions over their bounds")
		}
	}
	return s, nil
}

// maxSessionRecord bounds a session snapshot record.
const maxSessionRecord = MaxCachedResultBytes + maxClientIDBytes + 64
