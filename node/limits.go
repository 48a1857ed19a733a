package node

import (
	"context"
	"fmt"

	etcdpb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"google.golang.org/grpc"

	pb "github.com/raftps/raftps/api/raftpspb"
	"github.com/raftps/raftps/api/rpctypes"
	"github.com/raftps/raftps/fsm"
	"github.com/raftps/raftps/security"
)

// MaxRoleValueSize is the largest value, in bytes, a caller whose
// certificate's role is neither admin nor node may write in a put or in a
// txn's put, on raftps's and etcd's KV alike (64 KiB: a trainer writes
// only its small registration records). Larger ones are refused with
// InvalidArgument before the write reaches the store. Admins and nodes
// keep fsm.MaxValueSize (1.5 MiB).
const MaxRoleValueSize = 64 << 10

// roleValueLimit is the client port's interceptor for MaxRoleValueSize.
// Without TLS there are no roles and it lets everything through.
func roleValueLimit(ctx context.Context, req any, _ *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	id, ok := security.IdentityFromContext(ctx)
	if !ok || id.Role == security.RoleAdmin || id.Role == security.RoleNode {
		return handler(ctx, req)
	}
	if n, key := largestValue(req); n > MaxRoleValueSize {
		return nil, rpctypes.ToStatus(fmt.Errorf("%w: value of %d bytes for key %q: role %s may write values of at most %d bytes",
			fsm.ErrTooLarge, n, key, id.Role, MaxRoleValueSize))
	}
	return handler(ctx, req)
}

// largestValue returns the size and key of the largest value req writes
// (0 for requests that write none).
func largestValue(req any) (int, []byte) {
	var n int
	var key []byte
	see := func(k, v []byte) {
		if len(v) > n {
			n, key = len(v), k
		}
	}
	switch r := req.(type) {
	case *pb.PutRequest:
		see(r.GetKey(), r.GetValue())
	case *pb.TxnRequest:
		for _, ops := range [][]*pb.RequestOp{r.GetSuccess(), r.GetFailure()} {
			for _, op := range ops {
				if p := op.GetRequestPut(); p != nil {
					see(p.GetKey(), p.GetValue())
				}
			}
		}
	case *etcdpb.PutRequest:
		see(r.GetKey(), r.GetValue())
	case *etcdpb.TxnRequest:
		for _, ops := range [][]*etcdpb.RequestOp{r.GetSuccess(), r.GetFailure()} {
			for _, op := range ops {
				if p := op.GetRequestPut(); p != nil {
					see(p.GetKey(), p.GetValue())
				}
			}
		}
	}
	return n, key
}
