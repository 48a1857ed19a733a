// Package client is the Go client of raftps' gRPC API: one connection over
// a list of endpoints that fails over between them, and the generated
// service clients on top of it.
//
//	c, err := client.New([]string{"127.0.0.1:7000", "127.0.0.1:7010"})
//	defer c.Close()
//	_, err = c.KV.Put(ctx, &pb.PutRequest{Key: []byte("k"), Value: []byte("v")})
//
// Any node serves the whole API (followers forward to the leader), so the
// client only needs one reachable endpoint. Calls are balanced round-robin
// over the endpoints that are up (a manual resolver) and wait for one to be
// ready, so a dead endpoint costs nothing; bound every call with a
// deadline. Retry re-runs an idempotent call on Unavailable.
//
// Writes (Put, DeleteRange, Txn, lease grants and revokes, the Master's
// job and task calls) go straight to the leader when the client knows it
// and has it among its endpoints: the client looks the leader up
// (Cluster.Status, then Cluster.Members for its gRPC address) at most
// once a second while it writes, and its balancer picks the leader's
// connection for them. This saves the follower's forward, two hops and a
// follower's CPU per write (route.go has the figures). The route is only
// a hint: a write sent to a node that has just lost the lead is
// forwarded as before, and one that cannot reach the leader is balanced.
// A lookup that fails or is slow (each is bounded by 5 s, in the
// background) keeps the route it had: only a write that fails on the
// route, or a lookup that names another leader or none, changes it.
//
// Every call carries a request id (client id, sequence number); writes
// retried with Retry reuse it and are applied exactly once (the retry of a
// write whose answer was lost gets the first answer).
//
// Every error a call returns has crossed rpctypes.FromStatus: it keeps its
// gRPC status (status.Code works) and wraps raftps' sentinel, so
//
//	errors.Is(err, errs.ErrLeaseNotFound) // api/errs; api/rpctypes for the store's
//
// works as it does in process. Leases adapts the Lease service to
// concurrency.LeaseAPI, so a concurrency.Session runs over a client.
package client
