package raftstore

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"fmt"
	"time"

	"google.golang.org/protobuf/proto"

	pb "github.com/raftps/raftps/api/raftpspb"
	"github.com/raftps/raftps/api/rpctypes"
	"github.com/raftps/raftps/fsm"
	"github.com/raftps/raftps/schema"
)

// The typed write path (etcd's raftRequest in server/etcdserver/v3_server.go):
// one method per command type, each built on raftRequest, which encodes the
// request, runs it through Apply (forwarded to the leader from a follower;
// a rejected command comes back as an error wrapping its sentinel, checked
// once there) and decodes the response. The gRPC services, the node's
// agents (in process, through the roles of roles.go) and the master all
// write through these.
//
// Responses that carry a header get Header.Revision = the store's revision
// after the command; callers fill the rest (term, member).
//
// A ctx with an rpctypes.RequestID (a client's id and sequence number)
// makes the command exactly-once: the FSM applies it once and answers a
// retry of the same id with the first result (fsm/session.go).

// raftRequest proposes req as a command of type t and decodes the result
// into a new R. It returns the revision after the command.
func raftRequest[R any, PR interface {
	*R
	proto.Message
}](ctx context.Context, s *Store, t pb.CommandType, req proto.Message) (PR, int64, error) {
	if err := fsm.Precheck(t, req); err != nil {
		return nil, 0, err // refused before it reaches the log
	}
	cmd, err := fsm.NewCommand(t, req)
	if err != nil {
		return nil, 0, fmt.Errorf("%w: %w", fsm.ErrMalformed, err)
	}
	if id, ok := rpctypes.RequestIDFrom(ctx); ok {
		cmd.ClientId, cmd.Seq, cmd.Acked = id.Client, id.Seq, id.Acked
	}
	res, err := s.Apply(ctx, cmd)
	if err != nil {
		return nil, 0, err
	}
	out := PR(new(R))
	if err := proto.Unmarshal(res.GetPayload(), out); err != nil {
		return nil, 0, fmt.Errorf("raftstore: decode %v result: %w", t, err)
	}
	return out, res.GetRevision(), nil
}

func header(rev int64) *pb.ResponseHeader { return &pb.ResponseHeader{Revision: rev} }

// Put writes one key (etcd's Put). Errors: fsm.ErrInvalid (empty key),
// fsm.ErrTooLarge, fsm.ErrLeaseNotFound (req.Lease names no lease), and
// those of Apply.
func (s *Store) Put(ctx context.Context, req *pb.PutRequest) (*pb.PutResponse, error) {
	out, rev, err := raftRequest[pb.PutResponse](ctx, s, pb.CommandType_COMMAND_PUT, req)
	if err != nil {
		return nil, err
	}
	out.Header = header(rev)
	return out, nil
}

// DeleteRange deletes a key or the range [Key, RangeEnd).
func (s *Store) DeleteRange(ctx context.Context, req *pb.DeleteRangeRequest) (*pb.DeleteRangeResponse, error) {
	out, rev, err := raftRequest[pb.DeleteRangeResponse](ctx, s, pb.CommandType_COMMAND_DELETE_RANGE, req)
	if err != nil {
		return nil, err
	}
	out.Header = header(rev)
	return out, nil
}

// Txn runs a transaction (compare, then success or failure ops). A txn
// without puts and deletes in either branch is a read (etcd's
// isTxnReadonly): it never enters the log, and is answered from this
// server's state after a linearizable read barrier (fsm.TxnRead). Errors:
// fsm.ErrTooLarge for more than Config.MaxTxnOps ops in the compares or a
// branch, or results over fsm.MaxTxnResponseBytes (both refused before
// the log), and those of Put, DeleteRange and Apply.
func (s *Store) Txn(ctx context.Context, req *pb.TxnRequest) (*pb.TxnResponse, error) {
	if err := s.checkTxnOps(req); err != nil {
		return nil, err
	}
	if fsm.TxnReadOnly(req) {
		if err := fsm.Precheck(pb.CommandType_COMMAND_TXN, req); err != nil {
			return nil, err
		}
		if err := s.LinearizableRead(ctx); err != nil {
			return nil, err
		}
		return s.fsm.TxnRead(req)
	}
	out, rev, err := raftRequest[pb.TxnResponse](ctx, s, pb.CommandType_COMMAND_TXN, req)
	if err != nil {
		return nil, err
	}
	out.Header = header(rev)
	return out, nil
}

