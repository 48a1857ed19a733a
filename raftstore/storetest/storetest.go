// Package storetest is an in-memory metadata store for tests, backed by
// the real state machine (fsm.FSM) without Raft, as hashicorp/raft's
// testing.go and etcd's betesting give tests the real backend: every write
// is encoded as the command raftstore.Store would propose and applied as
// the next log entry, so keys, revisions, txn compares, leases and the job
// queue behave exactly as in a cluster. It implements the store's roles
// (raftstore/roles: KV, Lessor, Jobs) and so every agent's Meta.
//
// What a single in-memory state machine cannot do is left to the test: a
// lease expires only when the test calls Expire (there are no leader lease
// timers), and Fail makes a method fail as a cut-off node would.
//
//	s := storetest.New()
//	s.Fail("Txn", status.Error(codes.Unavailable, "down")) // until Fail("Txn", nil)
package storetest

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/hashicorp/raft"
	"google.golang.org/protobuf/proto"

	pb "github.com/raftps/raftps/api/raftpspb"
	"github.com/raftps/raftps/fsm"
	"github.com/raftps/raftps/raftstore/roles"
)

// Store is the in-memory store. Safe for concurrent use.
type Store struct {
	fsm *fsm.FSM

	mu      sync.Mutex // serializes writes (the log order) and guards below
	index   uint64     // the last applied entry
	leaseID int64      // the last lease id granted
	fail    map[string]error
	wake    chan struct{} // closed and replaced after every write
}

var (
	_ roles.KV     = (*Store)(nil)
	_ roles.Lessor = (*Store)(nil)
	_ roles.Jobs   = (*Store)(nil)
)

// New returns an empty store.
func New() *Store {
	return &Store{fsm: fsm.New(nil), fail: map[string]error{}, wake: make(chan struct{})}
}

// FSM returns the state machine, for assertions.
func (s *Store) FSM() *fsm.FSM { return s.fsm }

// Fail makes every call of method (e.g. "Txn", "Range", "LeaseKeepAlive")
// return err until Fail(method, nil).
func (s *Store) Fail(method string, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err == nil {
		delete(s.fail, method)
		return
	}
	s.fail[method] = err
}

func (s *Store) failed(method string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.fail[method]
}

// apply encodes req as a command of type t, applies it as the next log
// entry and decodes its response into out. It returns the command's error
// (fsm.ResultError) and the revision after it.
func (s *Store) apply(t pb.CommandType, req, out proto.Message) (int64, error) {
	if err := fsm.Precheck(t, req); err != nil {
		return 0, err
	}
	cmd, err := fsm.NewCommand(t, req)
	if err != nil {
		return 0, err
	}
	data, err := fsm.EncodeEntry(time.Now().UnixNano(), []*pb.Command{cmd})
	if err != nil {
		return 0, err
	}
	s.mu.Lock()
	s.index++
	r, ok := s.fsm.Apply(&raft.Log{Index: s.index, Term: 1, Type: raft.LogCommand, Data: data}).(*fsm.ApplyResult)
	close(s.wake)
	s.wake = make(chan struct{})
	s.mu.Unlock()
	if !ok {
		return 0, errors.New("storetest: apply returned no result")
	}
	if r.Err != nil {
		return 0, r.Err
	}
	res := r.Results[0]
	if err := fsm.ResultError(res); err != nil {
		return 0, err
	}
	if err := proto.Unmarshal(res.GetPayload(), out); err != nil {
		return 0, fmt.Errorf("storetest: decode %v result: %w", t, err)
	}
	return res.GetRevision(), nil
}

// write runs a command of type t unless method was made to fail.
func write[R any, PR interface {
	*R
	proto.Message
}](s *Store, method string, t pb.CommandType, req proto.Message) (PR, int64, error) {
	if err := s.failed(method); err != nil {
		return nil, 0, err
	}
	out := PR(new(R))
	rev, err := s.apply(t, req, out)
	if err != nil {
		return nil, 0, err
	}
	return out, rev, nil
}

func header(rev int64) *pb.ResponseHeader { return &pb.ResponseHeader{Revision: rev} }

// Range reads keys (every read is current: there is one state machine).
func (s *Store) Range(_ context.Context, req *pb.RangeRequest) (*pb.RangeResponse, error) {
	if err := s.failed("Range"); err != nil {
		return nil, err
	}
	return s.fsm.Range(req)
}

