// Package service serves raftps' etcd-style gRPC API (KV, Lease, Watch) and
// the node-to-node Internal service on top of a raftstore.Store, and
// forwards leader-only work from followers to the leader.
//
// Every node serves the whole API; a client never has to find the leader:
//
//	svc := service.New(store)
//	svc.Register(grpcServer)
//	fwd := service.NewForwarder(func(id string) (string, bool) { ... gossip lookup ... })
//
// Writes, Txns and lease grants/revokes are Raft commands: on a follower
// raftstore hands them to the Forwarder, which calls Internal.ForwardApply on
// the leader. Linearizable reads ask the leader for a read index
// (Internal.ReadIndex) and wait until the local FSM has applied it.
// Keepalives go to the leader's lease timers (Internal.LeaseKeepAliveOnce).
//
// Agents on a node (pservers, trainers, checkpoints) use Local, the
// in-process client of the node's own store with the same semantics, and
// keep their keys under a concurrency.Session (raftstore/client/concurrency)
// that Local's lease calls satisfy.
//
// Errors cross the boundary through ToStatus, the one table that maps
// raftps' sentinels to gRPC codes (etcd's togRPCError): invalid input is
// InvalidArgument, a missing lease NotFound, a compacted revision OutOfRange,
// no leader Unavailable (retry).
//
// All methods are safe for concurrent use.
package service