// Compact drops the history below req.Revision. Errors: fsm.ErrCompacted,
// fsm.ErrFutureRevision.
func (s *Store) Compact(ctx context.Context, req *pb.CompactRequest) (*pb.CompactResponse, error) {
	out, _, err := raftRequest[pb.CompactResponse](ctx, s, pb.CommandType_COMMAND_COMPACT, req)
	return out, err
}

// LeaseGrant creates a lease of req.Ttl seconds (raised to
// Config.MinLeaseTTL) owned by req.Owner; req.Id 0 picks a random id in
// [1, 2^63) here, carried in the command (RandomId), so ids cannot be
// guessed and every replica grants the same. Errors:
// fsm.ErrLeaseTTLTooLarge above fsm.MaxLeaseTTL (checked before
// proposing), fsm.ErrLeaseExists, fsm.ErrTooManyLeases.
func (s *Store) LeaseGrant(ctx context.Context, req *pb.LeaseGrantRequest) (*pb.LeaseGrantResponse, error) {
	if err := checkLeaseTTL(req.GetTtl()); err != nil {
		return nil, err
	}
	if req.GetId() == 0 {
		req = proto.CloneOf(req)
		req.Id, req.RandomId = randomLeaseID(), true
	}
	out, rev, err := raftRequest[pb.LeaseGrantResponse](ctx, s, pb.CommandType_COMMAND_LEASE_GRANT, req)
	if err != nil {
		return nil, err
	}
	out.Header = header(rev)
	return out, nil
}

// LeaseRevoke revokes a lease and deletes its keys. Errors: fsm.ErrLeaseNotFound.
func (s *Store) LeaseRevoke(ctx context.Context, req *pb.LeaseRevokeRequest) (*pb.LeaseRevokeResponse, error) {
	out, rev, err := raftRequest[pb.LeaseRevokeResponse](ctx, s, pb.CommandType_COMMAND_LEASE_REVOKE, req)
	if err != nil {
		return nil, err
	}
	out.Header = header(rev)
	return out, nil
}

// SubmitJob creates a job from a spec the FSM validates. Errors:
// fsm.ErrInvalid naming the field, fsm.ErrExists for a taken name.
func (s *Store) SubmitJob(ctx context.Context, req *pb.SubmitJobRequest) (*pb.SubmitJobResponse, error) {
	out, _, err := raftRequest[pb.SubmitJobResponse](ctx, s, pb.CommandType_COMMAND_SUBMIT_JOB, req)
	return out, err
}

// CancelJob cancels a job. Errors: fsm.ErrNotFound.
func (s *Store) CancelJob(ctx context.Context, req *pb.CancelJobRequest) (*pb.CancelJobResponse, error) {
	out, _, err := raftRequest[pb.CancelJobResponse](ctx, s, pb.CommandType_COMMAND_CANCEL_JOB, req)
	return out, err
}

// DeleteJob removes a job that is not running, with its tasks and events.
// Errors: fsm.ErrNotFound, fsm.ErrFailedPrecondition (still running).
func (s *Store) DeleteJob(ctx context.Context, req *pb.DeleteJobRequest) (*pb.DeleteJobResponse, error) {
	out, _, err := raftRequest[pb.DeleteJobResponse](ctx, s, pb.CommandType_COMMAND_DELETE_JOB, req)
	return out, err
}

// PruneJobs deletes finished jobs past the retention limits (age by the
// entry's cluster time, count) and returns their names.
func (s *Store) PruneJobs(ctx context.Context, req *pb.PruneJobsRequest) (*pb.PruneJobsResponse, error) {
	out, _, err := raftRequest[pb.PruneJobsResponse](ctx, s, pb.CommandType_COMMAND_PRUNE_JOBS, req)
	return out, err
}

// GetTask hands a task to a trainer (Paddle's GetTask).
func (s *Store) GetTask(ctx context.Context, req *pb.GetTaskRequest) (*pb.GetTaskResponse, error) {
	out, _, err := raftRequest[pb.GetTaskResponse](ctx, s, pb.CommandType_COMMAND_GET_TASK, req)
	return out, err
}

