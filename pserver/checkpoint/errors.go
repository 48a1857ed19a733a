package checkpoint

import "errors"

// Sentinel errors of the checkpoint package. They are wrapped with %w and
// checked with errors.Is; at the gRPC boundary they map to status codes in
// one table (see toStatus / fromStatus in service.go).
var (
	// ErrNotFound: the blob or manifest is not stored on that node.
	ErrNotFound = errors.New("checkpoint: not found")
	// ErrCorrupt: stored or received bytes do not hash to their MD5 name, or a
	// manifest does not decode / does not match the pointer that names it.
	ErrCorrupt = errors.New("checkpoint: corrupt")
	// ErrFenced: the slot's ps key no longer carries this writer's
	// incarnation (the slot was re-claimed); the pointer did not move.
	ErrFenced = errors.New("checkpoint: fenced")
	// ErrStaleVersion: a checkpoint version not newer than the committed pointer.
	ErrStaleVersion = errors.New("checkpoint: stale version")
	// ErrClosed: the Store is closed.
	ErrClosed = errors.New("checkpoint: store closed")
	// ErrInvalid: a malformed request (empty job, job with '/', no blobs...).
	ErrInvalid = errors.New("checkpoint: invalid argument")
	// ErrConflict: a different manifest is already stored under that key
	// (a stored manifest is never replaced by other bytes).
	ErrConflict = errors.New("checkpoint: a different manifest exists")
	// ErrBusy: a peer has too many streams open on this node.
	ErrBusy = errors.New("checkpoint: too many streams")
	// ErrNoPointer: a delete cannot be checked against a committed pointer
	// (the slot has none, or the node cannot read them).
	ErrNoPointer = errors.New("checkpoint: no committed pointer to check against")
)
