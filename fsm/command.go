package fsm

import (
	"errors"
	"fmt"
	"strings"

	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/proto"

	pb "github.com/raftps/raftps/api/raftpspb"
	"github.com/raftps/raftps/fsm/errs"
)

// Errors of the state machine. Every command error wraps one of these, and
// Code maps them to gRPC status codes in one table. They are defined in
// package fsm/errs (so that fsm/jobq can wrap them without an import cycle)
// and re-exported here; the values are identical, so errors.Is works with
// either name.
var (
	// ErrUnknownCommand: the command type is not registered (a newer or corrupt peer).
	ErrUnknownCommand = errs.ErrUnknownCommand
	// ErrMalformed: the entry, a command payload or a snapshot does not decode.
	ErrMalformed = errs.ErrMalformed
	// ErrInvalid: a well-formed command with invalid arguments (empty key, ...).
	ErrInvalid = errs.ErrInvalid
	// ErrTooLarge: a key or value over the size limit.
	ErrTooLarge = errs.ErrTooLarge
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
)

// codeTable maps the sentinels above to gRPC codes; Code consults it in order.
var codeTable = []struct {
	err  error
	code codes.Code
}{
	{ErrUnknownCommand, codes.InvalidArgument},
	{ErrMalformed, codes.InvalidArgument},
	{ErrInvalid, codes.InvalidArgument},
	{ErrTooLarge, codes.InvalidArgument},
	{ErrLeaseNotFound, codes.NotFound},
	{ErrLeaseExists, codes.AlreadyExists},
	{ErrCompacted, codes.OutOfRange},
	{ErrFutureRevision, codes.OutOfRange},
	{ErrNotFound, codes.NotFound},
	{ErrExists, codes.AlreadyExists},
	{ErrFailedPrecondition, codes.FailedPrecondition},
}

// Code returns the gRPC code for an error of this package (codes.Unknown if none matches).
func Code(err error) codes.Code {
	if err == nil {
		return codes.OK
	}
	for _, e := range codeTable {
		if errors.Is(err, e.err) {
			return e.code
		}
	}
	return codes.Unknown
}

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

// canonical is the sentinel ResultError falls back to for a code when the
// message names no sentinel of that code.
var canonical = map[codes.Code]error{
	codes.InvalidArgument:    ErrInvalid,
	codes.NotFound:           ErrNotFound,
	codes.AlreadyExists:      ErrExists,
	codes.OutOfRange:         ErrCompacted,
	codes.FailedPrecondition: ErrFailedPrecondition,
}

// ResultError turns a Result's error status back into a Go error that wraps
// the matching sentinel (so errors.Is works across a forwarded call). The
// code picks the candidates; among them the sentinel whose text the message
// carries wins (the FSM's messages always contain their sentinel's text,
// e.g. "fsm: lease not found"), else the code's general sentinel
// (InvalidArgument: ErrInvalid, NotFound: ErrNotFound, AlreadyExists:
// ErrExists, OutOfRange: ErrCompacted, FailedPrecondition:
// ErrFailedPrecondition). Other codes give a plain error with the message.
func ResultError(r *pb.Result) error {
	if r == nil || r.Error == nil {
		return nil
	}
	c := codes.Code(r.Error.Code)
	msg := r.Error.Message
	for _, e := range codeTable {
		if e.code == c && strings.Contains(msg, e.err.Error()) {
			return &resultError{sentinel: e.err, msg: msg}
		}
	}
	if e, ok := canonical[c]; ok {
		return &resultError{sentinel: e, msg: msg}
	}
	if msg == "" {
		msg = c.String()
	}
	return errors.New(msg)
}

// resultError is a forwarded command error: it prints the original message
// and unwraps to the sentinel.
type resultError struct {
	sentinel error
	msg      string
}

func (e *resultError) Error() string { return e.msg }
func (e *resultError) Unwrap() error { return e.sentinel }
