package raftstore

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/hashicorp/raft"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	pb "github.com/raftps/raftps/api/raftpspb"
	"github.com/raftps/raftps/fsm"
	"github.com/raftps/raftps/internal/groupcommit"
)

// enqueueTimeout bounds how long the batcher waits to hand an entry to
// hashicorp/raft's leader loop.
const enqueueTimeout = 10 * time.Second

// proposal is one client command waiting for its entry to be applied.
type proposal struct {
	ctx   context.Context
	cmd   *pb.Command
	start time.Time
	done  chan proposalResult // capacity 1
}

type proposalResult struct {
	res *pb.Result
	err error
}

// pendingEntry is a proposed entry whose future the waiter resolves.
type pendingEntry struct {
	fut      raft.ApplyFuture
	batch    []*proposal
	proposed time.Time
}

// Apply proposes cmd and returns its Result once applied. On the leader
// the command is coalesced with concurrent ones into one log entry (up to
// Config.MaxBatch commands, the leader clock stamped once per entry); on a
// follower it goes through Forwarder.ForwardApply, retried while the
// leader changes. A rejected command returns its Result and an error from
// fsm.ResultError (errors.Is(err, fsm.ErrInvalid), ...). The outcome is
// unknown if ctx ends after the command was proposed, or if the error wraps
// raft.ErrLeadershipLost (the leader lost its term with the entry
// uncommitted; it may still commit under the next leader). ErrNotLeader (wrapping
// ErrNoLeader) is returned only if no leader became known before ctx ended.
// While Config.Disk is below its reserve it returns a *DiskFullError
// (wrapping ErrDiskFull) without proposing.
func (s *Store) Apply(ctx context.Context, cmd *pb.Command) (*pb.Result, error) {
	if cmd == nil {
		return nil, fmt.Errorf("%w: nil command", fsm.ErrInvalid)
	}
	if err := s.checkDisk(); err != nil {
		return nil, err
	}
	var res *pb.Result
	err := s.onLeader(ctx,
		func() error {
			var err error
			res, err = s.applyLocal(ctx, cmd)
			return err
		},
		func(id, addr string) error {
			var err error
			res, err = s.fwd.ForwardApply(ctx, id, addr, cmd)
			if err == nil {
				err = fsm.ResultError(res)
			}
			return err
		})
	return res, err
}

// ApplyLocal is Apply without forwarding: it returns ErrNotLeader unless
// this server is the leader. The Internal.ForwardApply handler calls it.
// Lease grants below the minimum TTL (Config.MinLeaseTTL) are raised.
// It refuses as Apply does while Config.Disk is below its reserve.
func (s *Store) ApplyLocal(ctx context.Context, cmd *pb.Command) (*pb.Result, error) {
	if err := s.checkDisk(); err != nil {
		return nil, err
	}
	return s.applyLocal(ctx, cmd)
}

// checkDisk is Config.Disk's Check, nil without a guard: the one gate
// every write that appends to the log passes (as etcd's quota check).
func (s *Store) checkDisk() error {
	if s.cfg.Disk == nil {
		return nil
	}
	return s.cfg.Disk.Check()
}

