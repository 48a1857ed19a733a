package security

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"log/slog"
	"slices"
	"strings"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"

	pb "github.com/raftps/raftps/api/raftpspb"
	"github.com/raftps/raftps/schema"
)

// An Authorizer checks each gRPC call against the role of the caller's
// certificate (verified by the TLS handshake against the cluster CA):
//
//	node     everything (the internal APIs accept nothing else)
//	admin    everything a user can do on the client API
//	trainer  reads (KV Range, Watch, job and checkpoint reading, status);
//	         GetTask, TaskFinished, TaskFailed, Pull, Push, LeaveStep for the
//	         jobs its certificate names; Put/Delete of its own registration
//	         keys /jobs/<job>/trainers/<name>[-...] of those jobs; lease
//	         grant and keep-alive (not revoke: it deletes a lease's keys)
//	reader   reads only
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

// access levels of a method
type access int

const (
	accessNode    access = iota // internal: node only
	accessAdmin                 // writes: admin (and node)
	accessTrainer               // trainer for its jobs (request-checked), admin, node
	accessRead                  // every role
)

// methods maps a full method or a service (prefix ending in "/") to its
// access; a method not in the table needs admin.
var methods = map[string]access{
	"/raftps.v1.Internal/":               accessNode,
	"/raftps.v1.CheckpointStore/PutBlob": accessNode,
	// Replica deletion is the checkpoint manager's (node) and the CLI's (admin).
	"/raftps.v1.CheckpointStore/DeleteVersions": accessAdmin,
	"/raftps.v1.CheckpointStore/GetBlob":        accessRead,
	"/raftps.v1.CheckpointStore/GetManifest":    accessRead,
	"/raftps.v1.CheckpointStore/VerifyBlob":     accessRead,

	"/raftps.v1.KV/Range":       accessRead,
	"/raftps.v1.KV/Put":         accessTrainer,
	"/raftps.v1.KV/DeleteRange": accessTrainer,
	"/raftps.v1.KV/Txn":         accessTrainer,
	"/raftps.v1.Watch/":         accessRead,
	"/raftps.v1.Cluster/":       accessRead,
	// Membership changes are writes.
	"/raftps.v1.Cluster/MemberAdd":     accessAdmin,
	"/raftps.v1.Cluster/MemberPromote": accessAdmin,
	"/raftps.v1.Cluster/MemberRemove":  accessAdmin,

	"/raftps.v1.Lease/LeaseGrant": accessTrainer,
	// Revoking deletes every key of the lease: a trainer lets its own
	// expire rather than be able to revoke another's.
	"/raftps.v1.Lease/LeaseRevoke":     accessAdmin,
	"/raftps.v1.Lease/LeaseKeepAlive":  accessTrainer,
	"/raftps.v1.Lease/LeaseTimeToLive": accessRead,

	"/raftps.v1.Master/GetJob":       accessRead,
	"/raftps.v1.Master/ListJobs":     accessRead,
	"/raftps.v1.Master/WatchJob":     accessRead,
	"/raftps.v1.Master/GetTask":      accessTrainer,
	"/raftps.v1.Master/TaskFinished": accessTrainer,
	"/raftps.v1.Master/TaskFailed":   accessTrainer,

	"/raftps.v1.PServer/": accessTrainer,

	// etcd's API: reads for every role, the rest admin.
	"/etcdserverpb.KV/Range":                accessRead,
	"/etcdserverpb.Watch/":                  accessRead,
	"/etcdserverpb.Lease/LeaseTimeToLive":   accessRead,
	"/etcdserverpb.Lease/LeaseLeases":       accessRead,
	"/etcdserverpb.Cluster/MemberList":      accessRead,
	"/etcdserverpb.Maintenance/Status":      accessRead,
	"/etcdserverpb.Maintenance/HashKV":      accessRead,
	"/etcdserverpb.Maintenance/Hash":        accessRead,
	"/etcdserverpb.Maintenance/AlarmList":   accessRead,
	"/raftps.v1.Master/SubmitJob":           accessAdmin,
	"/raftps.v1.Master/CancelJob":           accessAdmin,
	"/raftps.v1.Master/DeleteJob":           accessAdmin,
	"/etcdserverpb.Maintenance/Snapshot":    accessAdmin,
	"/etcdserverpb.Maintenance/Defragment":  accessAdmin,
	"/etcdserverpb.Maintenance/MoveLeader":  accessAdmin,
	"/etcdserverpb.Cluster/MemberAdd":       accessAdmin,
	"/etcdserverpb.Cluster/MemberRemove":    accessAdmin,
	"/etcdserverpb.Cluster/MemberPromote":   accessAdmin,
	"/etcdserverpb.Cluster/MemberUpdate":    accessAdmin,
	"/etcdserverpb.KV/Put":                  accessAdmin,
	"/etcdserverpb.KV/DeleteRange":          accessAdmin,
	"/etcdserverpb.KV/Txn":                  accessAdmin,
	"/etcdserverpb.KV/Compact":              accessAdmin,
	"/etcdserverpb.Lease/LeaseGrant":        accessAdmin,
	"/etcdserverpb.Lease/LeaseRevoke":       accessAdmin,
	"/etcdserverpb.Lease/LeaseKeepAlive":    accessAdmin,
	"/etcdserverpb.Maintenance/Downgrade":   accessAdmin,
	"/etcdserverpb.Maintenance/Alarm":       accessAdmin,
	"/etcdserverpb.Maintenance/AlarmDisarm": accessAdmin,
}

