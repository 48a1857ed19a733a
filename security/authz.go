package security

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"log/slog"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/peer"

	"github.com/raftps/raftps/api/errs"
	"github.com/raftps/raftps/api/rpctypes"
)

// An Authorizer checks each gRPC call against the role of the caller's
// certificate (verified by the TLS handshake against the cluster CA) by
// the RPC table (rpctable.go): every method any of the node's gRPC
// servers registers has one row naming the roles that may call it and a
// trainer's per-request limits:
//
//	node     everything (the internal APIs accept nothing else)
//	admin    everything a user can do on the client API
//	trainer  for the jobs its certificate names only: reads under
//	         /jobs/<job>/ (and keys outside /jobs/), its jobs' status and
//	         events, GetTask/TaskFinished/TaskFailed/Pull/Push/LeaveStep
//	         as the trainer its certificate names, Put/Delete of its own
//	         registration key /jobs/<job>/trainers/<name> and single
//	         keys of its jobs' torch stores /torch/store/<job>/, the leases it
//	         granted (TTL <= TrainerMaxLeaseTTL, at most
//	         TrainerMaxLeases); none of etcd's API
//	reader   an operator's read-only view: every read of every job
//	         (parameters, checkpoints, keys, leases), no write
//
// A refused call ends with PermissionDenied naming the method, the
// identity and what it lacks, before the handler runs, and a log line.
// With NodeOnly (the node-to-node port) every call needs the node role.
type Authorizer struct {
	// NodeOnly refuses every role but node (the node-to-node port).
	NodeOnly bool
	// Log gets one Warn line per refusal (nil: discard).
	Log *slog.Logger
}

// IdentityFromContext returns the identity of a gRPC call's verified
// client certificate; false if the call came without one (a server
// without TLS).
func IdentityFromContext(ctx context.Context) (Identity, bool) {
	c := certFromContext(ctx)
	if c == nil {
		return Identity{}, false
	}
	return IdentityOf(c), true
}

func certFromContext(ctx context.Context) *x509.Certificate {
	p, ok := peer.FromContext(ctx)
	if !ok {
		return nil
	}
	info, ok := p.AuthInfo.(credentials.TLSInfo)
	if !ok {
		return nil
	}
	return VerifiedCert(&info.State)
}

// VerifiedCert is the client certificate the TLS server verified on the
// connection st (the first certificate of the first verified chain), or
// nil: no TLS, no client certificate, or a server that does not verify
// them. Roles must come from it, never from st.PeerCertificates.
func VerifiedCert(st *tls.ConnectionState) *x509.Certificate {
	if st == nil || len(st.VerifiedChains) == 0 || len(st.VerifiedChains[0]) == 0 {
		return nil
	}
	return st.VerifiedChains[0][0]
}

// denied logs and returns the PermissionDenied of a refused call.
func (a *Authorizer) denied(ctx context.Context, method string, id Identity, why string) error {
	if a.Log != nil {
		addr := ""
		if p, ok := peer.FromContext(ctx); ok {
			addr = p.Addr.String()
		}
		a.Log.Warn("permission denied", "method", method, "name", id.Name, "role", id.Role, "peer", addr, "reason", why)
	}
	return rpctypes.ToStatus(fmt.Errorf("%s: %w to %s: %s", method, errs.ErrPermissionDenied, id, why))
}

// allow decides a call before its request is read and returns the
// method's rule (its trainer check applies to each request message).
func (a *Authorizer) allow(ctx context.Context, method string) (id Identity, r Rule, err error) {
	c := certFromContext(ctx)
	if c == nil {
		// The TLS handshake requires a certificate of the CA; no chain
		// here means the server runs without TLS (--insecure).
		return Identity{}, r, a.denied(ctx, method, Identity{Name: "unauthenticated"}, "no verified client certificate")
	}
	id = IdentityOf(c)
	if id.Role == RoleNode {
		return id, r, nil
	}
	if a.NodeOnly {
		return id, r, a.denied(ctx, method, id, "the node-to-node port serves cluster nodes only (role node)")
	}
	r, known := rpcs[method]
	switch {
	case !known:
		return id, r, a.denied(ctx, method, id, "a method not in the RPC table (security/rpctable.go): role node only")
	case r.allows(id.Role):
		return id, r, nil
	case len(r.Roles) == 0:
		return id, r, a.denied(ctx, method, id, "an internal API (role node only)")
	case id.Role == RoleReader:
		return id, r, a.denied(ctx, method, id, "the reader role is read-only")
	case id.Role == RoleTrainer:
		return id, r, a.denied(ctx, method, id, "not a trainer's method (admin only)")
	case id.Role == RoleAdmin:
		return id, r, a.denied(ctx, method, id, "not a client method (role node only)")
	}
	return id, r, a.denied(ctx, method, id, fmt.Sprintf("unknown role %q", id.Role))
}

// UnaryInterceptor checks unary calls, and filters a trainer's answer
// where the method's rule says (ListJobs: its jobs only).
func (a *Authorizer) UnaryInterceptor() grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		id, r, err := a.allow(ctx, info.FullMethod)
		if err != nil {
			return nil, err
		}
		check, filter := r.forTrainer(id)
		if check != nil {
			if why := check(id, req); why != "" {
				return nil, a.denied(ctx, info.FullMethod, id, why)
			}
		}
		resp, err := handler(ctx, req)
		if err == nil && filter != nil {
			filter(id, resp)
		}
		return resp, err
	}
}

// StreamInterceptor checks streams: the method at once, and each message
// the client sends when the role's limits depend on the request.
func (a *Authorizer) StreamInterceptor() grpc.StreamServerInterceptor {
	return func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
		id, r, err := a.allow(ss.Context(), info.FullMethod)
		if err != nil {
			return err
		}
		if check, _ := r.forTrainer(id); check != nil {
			ss = &checkedStream{ServerStream: ss, a: a, id: id, method: info.FullMethod, check: check}
		}
		return handler(srv, ss)
	}
}

type checkedStream struct {
	grpc.ServerStream
	a      *Authorizer
	id     Identity
	method string
	check  func(Identity, any) string
}

func (s *checkedStream) RecvMsg(m any) error {
	if err := s.ServerStream.RecvMsg(m); err != nil {
		return err
	}
	if why := s.check(s.id, m); why != "" {
		return s.a.denied(s.Context(), s.method, s.id, why)
	}
	return nil
}

// Roles lists the roles allowed a method, node first (a method not in the
// RPC table: node only).
func Roles(method string) []string {
	return append([]string{RoleNode}, rpcs[method].Roles...)
}
