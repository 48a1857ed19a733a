package fsm

import (
	"fmt"
	"math"
	"sync"
	"time"

	"google.golang.org/protobuf/proto"

	pb "github.com/raftps/raftps/api/raftpspb"
)

// The replicated clock.
//
// Task deadlines, task durations, blacklist cooldowns and the retention age
// of finished jobs (package fsm/jobq) are measured in cluster time: a
// clock that is part of the replicated state and that every replica
// advances identically from the log. It is what leases get from the
// leader's monotonic timers, made deterministic:
//
//   - it starts at the wall clock stamped into the first entry
//     (Entry.now_unix_nano), so its values read like Unix nanoseconds;
//   - within one term (one leader process) it advances by the difference
//     of successive Entry.mono_nano stamps, the leader's monotonic clock, so
//     an NTP step or a settimeofday on the leader does not move it; an entry
//     without mono_nano (an older proposer) advances it by the difference of
//     the wall stamps, clamped at 0;
//   - the first entry of a new term does not advance it: a new leader
//     re-bases, so the time without a leader, and any disagreement between
//     the old and the new leader's clocks, does not count (as etcd renews
//     every lease on a leader change). A deadline can move later, never
//     earlier;
//   - it never goes backwards, and saturates at math.MaxInt64.
//
// It lags the wall clock by the total time the cluster had no leader (a
// whole-cluster restart included): JobStatus and Task times are cluster
// time. The FSM reads no clock; the stamps come from the proposer
// (EncodeEntryAt, Monotonic).

// clock is the replicated clock's state (persisted in the snapshot's meta
// record).
type clock struct {
	now  int64  // cluster time after the last entry (ns)
	term uint64 // 1 + the term of the last entry that ticked it (0: never)
	mono int64  // largest mono_nano stamped in that term (0: none)
	wall int64  // now_unix_nano of the last entry of that term
}

// tick advances c by one log entry of term stamped (wall, mono) and returns
// the cluster time to apply the entry with.
func (c *clock) tick(logTerm uint64, wall, mono int64) int64 {
	term := logTerm + 1 // 0 means never ticked
	switch {
	case c.term == 0:
		c.now = max(wall, 0)
	case term != c.term:
		// A new leader: re-base, nothing advances.
	case mono > 0 && c.mono > 0:
		c.now = satAdd(c.now, max(satSub(mono, c.mono), 0))
	default:
		c.now = satAdd(c.now, max(satSub(wall, c.wall), 0))
	}
	if term != c.term {
		c.mono = 0
	}
	c.term, c.mono, c.wall = term, max(c.mono, mono), wall
	return c.now
}

func satAdd(a, b int64) int64 {
	s := a + b
	switch {
	case a > 0 && b > 0 && s < 0:
		return math.MaxInt64
	case a < 0 && b < 0 && s >= 0:
		return math.MinInt64
	}
	return s
}

func satSub(a, b int64) int64 {
	if b == math.MinInt64 {
		if a >= 0 {
			return math.MaxInt64
		}
		return a - b
	}
	return satAdd(a, -b)
}

// Clock returns the cluster time (ns) after the last applied entry: the
// clock task deadlines (pb.Task.deadline_unix_nano), blacklists and job
// retention are measured in. Between entries it stands still; a leader
// that compares deadlines with it uses a ClockEstimator.
func (f *FSM) Clock() int64 {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return f.clock.now
}

// ClockTerm returns Clock() and the Raft term of the entry that last
// advanced it (0: no entry yet), for ClockEstimator.NowInTerm.
func (f *FSM) ClockTerm() (now int64, term uint64) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	if f.clock.term > 0 {
		term = f.clock.term - 1
	}
	return f.clock.now, term
}

// processStart is the origin of Monotonic.
var processStart = time.Now()

// Monotonic returns this process's monotonic clock in nanoseconds since an
// arbitrary origin (>= 1): what a proposer stamps into Entry.mono_nano.
func Monotonic() int64 { return int64(time.Since(processStart)) + 1 }

// EncodeEntryAt encodes one Raft log entry stamped with the proposer's wall
// clock (Unix ns) and monotonic clock (Monotonic()). A proposer uses it
// rather than EncodeEntry so that the replicated clock ignores wall-clock
// steps. A command of a type this binary does not know is refused
// (ErrUnknownCommand) rather than proposed: every replica halts on such an
// entry (see the package doc), so it must never reach the log.
func EncodeEntryAt(wallUnixNano, monoNano int64, cmds []*pb.Command) ([]byte, error) {
	for i, c := range cmds {
		if !KnownCommand(c.GetType()) {
			return nil, fmt.Errorf("%w: command %d has type %d", ErrUnknownCommand, i, int32(c.GetType()))
		}
	}
	return proto.Marshal(&pb.Entry{NowUnixNano: wallUnixNano, MonoNano: monoNano, Commands: cmds})
}

// KnownCommand reports whether this binary applies commands of type t.
func KnownCommand(t pb.CommandType) bool {
	_, ok := handlers[t]
	return ok
}

// ClockEstimator estimates the cluster time between applied entries, for
// the leader's task sweep (package master): the FSM's clock stands still
// between entries, and the leader's own monotonic clock fills the gap. Its
// estimate is never ahead of the clock the leader's next entry will carry
// by more than the apply latency, and after a leader change it restarts
// from the replicated value (so it inherits the re-basing). Safe for
// concurrent use.
type ClockEstimator struct {
	mu   sync.Mutex
	seen int64
	at   time.Time
}

// Now returns the estimated cluster time given the FSM's current Clock().
func (e *ClockEstimator) Now(fsmClock int64) int64 {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.at.IsZero() || fsmClock != e.seen {
		e.seen, e.at = fsmClock, time.Now()
	}
	return satAdd(e.seen, int64(time.Since(e.at)))
}

// NowInTerm returns the estimated cluster time for a leader of term, given
// the FSM's ClockTerm (its clock and the term of the entry that last
// advanced it). It is never ahead of the clock of the next entry this
// leader proposes: until an entry of term has been applied, that entry
// will be the term's first, which re-bases and carries exactly fsmClock,
// so that is the estimate; after, it is Now's, the clock seen plus the
// time since it was first seen, which is at most the time since the entry
// that set it was stamped by this leader's monotonic clock.
func (e *ClockEstimator) NowInTerm(fsmClock int64, fsmTerm, term uint64) int64 {
	if fsmTerm != term {
		e.Reset()
		return fsmClock
	}
	return e.Now(fsmClock)
}

// Reset forgets the last observation (call it on gaining leadership).
func (e *ClockEstimator) Reset() {
	e.mu.Lock()
	e.at = time.Time{}
	e.mu.Unlock()
}
