package fsm

import (
	"fmt"

	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/proto"

	"github.com/raftps/raftps/api/errs"
	pb "github.com/raftps/raftps/api/raftpspb"
	"github.com/raftps/raftps/api/rpctypes"
)

// Errors of the state machine. Every command error wraps one of these, and
// Code maps them to gRPC status codes with api/rpctypes' table. They are
// defined in package api/errs (a leaf, so that fsm/jobq and clients can
// wrap them without an import cycle) and re-exported here; the values are
// identical, so errors.Is works with either name.
var (
	// ErrUnknownCommand: the command type is not registered (a newer or corrupt peer).
	ErrUnknownCommand = errs.ErrUnknownCommand
	// ErrMalformed: the entry, a command payload or a snapshot does not decode.
	ErrMalformed = errs.ErrMalformed
	// ErrInvalid: a well-formed command with invalid arguments (empty key, ...).
	ErrInvalid = errs.ErrInvalid
	// ErrTooLarge: a key or value over the size limit.
	ErrTooLarge = errs.ErrTooLarge
	// ErrQuotaExceeded: a write would take a job's keys past MaxJobKeys or
	// MaxJobKeyBytes.
	ErrQuotaExceeded = errs.ErrQuotaExceeded
	// ErrNoSpace: the NOSPACE alarm key is set (NoSpaceAlarmKey).
	ErrNoSpace = errs.ErrNoSpace
	// ErrLeaseNotFound: the named lease does not exist.
	ErrLeaseNotFound = errs.ErrLeaseNotFound
	// ErrLeaseExists: a lease with the requested id exists.
	ErrLeaseExists = errs.ErrLeaseExists
	// ErrCompacted: the requested revision was compacted away.
	ErrCompacted = errs.ErrCompacted
	// ErrFutureRevision: the requested revision is newer than the store's.
	ErrFutureRevision = errs.ErrFutureRevision
	// ErrNotFound: the named job or object does not exist.
	ErrNotFound = errs.ErrNotFound
	// ErrExists: the named job or object exists already.
	ErrExists = errs.ErrExists
	// ErrFailedPrecondition: the command does not apply in the current state.
	ErrFailedPrecondition = errs.ErrFailedPrecondition
	// ErrLeaseTTLTooLarge: a lease grant asks for more than MaxLeaseTTL seconds.
	ErrLeaseTTLTooLarge = errs.ErrLeaseTTLTooLarge
	// ErrTooManyLeases: the grant's owner holds its owner_limit of leases.
	ErrTooManyLeases = errs.ErrTooManyLeases
)

// MaxLeaseTTL is the largest lease TTL in seconds (errs.MaxLeaseTTL, etcd's bound).
const MaxLeaseTTL = errs.MaxLeaseTTL

// Code returns the gRPC code for an error of this package (codes.Unknown
// if none matches): api/rpctypes' table, the one mapping of the code base.
func Code(err error) codes.Code { return rpctypes.Code(err) }

// ApplyResult is what FSM.Apply returns for one Raft log entry (one Entry):
// one Result per command, in order. Err is set, and Results is nil, only when
// the entry itself does not decode; such an entry changes nothing.
type ApplyResult struct {
	Index   uint64
	Results []*pb.Result
	Err     error
}

// NewCommand encodes msg as the payload of a command of type t.
func NewCommand(t pb.CommandType, msg proto.Message) (*pb.Command, error) {
	b, err := proto.Marshal(msg)
	if err != nil {
		return nil, fmt.Errorf("encode %v: %w", t, err)
	}
	return &pb.Command{Type: t, Payload: b}, nil
}

// EncodeEntry encodes one Raft log entry: the commands and the leader's
// clock (Unix nanoseconds) at proposal.
func EncodeEntry(nowUnixNano int64, cmds []*pb.Command) ([]byte, error) {
	return proto.Marshal(&pb.Entry{NowUnixNano: nowUnixNano, Commands: cmds})
}

// ResultError turns a Result's error status back into a Go error that
// wraps the matching sentinel (so errors.Is works across a forwarded call):
// rpctypes.FromCode, the same mapping as for a gRPC status. The FSM's
// messages always contain their sentinel's text (e.g. "fsm: lease not
// found"), which names the sentinel among those of the code; otherwise the
// code's general sentinel (InvalidArgument: ErrInvalid, NotFound:
// ErrNotFound, AlreadyExists: ErrExists, OutOfRange: ErrCompacted,
// FailedPrecondition: ErrFailedPrecondition). The error prints the
// message and carries the code (status.Code sees it).
func ResultError(r *pb.Result) error {
	if r == nil || r.Error == nil {
		return nil
	}
	return rpctypes.FromCode(codes.Code(r.Error.Code), r.Error.Message)
}
