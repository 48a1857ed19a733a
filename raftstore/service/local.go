package service

import (
	"context"

	pb "github.com/raftps/raftps/api/raftpspb"
	"github.com/raftps/raftps/raftstore/client/concurrency"
)

// Local is the in-process client of a node's own store: the etcd-style
// calls that agents on the node (pservers, trainers, checkpoints) make,
// with the same semantics as the gRPC API (writes go through Raft and are
// forwarded to the leader; reads are linearizable unless asked otherwise).
// Errors wrap the sentinels of fsm and raftstore (errors.Is).
type Local struct {
	Store Store
}

var _ concurrency.LeaseAPI = Local{}

// Txn runs a transaction through Raft.
func (l Local) Txn(ctx context.Context, req *pb.TxnRequest) (*pb.TxnResponse, error) {
	return l.Store.Txn(ctx, req)
}

// Put writes a key through Raft.
func (l Local) Put(ctx context.Context, req *pb.PutRequest) (*pb.PutResponse, error) {
	return l.Store.Put(ctx, req)
}

// DeleteRange deletes keys through Raft.
func (l Local) DeleteRange(ctx context.Context, req *pb.DeleteRangeRequest) (*pb.DeleteRangeResponse, error) {
	return l.Store.DeleteRange(ctx, req)
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
	out, err := l.Store.LeaseGrant(ctx, &pb.LeaseGrantRequest{Ttl: ttl})
	if err != nil {
		return 0, err
	}
	return out.Id, nil
}

// LeaseRevoke revokes a lease and deletes its keys.
func (l Local) LeaseRevoke(ctx context.Context, id int64) error {
	_, err := l.Store.LeaseRevoke(ctx, &pb.LeaseRevokeRequest{Id: id})
	return err
}

// LeaseKeepAlive renews a lease on the leader; returns the new TTL.
// Errors: fsm.ErrLeaseNotFound once the lease is gone (also when the
// keepalive was forwarded to the leader).
func (l Local) LeaseKeepAlive(ctx context.Context, id int64) (int64, error) {
	return l.Store.LeaseKeepAlive(ctx, id)
}

// RecordJobEvent appends an event (checkpoint committed, pserver restored,
// trainer joined/left) to a job's event stream through Raft.
func (l Local) RecordJobEvent(ctx context.Context, ev *pb.JobEvent) error {
	_, err := l.Store.RecordJobEvent(ctx, ev)
	return err
}

// Jobs returns every job of the local FSM (serializable: may lag the leader).
func (l Local) Jobs() []*pb.JobStatus { return l.Store.FSM().Jobs().Jobs() }
