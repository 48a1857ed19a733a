package errs

import "errors"

// Sentinel errors of the state machine (package fsm re-exports them).
// Every command error of the state machine wraps one of these; api/rpctypes
// maps them to gRPC status codes and back (one table).
var (
	// ErrUnknownCommand: the command type is not registered (a newer or corrupt peer).
	ErrUnknownCommand = errors.New("fsm: unknown command type")
	// ErrMalformed: the entry, a command payload or a snapshot does not decode.
	ErrMalformed = errors.New("fsm: malformed command")
	// ErrInvalid: a well-formed request with invalid arguments (an empty
	// key, a bad job spec, a push of the wrong shape, a malformed
	// checkpoint request...). Nothing was applied. The one invalid-argument
	// sentinel: fsm, pserver and pserver/checkpoint re-export it.
	ErrInvalid = errors.New("invalid argument")
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
	// ErrTooManyLeases: a lease grant's owner already holds its limit of
	// leases (LeaseGrantRequest.owner_limit).
	ErrTooManyLeases = errors.New("fsm: too many leases")
)

// ErrNoCapacity: a job does not fit in the memory the cluster's live
// pserver or trainer nodes announce (package master's admission;
// ResourceExhausted).
var ErrNoCapacity = errors.New("job does not fit in the cluster's memory budgets")

// Errors of the parameter servers (package pserver re-exports them under
// its own names: ErrFenced, ErrNotHosted, ErrStale, ErrBadSpec, ...).
var (
	// ErrSlotFenced: the slot lost its lease (Fence or Close was called).
	// The client must re-resolve the slot's owner. gRPC Unavailable.
	ErrSlotFenced = errors.New("pserver: slot lost its lease; re-resolve")
	// ErrSlotNotHosted: this node does not host the (job, slot). gRPC Unavailable.
	ErrSlotNotHosted = errors.New("pserver: slot not hosted here; re-resolve")
	// ErrSlotEpoch: a trainer's request names a replica epoch other than
	// the one the slot serves under, or the slot learned it was deposed
	// (PushRequest.epoch, PullRequest.epoch). Nothing was applied or read:
	// the client must re-resolve the slot's primary and epoch and retry
	// (a push with the same push id). gRPC FailedPrecondition.
	ErrSlotEpoch = errors.New("pserver: request's replica epoch is not the slot's; re-resolve")
	// ErrStalePush: a push was computed on a version too old (async
	// staleness bound) or for another sync step. The trainer must re-pull.
	// gRPC FailedPrecondition.
	ErrStalePush = errors.New("pserver: stale push; re-pull")
	// ErrBadSpec: the job spec cannot be served (bad shapes, duplicate
	// names, unknown optimizer). gRPC InvalidArgument.
	ErrBadSpec = errors.New("pserver: bad job spec")
	// ErrVShardCorrupt: a vshard blob is truncated, corrupt or of an
	// unknown format. gRPC DataLoss.
	ErrVShardCorrupt = errors.New("pserver: corrupt vshard blob")
	// ErrNewerFormat: a vshard blob was written by a newer raftps, in a
	// format version this build does not read (a mixed-version cluster:
	// upgrade this node). Not ErrVShardCorrupt: the blob may be sound.
	// gRPC FailedPrecondition.
	ErrNewerFormat = errors.New("pserver: vshard blob written by a newer raftps")
	// ErrIncompatible: a vshard blob does not fit the job spec (other
	// optimizer, shapes, block size or number of virtual shards). gRPC DataLoss.
	ErrIncompatible = errors.New("pserver: vshard blob does not match job spec")
	// ErrMissingVShard: RestoreSlot was not given a blob for a vshard the
	// slot owns. gRPC DataLoss.
	ErrMissingVShard = errors.New("pserver: missing vshard blob")
)