// TaskFinished reports a finished task; a stale report answers accepted=false.
func (s *Store) TaskFinished(ctx context.Context, req *pb.TaskFinishedRequest) (*pb.TaskFinishedResponse, error) {
	out, _, err := raftRequest[pb.TaskFinishedResponse](ctx, s, pb.CommandType_COMMAND_TASK_FINISHED, req)
	return out, err
}

// TaskFailed reports a failed task.
func (s *Store) TaskFailed(ctx context.Context, req *pb.TaskFailedRequest) (*pb.TaskFailedResponse, error) {
	out, _, err := raftRequest[pb.TaskFailedResponse](ctx, s, pb.CommandType_COMMAND_TASK_FAILED, req)
	return out, err
}

// ExpireTasks requeues the tasks of req.Job (every job if empty) past their
// deadline by the clock stamped in the entry.
func (s *Store) ExpireTasks(ctx context.Context, req *pb.ExpireTasksRequest) (*pb.ExpireTasksResponse, error) {
	out, _, err := raftRequest[pb.ExpireTasksResponse](ctx, s, pb.CommandType_COMMAND_EXPIRE_TASKS, req)
	return out, err
}

// RequeueTrainer requeues every pending task a trainer holds (it is gone).
func (s *Store) RequeueTrainer(ctx context.Context, req *pb.RequeueTrainerRequest) (*pb.RequeueTrainerResponse, error) {
	out, _, err := raftRequest[pb.RequeueTrainerResponse](ctx, s, pb.CommandType_COMMAND_REQUEUE_TRAINER, req)
	return out, err
}

// RecordJobEvent appends ev (checkpoint committed, pserver restored,
// trainer joined or left) to its job's event stream and returns it with
// its sequence number.
func (s *Store) RecordJobEvent(ctx context.Context, ev *pb.JobEvent) (*pb.JobEvent, error) {
	out, _, err := raftRequest[pb.JobEvent](ctx, s, pb.CommandType_COMMAND_JOB_EVENT, ev)
	return out, err
}

// Jobs lists every job as this server's state machine holds it
// (serializable: it may trail the leader; no Raft round trip).
func (s *Store) Jobs() []*pb.JobStatus { return s.fsm.Jobs().Jobs() }

// JobQueue reads the job queue as this server's state machine holds it
// (serializable; LinearizableRead first makes it current).
func (s *Store) JobQueue() JobReader { return s.fsm.Jobs() }

// LeaseTTL returns lease id's granted TTL in seconds as this server's
// state machine holds it (serializable); false if there is no such lease.
func (s *Store) LeaseTTL(id int64) (int64, bool) {
	l, ok := s.fsm.Lease(id)
	return l.TTL, ok
}

// ClockTerm returns the cluster clock (Unix ns) and the term of the entry
// that last advanced it, as this server has applied them (fsm/clock.go).
func (s *Store) ClockTerm() (now int64, term uint64) { return s.fsm.ClockTerm() }

// MaxTxnOps is Config.MaxTxnOps (after defaults): the most ops a txn may
// hold in its compares and in each branch.
func (s *Store) MaxTxnOps() int { return s.cfg.MaxTxnOps }

// checkTxnOps refuses a txn with more than Config.MaxTxnOps compares or
// ops in a branch (etcd's "too many operations in txn request").
func (s *Store) checkTxnOps(req *pb.TxnRequest) error {
	max := s.cfg.MaxTxnOps
	for _, part := range []struct {
		name string
		n    int
	}{{"compares", len(req.GetCompare())}, {"success ops", len(req.GetSuccess())}, {"failure ops", len(req.GetFailure())}} {
		if part.n > max {
			return fmt.Errorf("%w: txn of %d %s (max %d ops, --max-txn-ops)", fsm.ErrTooLarge, part.n, part.name, max)
		}
	}
	return nil
}

