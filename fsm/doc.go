// Package fsm is the deterministic Raft state machine of raftps: an
// etcd-style MVCC key/value store (global revision; per key create and mod
// revision, version and lease), leases, watch history, and the job and task
// queues of package fsm/jobq, with whole-state snapshot and restore.
//
// # Usage
//
// raftstore hands an FSM to hashicorp/raft and proposes entries built with
// NewCommand and EncodeEntry; the future's Response is an *ApplyResult with
// one pb.Result per command:
//
//	f := fsm.New(logger.With("component", "fsm"))
//	r, _ := raft.NewRaft(cfg, f, logs, stable, snaps, transport)
//
//	cmd, _ := fsm.NewCommand(pb.CommandType_COMMAND_PUT, &pb.PutRequest{Key: k, Value: v})
//	data, _ := fsm.EncodeEntry(time.Now().UnixNano(), []*pb.Command{cmd})
//	fut := r.Apply(data, timeout)
//	if err := fut.Error(); err != nil { ... } // not committed
//	res := fut.Response().(*fsm.ApplyResult)
//	if res.Err != nil { ... }                  // entry did not decode (a bug)
//	if err := fsm.ResultError(res.Results[0]); err != nil { ... } // rejected: nothing changed
//	var resp pb.PutResponse
//	proto.Unmarshal(res.Results[0].Payload, &resp)
//
// Reads (Range, Events, Leases, Jobs) are served from local state.
//
// # Semantics
//
// The store follows etcd v3: an empty store is at revision 1; every command
// that changes a key (Put, a DeleteRange that deletes something, a Txn with a
// write, a LeaseRevoke of a lease with keys) takes the next revision, and a
// Txn or a revoke is one revision however many keys it writes. Lease grants,
// compactions and job commands do not change the revision. Each command is
// atomic: it is validated completely before anything changes, and a rejected
// command (pb.Result.Error set) changed nothing; the other commands of the
// same entry still apply. An unknown command type (ErrUnknownCommand) or an
// undecodable payload (ErrMalformed) is rejected the same way and logged at
// Error level; an entry that does not decode at all is logged and skipped
// (ApplyResult.Err), the applied index still advances. No input panics the
// node: a handler panic is recovered, logged with its stack and returned as
// codes.Internal (identically on every replica).
//
// Watch history keeps the events of the last HistoryRevisions revisions (and
// COMMAND_COMPACT drops more); it is part of the snapshot, so a node restored
// from a snapshot can still serve watch resumes.
//
// # Caller duties
//
//   - Time: the FSM reads no clock. The proposer stamps Entry.now_unix_nano
//     (the leader's clock); job commands use it for deadlines and events.
//   - Leases: the FSM stores only the granted TTL and the attached keys.
//     Timers, keepalives, the minimum TTL and expiry belong to the leader
//     (raftstore), which revokes an expired lease through Raft.
//   - Linearizable reads: Range reads whatever is applied; the caller waits
//     for AppliedIndex to reach its read index first. hashicorp/raft hands
//     the FSM only LogCommand entries, so AppliedIndex is the index of the
//     last command (or snapshot), not of a trailing no-op or barrier.
//   - Watches: watchers poll Events from their next revision when the
//     Observer reports a new revision, and cancel with ErrCompacted.
//   - Size: keys up to MaxKeySize, values up to MaxValueSize (ErrTooLarge).
//
// # Concurrency
//
// Apply, Snapshot and Restore are called by raft's FSM goroutine, one at a
// time. Every other method is safe for concurrent use from any goroutine: a
// read-write lock lets reads run in parallel with each other and see one
// applied state. Snapshot holds the lock only to capture (a copy-on-write
// clone of the key/value B-tree, the history index, the lease table and the
// encoded job queue); Persist encodes and writes without the lock while
// Apply goes on. The Observer is called synchronously at the end of each
// Apply and Restore, after the lock is released, in log order; it must not
// block.
//
// # Snapshot format
//
// A snapshot is a magic header, typed length-prefixed records (meta, leases,
// key/values, events, the job queue blob) and a CRC-32C trailer; see
// snapshot.go. Restore decodes and validates everything into a new state and
// only then swaps it in, so a truncated or corrupt snapshot (ErrMalformed)
// leaves the current state untouched.
package fsm
