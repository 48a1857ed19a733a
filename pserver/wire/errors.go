package wire

import (
	"context"
	"errors"
	"fmt"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Sentinel errors. Every error a Slot, Server or Client returns wraps one of
// these (check with errors.Is) and also carries a gRPC status (status.Code
// works on it directly); the mapping is the one table in codeOf.
var (
	// ErrFenced: the slot lost its lease (Fence or Close was called). The
	// client must re-resolve the slot's owner. gRPC Unavailable.
	ErrFenced = errors.New("pserver: slot lost its lease; re-resolve")
	// ErrNotHosted: this node does not host the (job, slot). gRPC Unavailable.
	ErrNotHosted = errors.New("pserver: slot not hosted here; re-resolve")
	// ErrInvalid: a request names an unknown parameter, has a wrong shape or
	// length, a block or row out of range or in another slot, or a non-finite
	// gradient. Nothing was applied. gRPC InvalidArgument.
	ErrInvalid = errors.New("pserver: invalid argument")
	// ErrStale: a push was computed on a version too old (async staleness
	// bound) or for another sync step. The trainer must re-pull.
	// gRPC FailedPrecondition.
	ErrStale = errors.New("pserver: stale push; re-pull")
	// ErrBadSpec: the job spec cannot be served (bad shapes, duplicate
	// names, unknown optimizer). gRPC InvalidArgument.
	ErrBadSpec = errors.New("pserver: bad job spec")
	// ErrCorrupt: a vshard blob is truncated, corrupt or of an unknown format.
	ErrCorrupt = errors.New("pserver: corrupt vshard blob")
	// ErrNewerFormat: a vshard blob was written by a newer raftps, in a
	// format version this build does not read (a mixed-version cluster:
	// upgrade this node). Not ErrCorrupt: the blob may be sound.
	ErrNewerFormat = errors.New("pserver: vshard blob written by a newer raftps")
	// ErrIncompatible: a vshard blob does not fit the job spec (other
	// optimizer, shapes, block size or number of virtual shards).
	ErrIncompatible = errors.New("pserver: vshard blob does not match job spec")
	// ErrMissingVShard: RestoreSlot was not given a blob for a vshard the slot owns.
	ErrMissingVShard = errors.New("pserver: missing vshard blob")
)

// codeOf is the single sentinel -> gRPC code table.
func codeOf(err error) codes.Code {
	switch {
	case errors.Is(err, ErrFenced), errors.Is(err, ErrNotHosted):
		return codes.Unavailable
	case errors.Is(err, ErrInvalid), errors.Is(err, ErrBadSpec):
		return codes.InvalidArgument
	case errors.Is(err, ErrStale), errors.Is(err, ErrNewerFormat):
		return codes.FailedPrecondition
	case errors.Is(err, ErrCorrupt), errors.Is(err, ErrIncompatible), errors.Is(err, ErrMissingVShard):
		return codes.DataLoss
	}
	return codes.Unknown
}

// Error is the error type of this package: a sentinel (Unwrap) plus detail,
// rendered to gRPC by GRPCStatus.
type Error struct {
	Sentinel error
	Detail   string
}

func (e *Error) Error() string {
	if e.Detail == "" {
		return e.Sentinel.Error()
	}
	return e.Sentinel.Error() + ": " + e.Detail
}

// Unwrap returns the sentinel.
func (e *Error) Unwrap() error { return e.Sentinel }

// GRPCStatus makes status.Code / status.FromError see the mapped code.
func (e *Error) GRPCStatus() *status.Status { return status.New(codeOf(e.Sentinel), e.Error()) }

// Errorf returns an *Error of sentinel with a formatted detail.
func Errorf(sentinel error, format string, args ...any) error {
	return &Error{Sentinel: sentinel, Detail: fmt.Sprintf(format, args...)}
}

// ToGRPC converts any error to one with a gRPC status, keeping context errors.
func ToGRPC(err error) error {
	if err == nil {
		return nil
	}
	if _, ok := status.FromError(err); ok {
		return err
	}
	if errors.Is(err, context.Canceled) {
		return status.Error(codes.Canceled, err.Error())
	}
	if errors.Is(err, context.DeadlineExceeded) {
		return status.Error(codes.DeadlineExceeded, err.Error())
	}
	return status.Error(codeOf(err), err.Error())
}
