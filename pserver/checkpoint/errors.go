package checkpoint

import "github.com/raftps/raftps/api/errs"

// Sentinel errors of the checkpoint package: api/errs's, under this
// package's names (the values are identical, so errors.Is works with
// either). They are wrapped with %w and checked with errors.Is; at the gRPC
// boundary api/rpctypes maps them to status codes and back, in its one
// table.
var (
	// ErrNotFound: the blob or manifest is not stored on that node.
	ErrNotFound = errs.ErrBlobNotFound
	// ErrCorrupt: stored or received bytes do not hash to their MD5 name, or a
	// manifest does not decode / does not match the pointer that names it.
	ErrCorrupt = errs.ErrBlobCorrupt
	// ErrFenced: the slot's ps key no longer carries this writer's
	// incarnation (the slot was re-claimed); the pointer did not move.
	ErrFenced = errs.ErrCheckpointFenced
	// ErrStaleVersion: a checkpoint version not newer than the committed pointer.
	ErrStaleVersion = errs.ErrStaleCheckpoint
	// ErrClosed: the Store is closed.
	ErrClosed = errs.ErrStoreClosed
	// ErrInvalid: a malformed request (empty job, job with '/', no blobs...).
	ErrInvalid = errs.ErrInvalid
	// ErrConflict: a different manifest is already stored under that key
	// (a stored manifest is never replaced by other bytes).
	ErrConflict = errs.ErrManifestConflict
	// ErrBusy: a peer has too many streams open on this node.
	ErrBusy = errs.ErrTooManyStreams
	// ErrNoPointer: a delete cannot be checked against a committed pointer
	// (the slot has none, or the node cannot read them).
	ErrNoPointer = errs.ErrNoPointer
	// ErrUnreachable: Restore could not read a version because a replica
	// its pointer names, still a cluster member, could not be asked; it
	// did not fall back to an older version. Retry later.
	ErrUnreachable = errs.ErrReplicaUnreachable
)
