package etcdapi

import (
	"context"

	etcdpb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"google.golang.org/grpc"
)

// authHint is what raftps does instead of etcd's users and roles.
const authHint = "raftps has no etcd users or roles: clients authenticate with mutual TLS certificates and are authorised by the role and jobs their certificate names (raftps' security package)"

// authDesc is etcd's Auth service with every method answering
// Unimplemented (authHint), so that etcdctl's `auth`, `user` and `role`
// commands and a client configured with a username get an answer that
// says what to use instead, not gRPC's "unknown service".
var authDesc = func() grpc.ServiceDesc {
	d := etcdpb.Auth_ServiceDesc
	d.HandlerType = (*any)(nil)
	d.Methods = make([]grpc.MethodDesc, len(etcdpb.Auth_ServiceDesc.Methods))
	for i, m := range etcdpb.Auth_ServiceDesc.Methods {
		full := "/" + d.ServiceName + "/" + m.MethodName
		d.Methods[i] = grpc.MethodDesc{MethodName: m.MethodName, Handler: func(srv any, ctx context.Context, dec func(any) error, icpt grpc.UnaryServerInterceptor) (any, error) {
			h := func(ctx context.Context, _ any) (any, error) {
				return nil, ToStatus(ctx, unimplemented("%s: %s", m.MethodName, authHint))
			}
			if icpt == nil {
				return h(ctx, nil)
			}
			return icpt(ctx, nil, &grpc.UnaryServerInfo{Server: srv, FullMethod: full}, h)
		}}
	}
	return d
}()
