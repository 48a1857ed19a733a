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
//	data, _ := fsm.EncodeEntryAt(time.Now().UnixNano(), fsm.Monotonic(), []*pb.Command{cmd})
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
// # Caller duties
//
//   - Time: the FSM reads no clock. The proposer stamps Entry.now_unix_nano
//     (its wall clock) and Entry.mono_nano (Monotonic()) with EncodeEntryAt;
//     job commands run on the replicated clock derived from them (above);
//     what users read of jobs (event times, submit and finish times) is
//     now_unix_nano itself, so it does not lag by leaderless periods.
//   - Jobs: COMMAND_DELETE_JOB removes a finished job; COMMAND_PRUNE_JOBS
//     deletes finished jobs past a count or age (judged in cluster time);
//     at most jobq.MaxJobs jobs are kept (a submit beyond deletes the oldest
//     finished). The job's keys under /jobs/<name>/ are the caller's.
//   - Retries: a command with Command.client_id and seq is applied once; the
//     same (client_id, seq) proposed again gets the first Result
//     (session.go, Raft thesis §6.3; bounded, in the snapshot). A proposer
//     that retries after an unknown outcome reuses the id; acked lets the
//     FSM forget answered Results.
//   - Leases: the FSM stores only the granted TTL, the owner (the
//     identity that granted it, carried in the command; "" for a node's
//     own and every lease of an older snapshot) and the attached keys.
//     Ids are chosen at random by the proposer (random_id; a taken one
//     moves to the next free id, the same on every replica). Timers,
//     keepalives, the minimum TTL and expiry belong to the leader
//     (raftstore), which revokes an expired lease through Raft.
//   - Linearizable reads: Range reads whatever is applied; the caller waits
//     for AppliedIndex to reach its read index first. hashicorp/raft hands
//     the FSM only LogCommand entries, so AppliedIndex is the index of the
//     last command (or snapshot), not of a trailing no-op or barrier.
//   - Reads at a revision: Range with a revision rebuilds the range as it
//     was from the watch history (etcd's MVCC read; ErrCompacted below the
//     compact revision, ErrFutureRevision above the store's); a range inside
//     a txn reads the current revision only (ErrInvalid otherwise).
//   - Watches: watchers poll Events from their next revision when the
//     Observer reports a new revision, and cancel with ErrCompacted.
//   - Size: keys up to MaxKeySize, values up to MaxValueSize (ErrTooLarge);
//     a txn's range results up to MaxTxnResponseBytes (ErrTooLarge, checked
//     before anything is built or changed; the store serves read-only txns
//     with TxnRead, without the log); a job's keys up to MaxJobKeys and
//     MaxJobKeyBytes (ErrQuotaExceeded, counted from the keys, so restore
//     recounts them); while schema.NoSpaceAlarmKey exists, puts of any
//     other key are refused (ErrNoSpace: the store's backend quota);
//     lease TTLs up to MaxLeaseTTL seconds (ErrLeaseTTLTooLarge); job specs
//     within jobspec.ValidateSpec's bounds, parameters and optimizer state up
//     to jobspec.MaxJobBytes (ErrInvalid naming the field).
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
// The design notes of this package are in DESIGN.md in this directory
// ("Semantics", "Halting: the rules", "Time: what runs on the clock",
// "Snapshot guarantees", and the notes on state, determinism, atomicity,
// the replicated clock and the snapshot format before them).
package fsm
