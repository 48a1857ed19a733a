package raftstore

import (
	"context"

	"github.com/hashicorp/raft"

	"github.com/raftps/raftps/raftstore/roles"
)

// The roles of the store, declared by the producer next to Store as etcd's
// server/etcdserver/v3_server.go declares RaftKV and Lessor. Consumers take
// the roles they use (or embed them in their own interface with the few
// extra methods they need) instead of re-listing the store's methods.
// KV, Lessor and Jobs are declared in the leaf package roles, so that the
// agents use them without linking the server. *Store implements all four.
type (
	// KV is roles.KV: the MVCC keyspace with etcd's semantics.
	KV = roles.KV
	// Lessor is roles.Lessor: lease grant, renewal and revocation.
	Lessor = roles.Lessor
	// Jobs is roles.Jobs: the job queue and its events.
	Jobs = roles.Jobs
	// JobReader is roles.JobReader: serializable reads of the job queue.
	JobReader = roles.JobReader
)

// Membership is the Raft configuration: servers join, leave, and are
// promoted from learners; the leader changes it (else ErrNotLeader).
type Membership interface {
	Join(ctx context.Context, id, raftAddr string, voter bool) error
	Remove(ctx context.Context, id string) error
	AddMember(ctx context.Context, id, raftAddr string, voter bool) error
	PromoteMember(ctx context.Context, id string) error
	// VerifyPeer proves that the server at raftAddr holds node id's
	// certificate (nil without TLS).
	VerifyPeer(ctx context.Context, id, raftAddr string) error
	Configuration() ([]raft.Server, error)
}

var (
	_ KV         = (*Store)(nil)
	_ Lessor     = (*Store)(nil)
	_ Jobs       = (*Store)(nil)
	_ Membership = (*Store)(nil)
)
