package rpctypes

import (
	"context"
	"errors"
	"strings"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/raftps/raftps/api/errs"
)

// Errors of the store layer (package raftstore re-exports them).
var (
	// ErrNotLeader: the call needs the leader and the server is not it (or
	// no leader was known before the context ended; then it also wraps
	// ErrNoLeader). Nothing was applied: the call may go to the next leader.
	ErrNotLeader = errors.New("raftstore: not leader")
	// ErrNoLeader: the cluster has no known leader.
	ErrNoLeader = errors.New("raftstore: no leader")
	// ErrNotOpen: the store is not open (never opened, or closed).
	ErrNotOpen = errors.New("raftstore: not open")
	// ErrTooManyWatchers: a watch past the store's caps on watchers (per
	// node, per connection) or an etcd Watch stream's.
	ErrTooManyWatchers = errors.New("raftstore: too many watchers")
)

// Domain is the ErrorInfo domain of raftps' statuses.
const Domain = "raftps"

// entry is one row of the table: a sentinel, its gRPC code and the reason
// that names it in a status's ErrorInfo.
type entry struct {
	err    error
	code   codes.Code
	reason string
}

// table is the one mapping, consulted in order by ToStatus and Code (the
// first sentinel the error wraps wins) and by reason in FromStatus.
// Context errors come first: a call that waited for a leader until its
// deadline reports DeadlineExceeded.
var table = []entry{
	{context.DeadlineExceeded, codes.DeadlineExceeded, "DEADLINE_EXCEEDED"},
	{context.Canceled, codes.Canceled, "CANCELED"},
	{ErrNotLeader, codes.Unavailable, "NOT_LEADER"},
	{ErrNoLeader, codes.Unavailable, "NO_LEADER"},
	{ErrNotOpen, codes.Unavailable, "NOT_OPEN"},
	{ErrTooManyWatchers, codes.ResourceExhausted, "TOO_MANY_WATCHERS"},
	{errs.ErrUnknownCommand, codes.InvalidArgument, "UNKNOWN_COMMAND"},
	{errs.ErrMalformed, codes.InvalidArgument, "MALFORMED"},
	{errs.ErrLeaseTTLTooLarge, codes.InvalidArgument, "LEASE_TTL_TOO_LARGE"},
	{errs.ErrInvalid, codes.InvalidArgument, "INVALID_ARGUMENT"},
	{errs.ErrTooLarge, codes.InvalidArgument, "TOO_LARGE"},
	{errs.ErrQuotaExceeded, codes.ResourceExhausted, "QUOTA_EXCEEDED"},
	{errs.ErrNoSpace, codes.ResourceExhausted, "NOSPACE"},
	{errs.ErrLeaseNotFound, codes.NotFound, "LEASE_NOT_FOUND"},
	{errs.ErrLeaseExists, codes.AlreadyExists, "LEASE_EXISTS"},
	{errs.ErrTooManyLeases, codes.ResourceExhausted, "TOO_MANY_LEASES"},
	{errs.ErrCompacted, codes.OutOfRange, "COMPACTED"},
	{errs.ErrFutureRevision, codes.OutOfRange, "FUTURE_REVISION"},
	{errs.ErrNotFound, codes.NotFound, "NOT_FOUND"},
	{errs.ErrExists, codes.AlreadyExists, "ALREADY_EXISTS"},
	{errs.ErrFailedPrecondition, codes.FailedPrecondition, "FAILED_PRECONDITION"},
	{errs.ErrNoCapacity, codes.ResourceExhausted, "NO_CAPACITY"},
	{errs.ErrSlotFenced, codes.Unavailable, "SLOT_FENCED"},
	{errs.ErrSlotNotHosted, codes.Unavailable, "SLOT_NOT_HOSTED"},
	{errs.ErrSlotEpoch, codes.FailedPrecondition, "SLOT_EPOCH"},
	{errs.ErrStalePush, codes.FailedPrecondition, "STALE_PUSH"},
	{errs.ErrBadSpec, codes.InvalidArgument, "BAD_SPEC"},
	{errs.ErrNewerFormat, codes.FailedPrecondition, "NEWER_FORMAT"},
	{errs.ErrVShardCorrupt, codes.DataLoss, "VSHARD_CORRUPT"},
	{errs.ErrIncompatible, codes.DataLoss, "INCOMPATIBLE"},
	{errs.ErrMissingVShard, codes.DataLoss, "MISSING_VSHARD"},
	{errs.ErrBlobNotFound, codes.NotFound, "BLOB_NOT_FOUND"},
	{errs.ErrBlobCorrupt, codes.DataLoss, "BLOB_CORRUPT"},
	{errs.ErrCheckpointFenced, codes.FailedPrecondition, "CHECKPOINT_FENCED"},
	{errs.ErrStaleCheckpoint, codes.FailedPrecondition, "STALE_CHECKPOINT"},
	{errs.ErrStoreClosed, codes.Unavailable, "STORE_CLOSED"},
	{errs.ErrManifestConflict, codes.AlreadyExists, "MANIFEST_CONFLICT"},
	{errs.ErrTooManyStreams, codes.ResourceExhausted, "TOO_MANY_STREAMS"},
	{errs.ErrNoPointer, codes.FailedPrecondition, "NO_POINTER"},
	{errs.ErrReplicaUnreachable, codes.Unavailable, "REPLICA_UNREACHABLE"},
	{errs.ErrStaleEpoch, codes.FailedPrecondition, "STALE_EPOCH"},
	{errs.ErrNotBackup, codes.FailedPrecondition, "NOT_BACKUP"},
	{errs.ErrTooFarAhead, codes.ResourceExhausted, "TOO_FAR_AHEAD"},
	{errs.ErrNotAcked, codes.Unavailable, "NOT_ACKED"},
	{errs.ErrPermissionDenied, codes.PermissionDenied, "PERMISSION_DENIED"},
	{errs.ErrWrongPort, codes.Unimplemented, "WRONG_PORT"},
	{errs.ErrGossipEncryptionOff, codes.FailedPrecondition, "GOSSIP_ENCRYPTION_OFF"},
	{errs.ErrNeedsMutualTLS, codes.FailedPrecondition, "NEEDS_MUTUAL_TLS"},
}