// Put writes a key.
func (s *Store) Put(_ context.Context, req *pb.PutRequest) (*pb.PutResponse, error) {
	out, rev, err := write[pb.PutResponse](s, "Put", pb.CommandType_COMMAND_PUT, req)
	if err == nil {
		out.Header = header(rev)
	}
	return out, err
}

// DeleteRange deletes keys.
func (s *Store) DeleteRange(_ context.Context, req *pb.DeleteRangeRequest) (*pb.DeleteRangeResponse, error) {
	out, rev, err := write[pb.DeleteRangeResponse](s, "DeleteRange", pb.CommandType_COMMAND_DELETE_RANGE, req)
	if err == nil {
		out.Header = header(rev)
	}
	return out, err
}

// Txn runs a transaction (a read-only one without a log entry, as the store).
func (s *Store) Txn(_ context.Context, req *pb.TxnRequest) (*pb.TxnResponse, error) {
	if fsm.TxnReadOnly(req) {
		if err := s.failed("Txn"); err != nil {
			return nil, err
		}
		return s.fsm.TxnRead(req)
	}
	out, rev, err := write[pb.TxnResponse](s, "Txn", pb.CommandType_COMMAND_TXN, req)
	if err == nil {
		out.Header = header(rev)
	}
	return out, err
}

// Watch streams the events of req's key or range from req.StartRevision
// (0: from the next write) until ctx ends.
func (s *Store) Watch(ctx context.Context, req *pb.WatchRequest) (<-chan *pb.WatchResponse, error) {
	if err := s.failed("Watch"); err != nil {
		return nil, err
	}
	s.mu.Lock()
	next := s.fsm.Revision() + 1
	s.mu.Unlock()
	if req.GetStartRevision() > 0 {
		next = req.GetStartRevision()
	}
	out := make(chan *pb.WatchResponse, 16)
	go func() {
		defer close(out)
		for {
			s.mu.Lock()
			wake := s.wake
			s.mu.Unlock()
			evs, err := s.fsm.Events(req.GetKey(), req.GetRangeEnd(), next, 1000)
			if err != nil {
				return
			}
			if len(evs) > 0 {
				next = evs[len(evs)-1].GetKv().GetModRevision() + 1
				select {
				case out <- &pb.WatchResponse{Header: header(s.fsm.Revision()), Events: evs}:
				case <-ctx.Done():
					return
				}
				continue
			}
			select {
			case <-wake:
			case <-ctx.Done():
				return
			}
		}
	}()
	return out, nil
}

// LeaseGrant grants a lease (ids are 1, 2, ... unless req.Id is set).
func (s *Store) LeaseGrant(_ context.Context, req *pb.LeaseGrantRequest) (*pb.LeaseGrantResponse, error) {
	req = proto.Clone(req).(*pb.LeaseGrantRequest)
	if req.Id == 0 {
		s.mu.Lock()
		s.leaseID++
		req.Id = s.leaseID
		s.mu.Unlock()
	}
	out, rev, err := write[pb.LeaseGrantResponse](s, "LeaseGrant", pb.CommandType_COMMAND_LEASE_GRANT, req)
	if err == nil {
		out.Header = header(rev)
	}
	return out, err
}

// LeaseRevoke revokes a lease and deletes its keys.
func (s *Store) LeaseRevoke(_ context.Context, req *pb.LeaseRevokeRequest) (*pb.LeaseRevokeResponse, error) {
	out, rev, err := write[pb.LeaseRevokeResponse](s, "LeaseRevoke", pb.CommandType_COMMAND_LEASE_REVOKE, req)
	if err == nil {
		out.Header = header(rev)
	}
	return out, err
}

// Expire ends lease id as the leader's timers would when its TTL runs out
// (a revocation); a lease that is gone already is not an error.
func (s *Store) Expire(id int64) error {
	_, err := s.apply(pb.CommandType_COMMAND_LEASE_REVOKE, &pb.LeaseRevokeRequest{Id: id}, &pb.LeaseRevokeResponse{})
	if errors.Is(err, fsm.ErrLeaseNotFound) {
		return nil
	}
	return err
}

// LeaseKeepAlive returns lease id's granted TTL, or an error wrapping
// fsm.ErrLeaseNotFound once it is gone.
func (s *Store) LeaseKeepAlive(_ context.Context, id int64) (int64, error) {
	if err := s.failed("LeaseKeepAlive"); err != nil {
		return 0, err
	}
	return s.leaseTTL(id)
}

