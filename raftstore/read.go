package raftstore

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/hashicorp/raft"

	pb "github.com/raftps/raftps/api/raftpspb"
)

// ReadIndex returns an index such that any state applied up to it reflects
// every write acknowledged before the call (etcd's ReadIndex; hashicorp/raft
// has none). On the leader: make sure an entry of the current term is
// committed (a Barrier, once per term), capture the commit index, confirm
// leadership with VerifyLeader (a heartbeat round to a quorum), and check
// the term did not change meanwhile. On a follower: Forwarder.ReadIndex.
func (s *Store) ReadIndex(ctx context.Context) (uint64, error) {
	var idx uint64
	err := s.onLeaderIdempotent(ctx,
		func() error {
			var err error
			idx, err = s.ReadIndexLocal(ctx)
			return err
		},
		func(id, addr string) error {
			var err error
			idx, err = s.fwd.ReadIndex(ctx, id, addr)
			return err
		})
	return idx, err
}

// ReadIndexLocal is ReadIndex without forwarding (ErrNotLeader unless
// leader); the Internal.ReadIndex handler calls it.
func (s *Store) ReadIndexLocal(ctx context.Context) (uint64, error) {
	if err := s.checkOpen(); err != nil {
		return 0, err
	}
	if !s.IsLeader() {
		return 0, ErrNotLeader
	}
	term, err := s.ensureOwnTerm(ctx)
	if err != nil {
		return 0, err
	}
	idx := s.raft.CommitIndex()
	if err := s.futureErr(ctx, s.raft.VerifyLeader()); err != nil {
		if errors.Is(err, raft.ErrLeadershipLost) {
			err = fmt.Errorf("%w: %w", ErrNotLeader, err)
		}
		return 0, err
	}
	if s.raft.CurrentTerm() != term {
		return 0, fmt.Errorf("%w: term changed during read index", ErrNotLeader)
	}
	return idx, nil
}

// ensureOwnTerm makes sure this leader has committed an entry of its
// current term (until then its commit index may lag entries committed by
// the previous leader) and returns that term. The first call in a term
// runs a Barrier; later calls are free.
func (s *Store) ensureOwnTerm(ctx context.Context) (uint64, error) {
	term := s.raft.CurrentTerm()
	if s.readyTerm.Load() == term {
		return term, nil
	}
	select {
	case s.barrierSem <- struct{}{}:
	case <-ctx.Done():
		return 0, ctx.Err()
	}
	defer func() { <-s.barrierSem }()
	term = s.raft.CurrentTerm()
	if s.readyTerm.Load() == term {
		return term, nil
	}
	if err := s.futureErr(ctx, s.raft.Barrier(s.timeout(ctx))); err != nil {
		return 0, fmt.Errorf("raftstore: leader barrier: %w", err)
	}
	if s.raft.CurrentTerm() != term || !s.IsLeader() {
		return 0, fmt.Errorf("%w: lost leadership during barrier", ErrNotLeader)
	}
	s.readyTerm.Store(term)
	return term, nil
}

// LinearizableRead waits until this server's FSM reflects every write
// acknowledged before the call: ReadIndex, then WaitApplied.
func (s *Store) LinearizableRead(ctx context.Context) error {
	idx, err := s.ReadIndex(ctx)
	if err != nil {
		return err
	}
	return s.WaitApplied(ctx, idx)
}

// WaitApplied blocks until the FSM has applied every command with a log
// index <= index, or ctx ends. Entries that never reach the FSM (no-ops,
// barriers, configuration changes) do not count: once hashicorp/raft has
// dispatched index, the wait is for the last command at or below it.
func (s *Store) WaitApplied(ctx context.Context, index uint64) error {
	if err := s.checkOpen(); err != nil {
		return err
	}
	target := index
	resolved := false
	tick := time.NewTicker(2 * time.Millisecond)
	defer tick.Stop()
	for {
		wake := s.appliedWake()
		applied := s.fsm.AppliedIndex()
		if applied >= target {
			return nil
		}
		if !resolved && s.raft.AppliedIndex() >= index {
			target, resolved = s.lastCommandAtOrBelow(index, applied), true
			if applied >= target {
				return nil
			}
		}
		select {
		case <-wake:
		case <-tick.C:
		case <-ctx.Done():
			return fmt.Errorf("raftstore: wait for index %d (applied %d): %w", index, applied, ctx.Err())
		case <-s.stopping:
			return ErrNotOpen
		}
	}
}

// lastCommandAtOrBelow scans the log down from index to floor+1 for the
// last LogCommand entry; floor if there is none (or the log was compacted
// there, which only happens below a snapshot the FSM holds).
func (s *Store) lastCommandAtOrBelow(index, floor uint64) uint64 {
	var l raft.Log
	for i := index; i > floor; i-- {
		if err := s.logs.GetLog(i, &l); err != nil {
			return floor
		}
		if l.Type == raft.LogCommand {
			return i
		}
	}
	return floor
}

// Range reads keys from the FSM: linearizable (LinearizableRead first)
// unless req.Serializable, which reads this server's state as is.
func (s *Store) Range(ctx context.Context, req *pb.RangeRequest) (*pb.RangeResponse, error) {
	if !req.GetSerializable() {
		if err := s.LinearizableRead(ctx); err != nil {
			return nil, err
		}
	} else if err := s.checkOpen(); err != nil {
		return nil, err
	}
	return s.fsm.Range(req)
}