// applyLocal is ApplyLocal without the disk check: the store's own writes
// (lease expiry, the NOSPACE alarm) use it.
func (s *Store) applyLocal(ctx context.Context, cmd *pb.Command) (*pb.Result, error) {
	if err := s.checkOpen(); err != nil {
		return nil, err
	}
	if cmd == nil {
		return nil, fmt.Errorf("%w: nil command", fsm.ErrInvalid)
	}
	if n := len(cmd.GetPayload()); n > fsm.MaxCommandSize {
		return nil, fmt.Errorf("%w: %v command of %d bytes (max %d)", fsm.ErrTooLarge, cmd.GetType(), n, fsm.MaxCommandSize)
	}
	if !s.IsLeader() {
		return nil, ErrNotLeader
	}
	var txn *pb.TxnRequest
	if cmd.GetType() == pb.CommandType_COMMAND_TXN {
		var err error
		if txn, err = s.gateTxn(cmd); err != nil {
			return nil, err
		}
	}
	if err := s.gateQuota(cmd, txn); err != nil {
		return nil, err
	}
	cmd, err := s.raiseLeaseTTL(cmd)
	if err != nil {
		return nil, err
	}
	p := &proposal{ctx: ctx, cmd: cmd, start: time.Now(), done: make(chan proposalResult, 1)}
	select {
	case s.proposeCh <- p:
		s.group.Arrived()
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-s.stopping:
		return nil, ErrNotOpen
	}
	var r proposalResult
	select {
	case r = <-p.done:
	case <-ctx.Done():
		return nil, fmt.Errorf("raftstore: apply outcome unknown: %w", ctx.Err())
	case <-s.workersDone:
		// The batcher and waiter are gone: p was either resolved or never
		// taken from the queue.
		select {
		case r = <-p.done:
		default:
			return nil, ErrNotOpen
		}
	}
	if r.err != nil {
		return nil, r.err
	}
	return r.res, fsm.ResultError(r.res)
}

// raiseLeaseTTL returns cmd, or a copy with a lease grant's TTL raised to
// the minimum. A TTL above fsm.MaxLeaseTTL is refused
// (fsm.ErrLeaseTTLTooLarge): its deadline would overflow.
func (s *Store) raiseLeaseTTL(cmd *pb.Command) (*pb.Command, error) {
	if cmd.GetType() != pb.CommandType_COMMAND_LEASE_GRANT {
		return cmd, nil
	}
	var req pb.LeaseGrantRequest
	if err := proto.Unmarshal(cmd.Payload, &req); err != nil {
		return nil, fmt.Errorf("%w: lease grant: %v", fsm.ErrMalformed, err)
	}
	if err := checkLeaseTTL(req.Ttl); err != nil {
		return nil, err
	}
	min := s.cfg.MinLeaseTTL()
	if req.Ttl >= min {
		return cmd, nil
	}
	req.Ttl = min
	return fsm.NewCommand(pb.CommandType_COMMAND_LEASE_GRANT, &req)
}

// onLeader runs local if this server leads, else remote against the
// current leader; it waits for a leader and retries while the leader
// changes (ErrNotLeader, a transfer in progress), until ctx ends.
func (s *Store) onLeader(ctx context.Context, local func() error, remote func(id, addr string) error) error {
	return s.onLeaderRetry(ctx, retryable, local, remote)
}

// onLeaderIdempotent is onLeader for calls that are safe to repeat (reads,
// keepalives): it also retries when the forwarded call reports the leader
// unavailable (gRPC Unavailable), as during an election.
func (s *Store) onLeaderIdempotent(ctx context.Context, local func() error, remote func(id, addr string) error) error {
	return s.onLeaderRetry(ctx, func(err error) bool {
		return retryable(err) || status.Code(err) == codes.Unavailable
	}, local, remote)
}

func (s *Store) onLeaderRetry(ctx context.Context, retryable func(error) bool, local func() error, remote func(id, addr string) error) error {
	backoff := 5 * time.Millisecond
	for {
		if err := s.checkOpen(); err != nil {
			return err
		}
		var err error
		if s.IsLeader() {
			err = local()
		} else {
			addr, id, werr := s.waitLeader(ctx)
			if werr != nil {
				return werr
			}
			switch {
			case id == s.cfg.ID:
				err = ErrNotLeader // raft knows it leads but State lags: retry
			case s.fwd == nil:
				return ErrNotLeader
			default:
				err = remote(id, addr)
			}
		}
		if !retryable(err) {
			return err
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w: %w", err, ctx.Err())
		case <-s.stopping:
			return ErrNotOpen
		case <-time.After(backoff):
		}
		if backoff < 100*time.Millisecond {
			backoff *= 2
		}
	}
}

// retryable reports errors after which the command was certainly not
// appended, so it can go to the (new) leader.
func retryable(err error) bool {
	return err != nil && (errors.Is(err, ErrNotLeader) || errors.Is(err, ErrNoLeader) ||
		errors.Is(err, raft.ErrNotLeader) || errors.Is(err, raft.ErrLeadershipTransferInProgress))
}

