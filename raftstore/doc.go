// Package raftstore runs raftps's Raft group: hashicorp/raft with
// raft-boltdb or hashicorp/raft-wal (log and stable store, Config.LogStore),
// a file snapshot store and a TCP
// transport, in front of the deterministic state machine of package fsm.
// It gives the rest of raftps an etcd-like metadata store: batched writes
// forwarded to the leader, linearizable (or serializable) reads, leases
// whose timers run on the leader, and gap-free resumable watches.
//
// # Usage
//
//	cfg := raftstore.DefaultConfig()
//	cfg.ID, cfg.DataDir, cfg.RaftAddr = "n1", "/var/lib/raftps", ":7001"
//	cfg.Bootstrap = true // only forms a cluster if the data dir has no Raft state
//	s, err := raftstore.New(cfg, fsm.New(logger), grpcForwarder)
//	if err != nil { ... }
//	if err := s.Open(); err != nil { ... } // ErrDataDirMismatch: wrong --data-dir
//	defer s.Close()
//
//	_, err = s.Put(ctx, &pb.PutRequest{Key: k, Value: v}) // any server: forwarded to the leader
//	resp, err := s.Range(ctx, &pb.RangeRequest{Key: k})  // linearizable
//	ch, err := s.Watch(ctx, &pb.WatchRequest{Key: k, StartRevision: rev})
//
// Other servers are added through the leader with Join (and taken out with
// Remove); both are idempotent, so a node can ask to join on every start.
// AddMember and PromoteMember (members.go) are the operator's explicit
// changes (`raftps member add|promote`): AddMember refuses an id or address
// already present (fsm.ErrExists) instead of replacing it; PromoteMember
// makes a non-voter a voter (fsm.ErrNotFound, fsm.ErrFailedPrecondition for
// a voter); whether it has caught up is the caller's check.
//
// # Caller's duties
//
//   - Implement Forwarder in the gRPC layer (Internal service) and route it
//     to the *Local methods on the leader: ApplyLocal, ReadIndexLocal,
//     LeaseKeepAliveLocal, LeaseTimeToLiveLocal. Return an error wrapping
//     ErrNotLeader when the target is not (or no longer) the leader, or is
//     known not to have applied the command: the store then retries against
//     the new leader. ReadIndex, LeaseKeepAlive and LeaseTimeToLive, which
//     are safe to repeat, are also retried on a gRPC Unavailable status;
//     Apply is not (its outcome is unknown). Retries end with ctx. Any other
//     error is returned to the caller as is. Map the leader's gRPC status
//     back with rpctypes.FromStatus (raftstore/service.Forwarder does), so
//     a forwarded NotFound is fsm.ErrLeaseNotFound again.
//   - Use LeaderCh (not raft's LeaderCh) for leader-only loops; each call
//     gets its own channel that always ends with the latest state.
//   - Register Collector with Prometheus once.
//   - Use Observe, not fsm.SetObserver, to hear about applied entries: the
//     store owns the FSM's observer slot.
//
// # Concurrency
//
// All methods are safe for concurrent use. New does no I/O; Open starts
// Raft; Close hands leadership over (bounded wait and retry), shuts Raft
// down, closes the transport and bolt, and is safe to call twice. Calls
// after Close return ErrNotOpen.
//
// The design notes of this package ("Data dir", "Writes", "Reads",
// "Leases", "Watches", "Txns", "Partitions in tests", "Version pin and
// known hashicorp/raft bugs") are in DESIGN.md in this directory.
package raftstore