// LeaseTimeToLive returns lease id's granted TTL (there are no timers).
func (s *Store) LeaseTimeToLive(_ context.Context, id int64) (int64, error) {
	if err := s.failed("LeaseTimeToLive"); err != nil {
		return 0, err
	}
	return s.leaseTTL(id)
}

func (s *Store) leaseTTL(id int64) (int64, error) {
	l, ok := s.fsm.Lease(id)
	if !ok {
		return 0, fmt.Errorf("%w: %d", fsm.ErrLeaseNotFound, id)
	}
	return l.TTL, nil
}

// SubmitJob submits a job.
func (s *Store) SubmitJob(_ context.Context, req *pb.SubmitJobRequest) (*pb.SubmitJobResponse, error) {
	out, _, err := write[pb.SubmitJobResponse](s, "SubmitJob", pb.CommandType_COMMAND_SUBMIT_JOB, req)
	return out, err
}

// CancelJob cancels a job.
func (s *Store) CancelJob(_ context.Context, req *pb.CancelJobRequest) (*pb.CancelJobResponse, error) {
	out, _, err := write[pb.CancelJobResponse](s, "CancelJob", pb.CommandType_COMMAND_CANCEL_JOB, req)
	return out, err
}

// DeleteJob deletes a finished job.
func (s *Store) DeleteJob(_ context.Context, req *pb.DeleteJobRequest) (*pb.DeleteJobResponse, error) {
	out, _, err := write[pb.DeleteJobResponse](s, "DeleteJob", pb.CommandType_COMMAND_DELETE_JOB, req)
	return out, err
}

// PruneJobs deletes finished jobs past the retention limits.
func (s *Store) PruneJobs(_ context.Context, req *pb.PruneJobsRequest) (*pb.PruneJobsResponse, error) {
	out, _, err := write[pb.PruneJobsResponse](s, "PruneJobs", pb.CommandType_COMMAND_PRUNE_JOBS, req)
	return out, err
}

// GetTask hands a trainer a task.
func (s *Store) GetTask(_ context.Context, req *pb.GetTaskRequest) (*pb.GetTaskResponse, error) {
	out, _, err := write[pb.GetTaskResponse](s, "GetTask", pb.CommandType_COMMAND_GET_TASK, req)
	return out, err
}

// TaskFinished completes a task.
func (s *Store) TaskFinished(_ context.Context, req *pb.TaskFinishedRequest) (*pb.TaskFinishedResponse, error) {
	out, _, err := write[pb.TaskFinishedResponse](s, "TaskFinished", pb.CommandType_COMMAND_TASK_FINISHED, req)
	return out, err
}

// TaskFailed fails a task.
func (s *Store) TaskFailed(_ context.Context, req *pb.TaskFailedRequest) (*pb.TaskFailedResponse, error) {
	out, _, err := write[pb.TaskFailedResponse](s, "TaskFailed", pb.CommandType_COMMAND_TASK_FAILED, req)
	return out, err
}

// ExpireTasks requeues a job's tasks past their deadline.
func (s *Store) ExpireTasks(_ context.Context, req *pb.ExpireTasksRequest) (*pb.ExpireTasksResponse, error) {
	out, _, err := write[pb.ExpireTasksResponse](s, "ExpireTasks", pb.CommandType_COMMAND_EXPIRE_TASKS, req)
	return out, err
}

// RequeueTrainer requeues a trainer's tasks.
func (s *Store) RequeueTrainer(_ context.Context, req *pb.RequeueTrainerRequest) (*pb.RequeueTrainerResponse, error) {
	out, _, err := write[pb.RequeueTrainerResponse](s, "RequeueTrainer", pb.CommandType_COMMAND_REQUEUE_TRAINER, req)
	return out, err
}

// RecordJobEvent appends an event to a job's stream.
func (s *Store) RecordJobEvent(_ context.Context, ev *pb.JobEvent) (*pb.JobEvent, error) {
	out, _, err := write[pb.JobEvent](s, "RecordJobEvent", pb.CommandType_COMMAND_JOB_EVENT, ev)
	return out, err
}

// Jobs lists every job.
func (s *Store) Jobs() []*pb.JobStatus { return s.fsm.Jobs().Jobs() }

// JobQueue reads the job queue.
func (s *Store) JobQueue() roles.JobReader { return s.fsm.Jobs() }
