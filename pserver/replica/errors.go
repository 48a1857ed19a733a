package replica

import (
	"errors"
	"fmt"
	"strings"

	"github.com/raftps/raftps/api/errs"
	"github.com/raftps/raftps/api/rpctypes"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Sentinel errors; every error of this package wraps one (errors.Is).
// They are api/errs's, so their gRPC status comes from the one table
// (api/rpctypes).
var (
	// ErrStaleEpoch: the sender is no longer the slot's primary (see errs).
	ErrStaleEpoch = errs.ErrStaleEpoch
	// ErrWrongSlot: the node holds no backup of the named slot.
	ErrWrongSlot = errs.ErrNotBackup
	// ErrTooFarAhead: a request's seq is more than MaxPending beyond the
	// backup's applied seq.
	ErrTooFarAhead = errs.ErrTooFarAhead
	// ErrNotAcked: a backup's ack does not cover the request.
	ErrNotAcked = errs.ErrNotAcked
)

// Error is a sentinel with detail, rendered to gRPC by GRPCStatus.
type Error struct {
	Sentinel error
	Detail   string
}

func (e *Error) Error() string { return e.Sentinel.Error() + ": " + e.Detail }

func (e *Error) Unwrap() error { return e.Sentinel }

// GRPCStatus is the error's gRPC status, from rpctypes' table.
func (e *Error) GRPCStatus() *status.Status {
	st, _ := status.FromError(rpctypes.ToStatus(fmt.Errorf("%w: %s", e.Sentinel, e.Detail)))
	return st
}

func errorf(sentinel error, format string, args ...any) error {
	return &Error{Sentinel: sentinel, Detail: fmt.Sprintf(format, args...)}
}

// BackupError is Replicator.Replicate's failure: the backups (by name, in
// name order) that did not acknowledge the update at Epoch, and why. The
// update is not acknowledged: the caller either drops Failed from the
// in-sync set with a Raft commit that compares Epoch (and bumps it), or,
// if Deposed, stops serving the slot. errors.Is looks into every cause.
type BackupError struct {
	Epoch  int64
	Seq    int64
	Failed []string
	Errs   []error // Errs[i] is Failed[i]'s
}

func (e *BackupError) Error() string {
	parts := make([]string, len(e.Failed))
	for i, n := range e.Failed {
		parts[i] = fmt.Sprintf("%s: %v", n, e.Errs[i])
	}
	return fmt.Sprintf("replica: update %d at epoch %d not acknowledged by %d backup(s): %s",
		e.Seq, e.Epoch, len(e.Failed), strings.Join(parts, "; "))
}

func (e *BackupError) Unwrap() []error { return e.Errs }

// Deposed reports whether some backup knows a newer epoch: the primary was
// replaced and must not ask to drop anyone.
func (e *BackupError) Deposed() bool { return errors.Is(e, ErrStaleEpoch) }

// GRPCStatus is FailedPrecondition if the primary was deposed, else
// Unavailable (the push may be retried once the in-sync set changed).
func (e *BackupError) GRPCStatus() *status.Status {
	if e.Deposed() {
		return status.New(codes.FailedPrecondition, e.Error())
	}
	return status.New(codes.Unavailable, e.Error())
}
