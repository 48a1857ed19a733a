// Package rpctypes is the one place where raftps' errors cross a process
// boundary (etcd's api/v3rpc/rpctypes): ToStatus maps our sentinel errors
// to gRPC status errors, FromStatus maps a gRPC status back to an error
// that wraps the same sentinel, so errors.Is works on either side of a
// forwarded call or a client connection:
//
//	return nil, rpctypes.ToStatus(err)               // server: sentinel → status
//	err = rpctypes.FromStatus(err)                   // client: status → sentinel
//	if errors.Is(err, errs.ErrLeaseNotFound) { ... }
//
// It is a leaf: it imports only api/errs (the client-visible sentinels)
// and gRPC's status types, nothing else of ours, so client code can use it
// without importing the server. Its table is the one sentinel <-> status
// mapping of the code base: the state machine's, the store's, the
// parameter servers', the checkpoint store's and the node services'
// sentinels each have one row (code and ErrorInfo reason). The store's own
// sentinels (ErrNotLeader, ErrNoLeader, ErrNotOpen) are defined here;
// package raftstore re-exports them.
//
// A status built by ToStatus carries the sentinel's reason in an
// google.rpc.ErrorInfo detail (Domain "raftps"); FromStatus reads it, and
// for a status without one (an older peer, or a handler that built its own
// status) falls back to the sentinel whose text the message carries, then
// to the code's general sentinel. Messages are never compared otherwise:
// in particular grpc-go's own message texts are never matched.
package rpctypes