// runBatcher coalesces queued proposals into log entries: it takes one,
// drains what else is queued (up to MaxBatch), encodes them as one Entry and
// hands it to raft. While raft's leader loop is busy writing the previous
// entry, new proposals queue up and form the next batch.
//
// Group commit (package groupcommit): before closing a batch the batcher
// waits for the proposers the last entry answered that have not proposed
// again, up to Config.BatchLinger and that entry's round, so that
// concurrent proposers do not split into groups taking turns. A single
// client never waits.
func (s *Store) runBatcher() {
	defer s.wg.Done()
	defer close(s.waitCh)
	for {
		var first *proposal
		select {
		case first = <-s.proposeCh:
		case <-s.stopping:
			s.failQueued()
			return
		}
		// Wait for an in-flight slot before draining: while the pipeline is
		// full, proposals accumulate and the next entry carries them all.
		select {
		case s.inflight <- struct{}{}:
		case <-s.stopping:
			first.done <- proposalResult{err: ErrNotOpen}
			s.failQueued()
			return
		}
		batch := []*proposal{first}
	drain:
		for len(batch) < s.cfg.MaxBatch {
			select {
			case p := <-s.proposeCh:
				batch = append(batch, p)
			default:
				break drain
			}
		}
		batch = groupcommit.Fill(&s.group, s.proposeCh, batch, s.cfg.MaxBatch, s.cfg.BatchLinger, s.stopping)
		live := batch[:0]
		for _, p := range batch {
			if err := p.ctx.Err(); err != nil {
				p.done <- proposalResult{err: err}
				continue
			}
			live = append(live, p)
		}
		if len(live) == 0 {
			<-s.inflight
			continue
		}
		cmds := make([]*pb.Command, len(live))
		for i, p := range live {
			cmds[i] = p.cmd
		}
		data, err := fsm.EncodeEntryAt(stampWall(), fsm.Monotonic(), cmds)
		if err != nil {
			for _, p := range live {
				p.done <- proposalResult{err: fmt.Errorf("raftstore: encode entry: %w", err)}
			}
			<-s.inflight
			continue
		}
		s.metrics.batchSize.Observe(float64(len(live)))
		s.metrics.entries.Add(1)
		s.metrics.commands.Add(uint64(len(live)))
		proposed := time.Now()
		fut := s.raft.Apply(data, enqueueTimeout)
		s.waitCh <- pendingEntry{fut: fut, batch: append([]*proposal(nil), live...), proposed: proposed}
	}
}

func (s *Store) failQueued() {
	for {
		select {
		case p := <-s.proposeCh:
			p.done <- proposalResult{err: ErrNotOpen}
		default:
			return
		}
	}
}

// runWaiter resolves entries' futures in log order and hands each
// proposal its own Result.
func (s *Store) runWaiter() {
	defer s.wg.Done()
	for pe := range s.waitCh {
		err := pe.fut.Error()
		s.group.Resolved(len(pe.batch), time.Since(pe.proposed))
		<-s.inflight
		var ar *fsm.ApplyResult
		if err == nil {
			var ok bool
			if ar, ok = pe.fut.Response().(*fsm.ApplyResult); !ok || ar == nil {
				err = fmt.Errorf("raftstore: unexpected FSM response %T", pe.fut.Response())
			} else if ar.Err != nil {
				err = ar.Err
			} else if len(ar.Results) != len(pe.batch) {
				err = fmt.Errorf("raftstore: FSM returned %d results for %d commands", len(ar.Results), len(pe.batch))
			}
		}
		now := time.Now()
		for i, p := range pe.batch {
			if err != nil {
				p.done <- proposalResult{err: mapRaftErr(err)}
				continue
			}
			s.metrics.applyLatency.Observe(now.Sub(p.start).Seconds())
			p.done <- proposalResult{res: ar.Results[i]}
		}
	}
}