// Errors of the checkpoint store (package pserver/checkpoint re-exports
// them under its own names: ErrNotFound, ErrCorrupt, ...).
var (
	// ErrBlobNotFound: the blob or manifest is not stored on that node. gRPC NotFound.
	ErrBlobNotFound = errors.New("checkpoint: not found")
	// ErrBlobCorrupt: stored or received bytes do not hash to their MD5
	// name, or a manifest does not decode / does not match the pointer that
	// names it. gRPC DataLoss.
	ErrBlobCorrupt = errors.New("checkpoint: corrupt")
	// ErrCheckpointFenced: the slot's ps key no longer carries this
	// writer's incarnation (the slot was re-claimed); the pointer did not
	// move. gRPC FailedPrecondition.
	ErrCheckpointFenced = errors.New("checkpoint: fenced")
	// ErrStaleCheckpoint: a checkpoint version not newer than the committed
	// pointer. gRPC FailedPrecondition.
	ErrStaleCheckpoint = errors.New("checkpoint: stale version")
	// ErrStoreClosed: the checkpoint store is closed. gRPC Unavailable.
	ErrStoreClosed = errors.New("checkpoint: store closed")
	// ErrManifestConflict: a different manifest is already stored under
	// that key (a stored manifest is never replaced by other bytes). gRPC
	// AlreadyExists.
	ErrManifestConflict = errors.New("checkpoint: a different manifest exists")
	// ErrTooManyStreams: a peer has too many checkpoint streams open on
	// this node. gRPC ResourceExhausted.
	ErrTooManyStreams = errors.New("checkpoint: too many streams")
	// ErrNoPointer: a delete cannot be checked against a committed pointer
	// (the slot has none, or the node cannot read them). gRPC FailedPrecondition.
	ErrNoPointer = errors.New("checkpoint: no committed pointer to check against")
	// ErrReplicaUnreachable: a checkpoint version could not be restored
	// because a node its pointer names as a replica, still a cluster
	// member, could not be asked (Unavailable, DeadlineExceeded, not alive
	// in gossip); the data may be intact there. Retry later rather than
	// fall back to an older version. gRPC Unavailable.
	ErrReplicaUnreachable = errors.New("checkpoint: a replica holder could not be reached")
)

// Errors of slot replication (pserver/replica).
var (
	// ErrStaleEpoch: a replication request's epoch is older than the one
	// the backup knows, or an ack names a newer epoch than the primary's:
	// the sender is no longer the slot's primary. gRPC FailedPrecondition.
	ErrStaleEpoch = errors.New("replica: stale epoch; the sender is no longer the primary")
	// ErrNotBackup: a request names a job or slot the node holds no backup
	// of. gRPC FailedPrecondition.
	ErrNotBackup = errors.New("replica: not a backup of this slot")
	// ErrTooFarAhead: a request's seq is too far beyond the backup's
	// applied seq. gRPC ResourceExhausted.
	ErrTooFarAhead = errors.New("replica: request too far ahead of the applied sequence")
	// ErrNotAcked: a backup's ack does not cover the request. gRPC
	// Unavailable.
	ErrNotAcked = errors.New("replica: backup did not acknowledge the update")
)

// Errors of a node's own services.
var (
	// ErrPermissionDenied: the caller's certificate's role may not make the
	// call, or the lease is not one its certificate granted. gRPC
	// PermissionDenied.
	ErrPermissionDenied = errors.New("permission denied")
	// ErrWrongPort: the service is not served on the port the call came to
	// (node's traffic classes). gRPC Unimplemented.
	ErrWrongPort = errors.New("not served on this port")
	// ErrGossipEncryptionOff: a keyring operation on a node whose gossip is
	// not encrypted. gRPC FailedPrecondition.
	ErrGossipEncryptionOff = errors.New("gossip encryption is off")
	// ErrNeedsMutualTLS: a keyring operation on a node without mutual TLS
	// (the keys would cross the network in plaintext). gRPC FailedPrecondition.
	ErrNeedsMutualTLS = errors.New("keyring operations need mutual TLS")
)

// MaxLeaseTTL is the largest lease TTL in seconds a grant may ask for
// (etcd's MaxLeaseTTL, 9e9 s): time.Duration(MaxLeaseTTL)*time.Second
// still fits in an int64 of nanoseconds (up to ~9.22e9 s), so a deadline
// computed from a TTL cannot overflow. Grants above it are refused with
// ErrLeaseTTLTooLarge, by the store before proposing and by the FSM.
const MaxLeaseTTL int64 = 9_000_000_000
