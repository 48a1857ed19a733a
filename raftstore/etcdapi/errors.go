package etcdapi

import (
	"context"
	"errors"

	"github.com/hashicorp/raft"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	raftpsrpc "github.com/raftps/raftps/api/rpctypes"
	"github.com/raftps/raftps/fsm"
)

// errUnimplemented is the sentinel of the etcd features this package does
// not serve; unimplemented wraps it with what to use instead.
var errUnimplemented = errors.New("etcdapi: not implemented by raftps")

// errEmptyKey: a request without a key (etcd checks this before Raft).
var errEmptyKey = errors.New("etcdapi: key is not provided")

// errDuplicateKey: a Txn branch writes one key twice.
var errDuplicateKey = errors.New("etcdapi: duplicate key given in txn request")

// errInvalidSort: an unknown sort order or target.
var errInvalidSort = errors.New("etcdapi: invalid sort option")

// errTooManyOps: a Txn branch longer than Store.MaxTxnOps.
var errTooManyOps = errors.New("etcdapi: too many operations in txn request")

// table maps raftps' sentinels to the status etcd's server answers for the
// same condition (etcd's togRPCError), consulted in order.
var table = []struct {
	err error
	st  error
}{
	{errEmptyKey, rpctypes.ErrGRPCEmptyKey},
	{errDuplicateKey, rpctypes.ErrGRPCDuplicateKey},
	{errInvalidSort, rpctypes.ErrGRPCInvalidSortOption},
	{errTooManyOps, rpctypes.ErrGRPCTooManyOps},
	{fsm.ErrLeaseNotFound, rpctypes.ErrGRPCLeaseNotFound},
	{fsm.ErrLeaseExists, rpctypes.ErrGRPCLeaseExist},
	{fsm.ErrLeaseTTLTooLarge, rpctypes.ErrGRPCLeaseTTLTooLarge},
	{fsm.ErrCompacted, rpctypes.ErrGRPCCompacted},
	{fsm.ErrFutureRevision, rpctypes.ErrGRPCFutureRev},
	{fsm.ErrTooLarge, rpctypes.ErrGRPCRequestTooLarge},
	{fsm.ErrNoSpace, rpctypes.ErrGRPCNoSpace},
	{raftpsrpc.ErrNoLeader, rpctypes.ErrGRPCNoLeader},
	{raftpsrpc.ErrNotLeader, rpctypes.ErrGRPCNoLeader},
	{raftpsrpc.ErrNotOpen, rpctypes.ErrGRPCStopped},
	{raft.ErrLeadershipLost, rpctypes.ErrGRPCLeaderChanged},
	{raft.ErrLeadershipTransferInProgress, rpctypes.ErrGRPCLeaderChanged},
}

// ToStatus maps err to the gRPC status etcd's server would answer: the
// etcd rpctypes status of the raftps sentinel it wraps (table above); the
// caller's own deadline or cancellation as DeadlineExceeded or Canceled; a
// store timeout as "etcdserver: request timed out"; an unimplemented
// feature as Unimplemented with its message; anything else as raftps'
// own API maps it (api/rpctypes.ToStatus: InvalidArgument with raftps'
// message for invalid input, ...). nil gives nil.
func ToStatus(ctx context.Context, err error) error {
	if err == nil {
		return nil
	}
	if errors.Is(err, errUnimplemented) {
		return status.Error(codes.Unimplemented, err.Error())
	}
	for _, e := range table {
		if errors.Is(err, e.err) {
			return e.st
		}
	}
	if cerr := ctx.Err(); cerr != nil {
		return status.FromContextError(cerr).Err()
	}
	if errors.Is(err, context.DeadlineExceeded) {
		return rpctypes.ErrGRPCTimeout
	}
	return raftpsrpc.ToStatus(err)
}
