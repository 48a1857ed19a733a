package errs

import "errors"

// Sentinel errors. Every command error of the state machine wraps one of
// these; api/rpctypes maps them to gRPC status codes and back (one table).
var (
	// ErrUnknownCommand: the command type is not registered (a newer or corrupt peer).
	ErrUnknownCommand = errors.New("fsm: unknown command type")
	// ErrMalformed: the entry, a command payload or a snapshot does not decode.
	ErrMalformed = errors.New("fsm: malformed command")
	// ErrInvalid: a well-formed command with invalid arguments (empty key, ...).
	ErrInvalid = errors.New("fsm: invalid argument")
	// ErrTooLarge: a key or value over the size limit.
	ErrTooLarge = errors.New("fsm: too large")
	// ErrLeaseNotFound: the named lease does not exist.
	ErrLeaseNotFound = errors.New("fsm: lease not found")
	// ErrLeaseExists: a lease with the requested id exists.
	ErrLeaseExists = errors.New("fsm: lease already exists")
	// ErrCompacted: the requested revision was compacted away.
	ErrCompacted = errors.New("fsm: revision compacted")
	// ErrFutureRevision: the requested revision is newer than the store's.
	ErrFutureRevision = errors.New("fsm: revision in the future")
	// ErrNotFound: the named job or object does not exist.
	ErrNotFound = errors.New("fsm: not found")
	// ErrExists: the named job or object exists already.
	ErrExists = errors.New("fsm: already exists")
	// ErrFailedPrecondition: the command does not apply in the current state.
	ErrFailedPrecondition = errors.New("fsm: failed precondition")
	// ErrLeaseTTLTooLarge: a lease grant asks for a TTL above MaxLeaseTTL.
	ErrLeaseTTLTooLarge = errors.New("fsm: lease TTL too large")
	// ErrQuotaExceeded: a write would take a job's keys past their quota.
	ErrQuotaExceeded = errors.New("fsm: quota exceeded")
	// ErrNoSpace: the NOSPACE alarm is armed (the store went past its
	// backend quota): writes that add keys or bytes are refused until an
	// admin frees space and disarms it (etcd's ErrNoSpace).
	ErrNoSpace = errors.New("fsm: database space exceeded (NOSPACE alarm)")
)

// MaxLeaseTTL is the largest lease TTL in seconds a grant may ask for
// (etcd's MaxLeaseTTL, 9e9 s): time.Duration(MaxLeaseTTL)*time.Second
// still fits in an int64 of nanoseconds (up to ~9.22e9 s), so a deadline
// computed from a TTL cannot overflow. Grants above it are refused with
// ErrLeaseTTLTooLarge, by the store before proposing and by the FSM.
const MaxLeaseTTL int64 = 9_000_000_000