// gateTxn is the leader's last check of a txn command before it enters
// the log, whoever proposed it (this server or a follower's forward): the
// op cap, no read-only txn (those are reads), and the response bound
// against the current state (fsm.FSM.CheckTxn). Apply checks the bound
// again against the state it applies to, so an entry in the log is always
// applied within fsm.MaxTxnResponseBytes.
func (s *Store) gateTxn(cmd *pb.Command) (*pb.TxnRequest, error) {
	var req pb.TxnRequest
	if err := proto.Unmarshal(cmd.GetPayload(), &req); err != nil {
		return nil, fmt.Errorf("%w: txn: %v", fsm.ErrMalformed, err)
	}
	if err := s.checkTxnOps(&req); err != nil {
		return nil, err
	}
	if fsm.TxnReadOnly(&req) {
		return nil, fmt.Errorf("%w: a txn without puts or deletes is a read: Store.Txn serves it without the log", fsm.ErrInvalid)
	}
	return &req, s.fsm.CheckTxn(&req)
}

// gateQuota is the leader's backend quota (etcd's --quota-backend-bytes,
// api/v3rpc/quota.go): a put, or a txn with a put, whose encoded size
// would take the store's keys and values past Config.QuotaBackendBytes is
// refused with fsm.ErrNoSpace, and the NOSPACE alarm is armed
// (schema.NoSpaceAlarmKey, proposed through the log): from then on every
// replica's state machine refuses writes that add keys or bytes, until an
// admin frees space and deletes the key. Deletes always pass.
func (s *Store) gateQuota(cmd *pb.Command, txn *pb.TxnRequest) error {
	q := s.cfg.QuotaBackendBytes
	switch {
	case q <= 0:
		return nil
	case cmd.GetType() == pb.CommandType_COMMAND_TXN && len(txn.GetSuccess())+len(txn.GetFailure()) == len(txnDeletes(txn)):
		return nil // only deletes
	case cmd.GetType() != pb.CommandType_COMMAND_PUT && cmd.GetType() != pb.CommandType_COMMAND_TXN:
		return nil
	}
	used, cost := s.fsm.UsedBytes(), int64(len(cmd.GetPayload()))
	if used+cost <= q {
		return nil
	}
	if err := s.armNoSpace(); err != nil {
		s.logger.Warn("arm NOSPACE alarm", "err", err)
	}
	return fmt.Errorf("%w: the store holds %d bytes of keys and values; a write of up to %d more would pass the backend quota of %d bytes (--quota-backend-bytes): delete keys, then delete %s to disarm",
		fsm.ErrNoSpace, used, cost, q, schema.NoSpaceAlarmKey)
}

// txnDeletes returns the delete ops of both branches of txn.
func txnDeletes(txn *pb.TxnRequest) []*pb.DeleteRangeRequest {
	var out []*pb.DeleteRangeRequest
	for _, ops := range [][]*pb.RequestOp{txn.GetSuccess(), txn.GetFailure()} {
		for _, op := range ops {
			if d := op.GetRequestDeleteRange(); d != nil {
				out = append(out, d)
			}
		}
	}
	return out
}

// armNoSpace writes schema.NoSpaceAlarmKey unless it is set.
func (s *Store) armNoSpace() error {
	r, err := s.fsm.Range(&pb.RangeRequest{Key: []byte(schema.NoSpaceAlarmKey), CountOnly: true})
	if err != nil || r.Count > 0 {
		return err
	}
	cmd, err := fsm.NewCommand(pb.CommandType_COMMAND_PUT, &pb.PutRequest{Key: []byte(schema.NoSpaceAlarmKey), Value: []byte("NOSPACE")})
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err = s.applyLocal(ctx, cmd)
	return err
}

// randomLeaseID is a uniformly random lease id in [1, 2^63).
func randomLeaseID() int64 {
	var b [8]byte
	for {
		_, _ = rand.Read(b[:]) // crypto/rand.Read never fails (Go 1.24)
		if id := int64(binary.BigEndian.Uint64(b[:]) >> 1); id != 0 {
			return id
		}
	}
}

// checkLeaseTTL refuses a TTL above fsm.MaxLeaseTTL (etcd's bound), whose
// deadline would overflow time.Duration.
func checkLeaseTTL(ttl int64) error {
	if ttl > fsm.MaxLeaseTTL {
		return fmt.Errorf("%w: ttl %d s is above the maximum of %d s", fsm.ErrLeaseTTLTooLarge, ttl, fsm.MaxLeaseTTL)
	}
	return nil
}
