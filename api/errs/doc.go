// Package errs holds raftps's client-visible sentinel errors: the state
// machine's (ErrInvalid, ErrNotFound, ErrLeaseNotFound, ...), the
// parameter servers' (ErrSlotFenced, ErrStalePush, ...), the checkpoint
// store's (ErrBlobNotFound, ErrNoPointer, ...), the master's admission
// (ErrNoCapacity) and a node's own services' (ErrPermissionDenied, ...).
//
// It is a leaf (etcd's api/v3rpc/rpctypes): it imports only the standard
// library, so a client and every layer of the server can wrap and check
// them without importing the code that returns them. The packages that
// return them re-export them under their own names (fsm.ErrInvalid,
// pserver.ErrFenced, checkpoint.ErrNotFound are these values), so
// errors.Is works with either name. api/rpctypes maps each to one gRPC
// status code and back, in its one table; a new sentinel gets its row
// there.
package errs
