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
// # Semantics
//
// The store follows etcd v3: an empty store is at revision 1; every command
// that changes a key (Put, a DeleteRange that deletes something, a Txn with a
// write, a LeaseRevoke of a lease with keys) takes the next revision, and a
// Txn or a revoke is one revision however many keys it writes. Lease grants,
// compactions and job commands do not change the revision. Each command is
// atomic: it is validated completely before anything changes, and a rejected
// command (pb.Result.Error set) changed nothing; the other commands of the
// same entry still apply. An undecodable payload (ErrMalformed) is rejected
// the same way on every replica and logged at Error level; an entry that
// does not decode at all is logged and skipped (ApplyResult.Err), the
// applied index still advances. A handler panic is recovered, logged with
// its stack and returned as codes.Internal (identically on every replica).
//
// # Commands this replica cannot apply: halt
//
// A committed entry must have the same effect on every replica, so a
// replica that cannot apply one exactly must not carry on without it (in a
// mixed-version cluster the newer replicas would apply it and the older
// would diverge for good). The policy is to halt: an entry with a command
// type this binary does not know (ErrUnknownCommand), or with fields it
// does not know in the Entry or a Command envelope (a newer leader's
// stamps), makes Apply log at Error level and panic before anything of
// the entry is applied or the applied index advances. The process ends; a
// restart replays the log and halts at the same index until the node runs
// a binary that knows the command. The rest of the cluster is unaffected
// as long as a quorum can apply. Three rules keep this safe:
//
//   - the proposer never lets such an entry into the log itself:
//     EncodeEntryAt refuses a command type the leader does not know, so a
//     buggy or hostile peer cannot halt the cluster with a made-up type;
//   - a change in what a command does comes with a new command type (an
//     old replica halts on the type) and a new field in a payload is only
//     allowed if a replica ignoring it applies the command the same way;
//   - upgrade every voter before anything proposes a new command type (a
//     rolling upgrade of followers first, the leader last, or a restart of
//     the whole cluster). Upgrading from e46dc7a (which rejected unknown
//     types and carried on, and ignores Entry.mono_nano) needs a whole-cluster
//     restart: a mixed cluster would apply task deadlines differently.
//
// # Time
//
// Task deadlines and durations, blacklist cooldowns and the age of finished
// jobs are measured in the replicated clock (clock.go, FSM.Clock): it
// starts at the first entry's wall stamp, advances within a term by the
// leader's monotonic stamps (Entry.mono_nano), is re-based (does not
// advance) at a new term, never goes backwards and saturates. An NTP step on
// the leader or a failover to a node whose clock is ahead can therefore not
// expire tasks early; it lags wall time by the time the cluster had no
// leader. The leader's sweep compares deadlines with a ClockEstimator over
// Clock(), not with its wall clock.
//
// Watch history keeps the events of the last HistoryRevisions revisions (and
// COMMAND_COMPACT drops more); it is part of the snapshot, so a node restored
// from a snapshot can still serve watch resumes.
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
// # Snapshot format
//
// A snapshot is a magic header, typed length-prefixed records (meta with
// the replicated clock, leases, key/values, events, one record per job,
// client sessions, each bounded) and a CRC-32C trailer; see snapshot.go. Whatever Apply
// accepts, Snapshot and Restore reproduce byte for byte (FuzzAPISequence
// checks it after every step of random API call sequences). Restore decodes and validates everything into a new state and
// only then swaps it in, so a truncated or corrupt snapshot (ErrMalformed)
// leaves the current state untouched.
package fsm
