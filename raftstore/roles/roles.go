// Package roles declares the roles of the metadata store (raftstore.Store)
// as interfaces of request and response messages only, as etcd's
// server/etcdserver/v3_server.go declares RaftKV and Lessor: KV, Lessor and
// Jobs. It imports nothing but the API messages, so the agents (which must
// not link the server) and the in-process and remote clients share one
// shape; raftstore re-exports them next to Store (raftstore.KV, ...), with
// raftstore.Membership, the Raft configuration, which needs hashicorp/raft.
// raftstore/storetest implements KV, Lessor and Jobs over the real state
// machine without Raft, for tests.
//
// Writes go through Raft (forwarded to the leader from a follower) and
// pass the store's disk check; errors wrap the sentinels of fsm/errs
// (errors.Is) and carry their gRPC codes (api/rpctypes).
package roles

import (
	"context"

	pb "github.com/raftps/raftps/api/raftpspb"
)

// KV is the MVCC keyspace with etcd's semantics: Range is linearizable
// unless req.Serializable, Watch streams events from a revision.
type KV interface {
	Range(ctx context.Context, req *pb.RangeRequest) (*pb.RangeResponse, error)
	Put(ctx context.Context, req *pb.PutRequest) (*pb.PutResponse, error)
	DeleteRange(ctx context.Context, req *pb.DeleteRangeRequest) (*pb.DeleteRangeResponse, error)
	Txn(ctx context.Context, req *pb.TxnRequest) (*pb.TxnResponse, error)
	Watch(ctx context.Context, req *pb.WatchRequest) (<-chan *pb.WatchResponse, error)
}

// Lessor grants, renews and revokes leases (TTLs in seconds). A lease that
// no longer exists comes back as an error wrapping fsm.ErrLeaseNotFound.
type Lessor interface {
	LeaseGrant(ctx context.Context, req *pb.LeaseGrantRequest) (*pb.LeaseGrantResponse, error)
	LeaseRevoke(ctx context.Context, req *pb.LeaseRevokeRequest) (*pb.LeaseRevokeResponse, error)
	// LeaseKeepAlive renews lease id on the leader and returns its TTL.
	LeaseKeepAlive(ctx context.Context, id int64) (ttl int64, err error)
	// LeaseTimeToLive returns lease id's remaining TTL in seconds.
	LeaseTimeToLive(ctx context.Context, id int64) (ttl int64, err error)
}

// Jobs is the job queue: submission, the task queue of each job and its
// event stream.
type Jobs interface {
	SubmitJob(ctx context.Context, req *pb.SubmitJobRequest) (*pb.SubmitJobResponse, error)
	CancelJob(ctx context.Context, req *pb.CancelJobRequest) (*pb.CancelJobResponse, error)
	DeleteJob(ctx context.Context, req *pb.DeleteJobRequest) (*pb.DeleteJobResponse, error)
	PruneJobs(ctx context.Context, req *pb.PruneJobsRequest) (*pb.PruneJobsResponse, error)
	GetTask(ctx context.Context, req *pb.GetTaskRequest) (*pb.GetTaskResponse, error)
	TaskFinished(ctx context.Context, req *pb.TaskFinishedRequest) (*pb.TaskFinishedResponse, error)
	TaskFailed(ctx context.Context, req *pb.TaskFailedRequest) (*pb.TaskFailedResponse, error)
	ExpireTasks(ctx context.Context, req *pb.ExpireTasksRequest) (*pb.ExpireTasksResponse, error)
	RequeueTrainer(ctx context.Context, req *pb.RequeueTrainerRequest) (*pb.RequeueTrainerResponse, error)
	RecordJobEvent(ctx context.Context, ev *pb.JobEvent) (*pb.JobEvent, error)
	// Jobs lists every job as this server's state machine holds it
	// (serializable: it may trail the leader).
	Jobs() []*pb.JobStatus
	// JobQueue reads the job queue as this server's state machine holds
	// it (serializable; a LinearizableRead first makes it current).
	JobQueue() JobReader
}

// JobReader reads the job queue; each call sees one applied state (the
// shape of fsm.JobReader, which implements it).
type JobReader interface {
	// Job returns a copy of the named job's status.
	Job(name string) (*pb.JobStatus, bool)
	// Jobs returns every job's status (copies).
	Jobs() []*pb.JobStatus
	// Events returns the job's events with seq >= fromSeq, at most limit
	// (> 0); fsm.ErrFailedPrecondition if fromSeq was trimmed.
	Events(job string, fromSeq int64, limit int) ([]*pb.JobEvent, error)
	// EventSeq is the seq of the job's latest event (0 if none).
	EventSeq(job string) int64
	// Pending returns the job's pending tasks (copies).
	Pending(job string) []*pb.Task
	// PruneDue names, sorted, the finished jobs a PruneJobs command applied
	// at cluster time now (Unix ns) would delete; it changes nothing.
	PruneDue(now int64, req *pb.PruneJobsRequest) ([]string, error)
}
