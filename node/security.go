package node

import (
	"google.golang.org/grpc"

	"github.com/raftps/raftps/security"
)

// serverSecurity returns the server options of the client, node-to-node
// and pserver gRPC servers: with TLS, mutual TLS and a per-method
// authorisation of the caller's role (security.Authorizer; the
// node-to-node port serves the node role only); without, none.
func (n *Node) serverSecurity() (client, peer, pserver []grpc.ServerOption) {
	if n.tls == nil {
		return nil, nil, nil
	}
	log := n.log.With("component", "authz")
	opts := func(a *security.Authorizer) []grpc.ServerOption {
		return []grpc.ServerOption{grpc.Creds(n.tls.ServerCredentials()),
			grpc.ChainUnaryInterceptor(a.UnaryInterceptor()), grpc.ChainStreamInterceptor(a.StreamInterceptor())}
	}
	user := &security.Authorizer{Log: log}
	return opts(user), opts(&security.Authorizer{NodeOnly: true, Log: log}), opts(user)
}

// TLS reports whether the node runs mutual TLS (false: --insecure).
func (n *Node) TLS() bool { return n.tls != nil }
