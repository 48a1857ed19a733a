package service

import (
	"context"
	"fmt"

	"google.golang.org/protobuf/proto"

	pb "github.com/raftps/raftps/api/raftpspb"
	"github.com/raftps/raftps/fsm"
)

// Local is the in-process client of a node's own store: the etcd-style
// calls that agents on the node (pservers, trainers, checkpoints) make,
// with the same semantics as the gRPC API (writes go through Raft and are
// forwarded to the leader; reads are linearizable unless asked otherwise).
type Local struct {
	Store Store
}

func (l Local) apply(ctx context.Context, t pb.CommandType, req, out proto.Message) error {
	cmd, err := fsm.NewCommand(t, req)
	if err != nil {
		return err
	}
	res, err := l.Store.Apply(ctx, cmd)
	if err != nil {
		return err
	}
	if err := fsm.ResultError(res); err != nil {
		return err
	}
	if out == nil {
		return nil
	}
	if err := proto.Unmarshal(res.Payload, out); err != nil {
		return fmt.Errorf("decode %v result: %w", t, err)
	}
	return nil
}

// Txn runs a transaction through Raft.
func (l Local) Txn(ctx context.Context, req *pb.TxnRequest) (*pb.TxnResponse, error) {
	out := &pb.TxnResponse{}
	return out, l.apply(ctx, pb.CommandType_COMMAND_TXN, req, out)
}

// Put writes a key through Raft.
func (l Local) Put(ctx context.Context, req *pb.PutRequest) (*pb.PutResponse, error) {
	out := &pb.PutResponse{}
	return out, l.apply(ctx, pb.CommandType_COMMAND_PUT, req, out)
}

// DeleteRange deletes keys through Raft.
func (l Local) DeleteRange(ctx context.Context, req *pb.DeleteRangeRequest) (*pb.DeleteRangeResponse, error) {
	out := &pb.DeleteRangeResponse{}
	return out, l.apply(ctx, pb.CommandType_COMMAND_DELETE_RANGE, req, out)
}

// Range reads keys (linearizable unless req.Serializable).
func (l Local) Range(ctx context.Context, req *pb.RangeRequest) (*pb.RangeResponse, error) {
	return l.Store.Range(ctx, req)
}

// Watch watches a key or range from a revision.
func (l Local) Watch(ctx context.Context, req *pb.WatchRequest) (<-chan *pb.WatchResponse, error) {
	return l.Store.Watch(ctx, req)
}

// LeaseGrant grants a lease of ttl seconds and returns its id.
func (l Local) LeaseGrant(ctx context.Context, ttl int64) (int64, error) {
	out := &pb.LeaseGrantResponse{}
	if err := l.apply(ctx, pb.CommandType_COMMAND_LEASE_GRANT, &pb.LeaseGrantRequest{Ttl: ttl}, out); err != nil {
		return 0, err
	}
	return out.Id, nil
}

// LeaseRevoke revokes a lease and deletes its keys.
func (l Local) LeaseRevoke(ctx context.Context, id int64) error {
	return l.apply(ctx, pb.CommandType_COMMAND_LEASE_REVOKE, &pb.LeaseRevokeRequest{Id: id}, nil)
}

// LeaseKeepAlive renews a lease on the leader; returns the new TTL.
func (l Local) LeaseKeepAlive(ctx context.Context, id int64) (int64, error) {
	return l.Store.LeaseKeepAlive(ctx, id)
}

// RecordJobEvent appends an event (checkpoint committed, pserver restored,
// trainer joined/left) to a job's event stream through Raft.
func (l Local) RecordJobEvent(ctx context.Context, ev *pb.JobEvent) error {
	return l.apply(ctx, pb.CommandType_COMMAND_JOB_EVENT, ev, nil)
}

// Jobs returns every job of the local FSM (serializable: may lag the leader).
func (l Local) Jobs() []*pb.JobStatus { return l.Store.FSM().Jobs().Jobs() }
