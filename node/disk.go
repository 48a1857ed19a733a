package node

import (
	"context"

	"google.golang.org/grpc"

	pb "github.com/raftps/raftps/api/raftpspb"
)

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
