package security

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/raftps/raftps/api/errs"
	"github.com/raftps/raftps/api/rpctypes"
)

// Per-role lease limits (the "limits" column of the RPC table): a trainer
// keeps its registration alive with a few short leases; admin and node
// have no limit but the store's (fsm.MaxLeaseTTL).
const (
	// TrainerMaxLeaseTTL is the largest TTL, in seconds, a trainer may
	// grant (its agent uses 5 s; the pserver lease is at most an hour and
	// is the node's).
	TrainerMaxLeaseTTL = 300
	// TrainerMaxLeases is how many leases one trainer certificate
	// (LeaseOwner) may hold at once; a grant past it is ResourceExhausted.
	TrainerMaxLeases = 32
)

// Owner is the lease owner string of the identity, recorded in the
// replicated lease state: "<role>/<name>", and for a trainer "/" and its
// jobs sorted, comma-separated ("trainer/ta/job-a"). Two certificates
// with the same name, role and jobs own the same leases.
func (id Identity) Owner() string {
	o := id.Role + "/" + id.Name
	if id.Role == RoleTrainer {
		jobs := slices.Clone(id.Jobs)
		slices.Sort(jobs)
		o += "/" + strings.Join(slices.Compact(jobs), ",")
	}
	return o
}

// LeaseOwner is the owner to record for a lease granted by the caller of
// ctx: Identity.Owner of its verified certificate, or "" without one (an
// in-process caller, or a node run with --insecure).
func LeaseOwner(ctx context.Context) string {
	id, ok := IdentityFromContext(ctx)
	if !ok {
		return ""
	}
	return id.Owner()
}

// LeaseOwnerLimit is LeaseGrantRequest.owner_limit for the caller of ctx:
// TrainerMaxLeases for a trainer, 0 (no limit) for every other caller.
func LeaseOwnerLimit(ctx context.Context) int32 {
	if id, ok := IdentityFromContext(ctx); ok && id.Role == RoleTrainer {
		return TrainerMaxLeases
	}
	return 0
}

// CheckLease decides whether the caller of ctx may act on lease: keep it
// alive or revoke it (read false), or read its TTL and keys (read true).
// Node and admin may act on any lease, a reader may read any, a trainer
// only those its certificate's Owner granted; a lease with no owner (a
// node's own, or one granted before owners were recorded) is node's and
// admin's only. owner looks the lease's owner up (called only for a
// trainer or a reader's write; its error, such as fsm.ErrLeaseNotFound,
// is returned as is). A caller without a verified certificate
// (in-process, or --insecure) passes: the Authorizer has refused those on
// a TLS port already. A refusal is PermissionDenied naming the lease and
// the caller, never the owner.
func CheckLease(ctx context.Context, lease int64, read bool, owner func() (string, error)) error {
	id, ok := IdentityFromContext(ctx)
	if !ok {
		return nil
	}
	switch {
	case id.Role == RoleNode || id.Role == RoleAdmin:
		return nil
	case id.Role == RoleReader && read:
		return nil
	case id.Role == RoleTrainer:
		o, err := owner()
		if err != nil {
			return err
		}
		if o != "" && o == id.Owner() {
			return nil
		}
	}
	return rpctypes.ToStatus(fmt.Errorf("lease %d: %w to %s: not a lease its certificate granted", lease, errs.ErrPermissionDenied, id))
}