// general is the sentinel FromStatus falls back to for a code when the
// status names no sentinel. Unavailable has none on purpose: a transport
// failure says nothing about whether a write was applied.
var general = map[codes.Code]error{
	codes.DeadlineExceeded:   context.DeadlineExceeded,
	codes.Canceled:           context.Canceled,
	codes.InvalidArgument:    errs.ErrInvalid,
	codes.NotFound:           errs.ErrNotFound,
	codes.AlreadyExists:      errs.ErrExists,
	codes.OutOfRange:         errs.ErrCompacted,
	codes.FailedPrecondition: errs.ErrFailedPrecondition,
}

func lookup(err error) (entry, bool) {
	for _, e := range table {
		if errors.Is(err, e.err) {
			return e, true
		}
	}
	return entry{}, false
}

// Code returns the gRPC code of err: the code of the first sentinel of the
// table it wraps, else the code of a gRPC status it carries, else
// codes.Unknown (codes.OK for nil).
func Code(err error) codes.Code {
	if err == nil {
		return codes.OK
	}
	if e, ok := lookup(err); ok {
		return e.code
	}
	if st, ok := status.FromError(err); ok {
		return st.Code()
	}
	return codes.Unknown
}

// ToStatus maps err to a gRPC status error (etcd's togRPCError): the code
// of the sentinel it wraps, its full message, and the sentinel's reason as
// an ErrorInfo detail. An error that wraps no sentinel keeps the status it
// carries (a forwarded call's), else becomes Unavailable: the server could
// not complete the call (a lost leadership, a full queue) and the client
// may retry an idempotent call.
func ToStatus(err error) error {
	if err == nil {
		return nil
	}
	e, ok := lookup(err)
	if !ok {
		if st, ok := status.FromError(err); ok {
			return st.Err()
		}
		return status.Error(codes.Unavailable, err.Error())
	}
	msg := err.Error()
	if e.err == ErrNotLeader || e.err == ErrNoLeader {
		msg += "; retry (a leader election is in progress)"
	}
	st := status.New(e.code, msg)
	if d, derr := st.WithDetails(&errdetails.ErrorInfo{Reason: e.reason, Domain: Domain}); derr == nil {
		st = d
	}
	return st.Err()
}

// Error is an error that crossed a gRPC boundary: it prints the status's
// message, unwraps to our sentinel (nil if the status named none) and
// still carries the status (status.Code and status.FromError see it).
type Error struct {
	st       *status.Status
	sentinel error
}

func (e *Error) Error() string {
	if m := e.st.Message(); m != "" {
		return m
	}
	return e.st.Code().String()
}

// Unwrap returns the sentinel, for errors.Is.
func (e *Error) Unwrap() error { return e.sentinel }

// GRPCStatus returns the status the error came as.
func (e *Error) GRPCStatus() *status.Status { return e.st }

// Code is the status code.
func (e *Error) Code() codes.Code { return e.st.Code() }

// FromStatus maps a gRPC status error back to an *Error that wraps the
// sentinel it stands for (so errors.Is(err, errs.ErrLeaseNotFound) works
// after a forwarded keepalive). The sentinel is, in order: the one named
// by the status's ErrorInfo reason; the one of the status's code whose
// text the message carries (our own sentinels' texts only); the code's
// general sentinel (NotFound: errs.ErrNotFound, ...); none. An error that
// is not a status, or is one already mapped, is returned unchanged; nil
// gives nil.
func FromStatus(err error) error {
	if err == nil {
		return nil
	}
	var mapped *Error
	if errors.As(err, &mapped) {
		return err
	}
	st, ok := status.FromError(err)
	if !ok {
		return err
	}
	return &Error{st: st, sentinel: sentinelOf(st)}
}

// FromCode is FromStatus for a code and message that did not come as a
// gRPC status (a command's Result).
func FromCode(c codes.Code, msg string) error {
	if c == codes.OK {
		return nil
	}
	st := status.New(c, msg)
	return &Error{st: st, sentinel: sentinelOf(st)}
}

func sentinelOf(st *status.Status) error {
	for _, d := range st.Details() {
		info, ok := d.(*errdetails.ErrorInfo)
		if !ok || info.GetDomain() != Domain {
			continue
		}
		for _, e := range table {
			if e.reason == info.GetReason() {
				return e.err
			}
		}
	}
	for _, e := range table {
		if e.code == st.Code() && strings.Contains(st.Message(), e.err.Error()) {
			return e.err
		}
	}
	return general[st.Code()]
}
