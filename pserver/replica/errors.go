package replica

import (
	"errors"
	"fmt"
	"strings"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Sentinel errors; every error of this package wraps one (errors.Is) and
// carries its gRPC status (codeOf).
var (
	// ErrStaleEpoch: a request's epoch is older than the one the backup
	// knows, or an ack names a newer epoch than the primary's: the sender
	// is no longer the slot's primary and must stop serving it (resolve
	// the slot again). gRPC FailedPrecondition.
	ErrStaleEpoch = errors.New("replica: stale epoch; the sender is no longer the primary")
	// ErrWrongSlot: a request names a job or slot the backup does not
	// hold. gRPC FailedPrecondition.
	ErrWrongSlot = errors.New("replica: not a backup of this slot")
	// ErrTooFarAhead: a request's seq is more than MaxPending beyond the
	// backup's applied seq. gRPC ResourceExhausted.
	ErrTooFarAhead = errors.New("replica: request too far ahead of the applied sequence")
	// ErrNotAcked: a backup's ack does not cover the request (a lower
	// applied seq). gRPC Unavailable.
	ErrNotAcked = errors.New("replica: backup did not acknowledge the update")
)

// codeOf is the sentinel -> gRPC code table.
func codeOf(err error) codes.Code {
	switch {
	case errors.Is(err, ErrStaleEpoch), errors.Is(err, ErrWrongSlot):
		return codes.FailedPrecondition
	case errors.Is(err, ErrTooFarAhead):
		return codes.ResourceExhausted
	case errors.Is(err, ErrNotAcked):
		return codes.Unavailable
	}
	return codes.Unknown
}

// Error is a sentinel with detail, rendered to gRPC by GRPCStatus.
type Error struct {
	Sentinel error
	Detail   string
}

func (e *Error) Error() string { return e.Sentinel.Error() + ": " + e.Detail }

func (e *Error) Unwrap() error { return e.Sentinel }

// GRPCStatus is the error's gRPC status (the code of its sentinel).
func (e *Error) GRPCStatus() *status.Status { return status.New(codeOf(e.Sentinel), e.Error()) }

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
