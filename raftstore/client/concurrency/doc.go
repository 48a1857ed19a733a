// Package concurrency holds client-side helpers built on raftps leases,
// after etcd's client/v3/concurrency: a Session is one lease kept alive on
// behalf of an agent, so the keys it holds vanish when the agent dies, and
// the agent learns when its lease was lost (to fence and re-register).
//
// A Session runs over LeaseAPI, the shape of raftstore.Lessor, which both
// the gRPC client (raftstore/client.Client.Leases) and a node's own
// *raftstore.Store (in process) satisfy.
//
//	s := concurrency.NewSession(api, 10) // 10 s TTL
//	id, lost, err := s.Ensure(ctx)       // call at least every TTL/3
//	if lost { /* everything attached to the old lease is gone: fence, re-register */ }
//	if err != nil { /* no live lease right now: retry on the next round */ }
//	defer s.Close(ctx)                   // revokes the lease
//
// As etcd's Session, Done and Ctx end when the current lease is no longer
// kept alive (found gone, given up unrenewed for a TTL, or closed);
// Renewed reports when its last successful renewal was sent (fencing
// bounds are measured from it) and KeepAlive renews at once, for callers
// that renew more often than every TTL/3.
//
// Session is safe for concurrent use.
package concurrency