func accessOf(method string) access {
	if a, ok := methods[method]; ok {
		return a
	}
	svc, _, _ := strings.Cut(strings.TrimPrefix(method, "/"), "/")
	if a, ok := methods["/"+svc+"/"]; ok {
		return a
	}
	return accessAdmin
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
	return status.Errorf(codes.PermissionDenied, "%s: permission denied to %s: %s", method, id, why)
}

// allow decides a call before its request is read; check (true) asks
// for each request message to be checked with checkRequest.
func (a *Authorizer) allow(ctx context.Context, method string) (id Identity, check bool, err error) {
	c := certFromContext(ctx)
	if c == nil {
		// The TLS handshake requires a certificate of the CA; no chain
		// here means the server runs without TLS (--insecure).
		return Identity{}, false, a.denied(ctx, method, Identity{Name: "unauthenticated"}, "no verified client certificate")
	}
	id = IdentityOf(c)
	if id.Role == RoleNode {
		return id, false, nil
	}
	if a.NodeOnly {
		return id, false, a.denied(ctx, method, id, "the node-to-node port serves cluster nodes only (role node)")
	}
	acc := accessOf(method)
	switch {
	case acc == accessNode:
		return id, false, a.denied(ctx, method, id, "an internal API (role node only)")
	case id.Role == RoleAdmin:
		return id, false, nil
	case acc == accessRead && (id.Role == RoleReader || id.Role == RoleTrainer):
		return id, false, nil
	case acc == accessTrainer && id.Role == RoleTrainer:
		return id, true, nil
	case id.Role == RoleReader:
		return id, false, a.denied(ctx, method, id, "the reader role is read-only")
	case id.Role == RoleTrainer:
		return id, false, a.denied(ctx, method, id, "not a trainer's method (admin only)")
	}
	return id, false, a.denied(ctx, method, id, fmt.Sprintf("unknown role %q", id.Role))
}

// jobRequest is every request that names its job (pserver, task API).
type jobRequest interface{ GetJob() string }

// checkRequest applies a trainer's per-request limits: the job must be
// one its certificate names, and its KV writes must be its own
// registration keys.
func checkRequest(id Identity, req any) string {
	switch r := req.(type) {
	case *pb.PutRequest:
		return trainerKey(id, r.GetKey(), nil)
	case *pb.DeleteRangeRequest:
		return trainerKey(id, r.GetKey(), r.GetRangeEnd())
	case *pb.TxnRequest:
		for _, ops := range [][]*pb.RequestOp{r.GetSuccess(), r.GetFailure()} {
			for _, op := range ops {
				if p := op.GetRequestPut(); p != nil {
					if why := trainerKey(id, p.GetKey(), nil); why != "" {
						return why
					}
				}
				if d := op.GetRequestDeleteRange(); d != nil {
					if why := trainerKey(id, d.GetKey(), d.GetRangeEnd()); why != "" {
						return why
					}
				}
			}
		}
		return ""
	case jobRequest:
		if !id.HasJob(r.GetJob()) {
			return fmt.Sprintf("job %q is not one of the certificate's jobs %v", r.GetJob(), id.Jobs)
		}
		return ""
	case *pb.LeaseGrantRequest, *pb.LeaseKeepAliveRequest:
		return ""
	}
	return fmt.Sprintf("request %T is not allowed to a trainer", req)
}

// trainerKey allows a single key /jobs/<job>/trainers/<name>[-suffix] of
// one of the identity's jobs.
func trainerKey(id Identity, key, end []byte) string {
	if len(end) > 0 {
		return "a trainer may delete single keys only (no range)"
	}
	job, kind, tid, ok := schema.ParseJobKey(string(key))
	if ok && kind == schema.KindTrainer && id.HasJob(job) && (tid == id.Name || strings.HasPrefix(tid, id.Name+"-")) {
		return ""
	}
	return fmt.Sprintf("key %q is not one of its registration keys (%s<name>[-...] of its jobs %v)",
		key, schema.TrainerPrefix("<job>"), id.Jobs)
}

// UnaryInterceptor checks unary calls.
func (a *Authorizer) UnaryInterceptor() grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		id, check, err := a.allow(ctx, info.FullMethod)
		if err != nil {
			return nil, err
		}
		if check {
			if why := checkRequest(id, req); why != "" {
				return nil, a.denied(ctx, info.FullMethod, id, why)
			}
		}
		return handler(ctx, req)
	}
}

// StreamInterceptor checks streams: the method at once, and each message
// the client sends when the role's limits depend on the request.
func (a *Authorizer) StreamInterceptor() grpc.StreamServerInterceptor {
	return func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
		id, check, err := a.allow(ss.Context(), info.FullMethod)
		if err != nil {
			return err
		}
		if check {
			ss = &checkedStream{ServerStream: ss, a: a, id: id, method: info.FullMethod}
		}
		return handler(srv, ss)
	}
}

type checkedStream struct {
	grpc.ServerStream
	a      *Authorizer
	id     Identity
	method string
}

func (s *checkedStream) RecvMsg(m any) error {
	if err := s.ServerStream.RecvMsg(m); err != nil {
		return err
	}
	if why := checkRequest(s.id, m); why != "" {
		return s.a.denied(s.Context(), s.method, s.id, why)
	}
	return nil
}

// Roles lists the roles allowed a method (for documentation and tests).
func Roles(method string) []string {
	switch accessOf(method) {
	case accessNode:
		return []string{RoleNode}
	case accessAdmin:
		return []string{RoleNode, RoleAdmin}
	case accessTrainer:
		return []string{RoleNode, RoleAdmin, RoleTrainer}
	}
	return slices.Clone([]string{RoleNode, RoleAdmin, RoleTrainer, RoleReader})
}
