package node

import (
	"context"

	"google.golang.org/grpc"

	pb "github.com/raftps/raftps/api/raftpspb"
	"github.com/raftps/raftps/fsm"
	"github.com/raftps/raftps/raftstore"
)

// gatedStore is the node's Raft store as every service, agent and the
// master see it: each call that appends to the Raft log first asks the
// DiskGuard, so a node whose data dir is (almost) full refuses writes at
// once with ResourceExhausted naming the disk, instead of meeting ENOSPC
// in the log (which costs the leader its leadership and leaves clients
// waiting for a leader until their deadline). Reads, watches and lease
// keepalives (in memory on the leader) pass through. It recovers by
// itself: the guard reads the free space afresh on every write.
type gatedStore struct {
	*raftstore.Store
	disk *raftstore.DiskGuard
}

func (s gatedStore) Apply(ctx context.Context, cmd *pb.Command) (*pb.Result, error) {
	if err := s.disk.Check(); err != nil {
		return nil, err
	}
	return s.Store.Apply(ctx, cmd)
}

func (s gatedStore) ApplyLocal(ctx context.Context, cmd *pb.Command) (*pb.Result, error) {
	if err := s.disk.Check(); err != nil {
		return nil, err
	}
	return s.Store.ApplyLocal(ctx, cmd)
}

func (s gatedStore) Put(ctx context.Context, req *pb.PutRequest) (*pb.PutResponse, error) {
	return gate(ctx, s, req, s.Store.Put)
}

func (s gatedStore) DeleteRange(ctx context.Context, req *pb.DeleteRangeRequest) (*pb.DeleteRangeResponse, error) {
	return gate(ctx, s, req, s.Store.DeleteRange)
}

// Txn passes the guard unless it writes: a read-only txn is a read
// (raftstore.Store.Txn serves it without the log).
func (s gatedStore) Txn(ctx context.Context, req *pb.TxnRequest) (*pb.TxnResponse, error) {
	if fsm.TxnReadOnly(req) {
		return s.Store.Txn(ctx, req)
	}
	return gate(ctx, s, req, s.Store.Txn)
}

func (s gatedStore) Compact(ctx context.Context, req *pb.CompactRequest) (*pb.CompactResponse, error) {
	return gate(ctx, s, req, s.Store.Compact)
}

func (s gatedStore) LeaseGrant(ctx context.Context, req *pb.LeaseGrantRequest) (*pb.LeaseGrantResponse, error) {
	return gate(ctx, s, req, s.Store.LeaseGrant)
}

func (s gatedStore) LeaseRevoke(ctx context.Context, req *pb.LeaseRevokeRequest) (*pb.LeaseRevokeResponse, error) {
	return gate(ctx, s, req, s.Store.LeaseRevoke)
}

func (s gatedStore) RecordJobEvent(ctx context.Context, ev *pb.JobEvent) (*pb.JobEvent, error) {
	return gate(ctx, s, ev, s.Store.RecordJobEvent)
}

func (s gatedStore) SubmitJob(ctx context.Context, req *pb.SubmitJobRequest) (*pb.SubmitJobResponse, error) {
	return gate(ctx, s, req, s.Store.SubmitJob)
}

func (s gatedStore) CancelJob(ctx context.Context, req *pb.CancelJobRequest) (*pb.CancelJobResponse, error) {
	return gate(ctx, s, req, s.Store.CancelJob)
}

func (s gatedStore) DeleteJob(ctx context.Context, req *pb.DeleteJobRequest) (*pb.DeleteJobResponse, error) {
	return gate(ctx, s, req, s.Store.DeleteJob)
}

func (s gatedStore) PruneJobs(ctx context.Context, req *pb.PruneJobsRequest) (*pb.PruneJobsResponse, error) {
	return gate(ctx, s, req, s.Store.PruneJobs)
}

func (s gatedStore) GetTask(ctx context.Context, req *pb.GetTaskRequest) (*pb.GetTaskResponse, error) {
	return gate(ctx, s, req, s.Store.GetTask)
}

func (s gatedStore) TaskFinished(ctx context.Context, req *pb.TaskFinishedRequest) (*pb.TaskFinishedResponse, error) {
	return gate(ctx, s, req, s.Store.TaskFinished)
}

func (s gatedStore) TaskFailed(ctx context.Context, req *pb.TaskFailedRequest) (*pb.TaskFailedResponse, error) {
	return gate(ctx, s, req, s.Store.TaskFailed)
}

func (s gatedStore) ExpireTasks(ctx context.Context, req *pb.ExpireTasksRequest) (*pb.ExpireTasksResponse, error) {
	return gate(ctx, s, req, s.Store.ExpireTasks)
}

func (s gatedStore) RequeueTrainer(ctx context.Context, req *pb.RequeueTrainerRequest) (*pb.RequeueTrainerResponse, error) {
	return gate(ctx, s, req, s.Store.RequeueTrainer)
}

func (s gatedStore) Join(ctx context.Context, id, raftAddr string, voter bool) error {
	if err := s.disk.Check(); err != nil {
		return err
	}
	return s.Store.Join(ctx, id, raftAddr, voter)
}

func (s gatedStore) Remove(ctx context.Context, id string) error {
	if err := s.disk.Check(); err != nil {
		return err
	}
	return s.Store.Remove(ctx, id)
}

// gate runs call unless the disk guard refuses writes.
func gate[Req, Resp any](ctx context.Context, s gatedStore, req Req, call func(context.Context, Req) (Resp, error)) (Resp, error) {
	if err := s.disk.Check(); err != nil {
		var zero Resp
		return zero, err
	}
	return call(ctx, req)
}

// healthErrors are the node's conditions that refuse or impede service,
// as /readyz and StatusResponse.errors report them.
func (n *Node) healthErrors() []string {
	var out []string
	if err := n.disk.Check(); err != nil {
		out = append(out, err.Error())
	}
	return out
}

// statusErrors is a unary interceptor of the client API that fills
// StatusResponse.errors with this node's health errors (the Cluster
// service knows the Raft state, the node its disk).
func (n *Node) statusErrors(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
	resp, err := h(ctx, req)
	if st, ok := resp.(*pb.StatusResponse); ok && err == nil {
		st.Errors = append(st.Errors, n.healthErrors()...)
	}
	return resp, err
}
