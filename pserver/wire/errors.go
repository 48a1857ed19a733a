package wire

import (
	"fmt"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/raftps/raftps/api/errs"
	"github.com/raftps/raftps/api/rpctypes"
)

// Sentinel errors: api/errs's, under the pserver's names (the values are
// identical, so errors.Is works with either). Every error a Slot, Server or
// Client returns wraps one of these (check with errors.Is) and also carries
// a gRPC status (status.Code works on it directly); the codes are
// api/rpctypes' one table.
var (
	// ErrFenced: the slot lost its lease (Fence or Close was called). The
	// client must re-resolve the slot's owner. gRPC Unavailable.
	ErrFenced = errs.ErrSlotFenced
	// ErrNotHosted: this node does not host the (job, slot). gRPC Unavailable.
	ErrNotHosted = errs.ErrSlotNotHosted
	// ErrEpoch: the request's replica epoch is not the slot's (it serves
	// under another, or was deposed): re-resolve the slot and retry, a push
	// with the same push id. gRPC FailedPrecondition.
	ErrEpoch = errs.ErrSlotEpoch
	// ErrInvalid: a request names an unknown parameter, has a wrong shape or
	// length, a block or row out of range or in another slot, or a non-finite
	// gradient. Nothing was applied. gRPC InvalidArgument. (errs.ErrInvalid,
	// the one invalid-argument sentinel.)
	ErrInvalid = errs.ErrInvalid
	// ErrStale: a push was computed on a version too old (async staleness
	// bound) or for another sync step. The trainer must re-pull.
	// gRPC FailedPrecondition.
	ErrStale = errs.ErrStalePush
	// ErrBadSpec: the job spec cannot be served (bad shapes, duplicate
	// names, unknown optimizer). gRPC InvalidArgument.
	ErrBadSpec = errs.ErrBadSpec
	// ErrCorrupt: a vshard blob is truncated, corrupt or of an unknown format.
	ErrCorrupt = errs.ErrVShardCorrupt
	// ErrNewerFormat: a vshard blob was written by a newer raftps, in a
	// format version this build does not read (a mixed-version cluster:
	// upgrade this node). Not ErrCorrupt: the blob may be sound.
	ErrNewerFormat = errs.ErrNewerFormat
	// ErrIncompatible: a vshard blob does not fit the job spec (other
	// optimizer, shapes, block size or number of virtual shards).
	ErrIncompatible = errs.ErrIncompatible
	// ErrMissingVShard: RestoreSlot was not given a blob for a vshard the slot owns.
	ErrMissingVShard = errs.ErrMissingVShard
)

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

// GRPCStatus makes status.Code / status.FromError see the sentinel's code
// (api/rpctypes' table) and its ErrorInfo reason.
func (e *Error) GRPCStatus() *status.Status {
	// The sentinel is wrapped in a plain error, so that ToStatus never
	// asks this method again.
	return status.Convert(rpctypes.ToStatus(fmt.Errorf("%w%s", e.Sentinel, e.Error()[len(e.Sentinel.Error()):])))
}

// Errorf returns an *Error of sentinel with a formatted detail.
func Errorf(sentinel error, format string, args ...any) error {
	return &Error{Sentinel: sentinel, Detail: fmt.Sprintf(format, args...)}
}

// ToGRPC converts any error to one with a gRPC status: an error that
// carries one already (an *Error, a forwarded status) is returned as is, so
// errors.Is still sees its sentinel in process; another takes the code of
// the sentinel it wraps (api/rpctypes' table: context errors too); an
// error the table does not name stays codes.Unknown.
func ToGRPC(err error) error {
	if err == nil {
		return nil
	}
	if _, ok := status.FromError(err); ok {
		return err
	}
	if rpctypes.Code(err) == codes.Unknown {
		return status.Error(codes.Unknown, err.Error())
	}
	return rpctypes.ToStatus(err)
}
