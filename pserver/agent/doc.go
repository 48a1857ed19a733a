// Package agent runs the pserver role of a node: it claims free parameter
// server slots of running jobs under the node's lease, restores each from
// its newest checkpoint (or the initializer), serves it, feeds it the job's
// trainer membership, checkpoints it by the job's policy, and fences it the
// moment the claim is lost.
//
//	a := agent.New(agent.Config{NodeID: "n1", Addr: grpcAddr}, meta, server, ckpt, members)
//	go a.Run(ctx)
//
// The agent decides nothing about other nodes: every claim is a Txn under
// its lease (a raftstore/client/concurrency.Session), so two agents can
// never serve the same slot at the same incarnation (DESIGN.md §5, §6).
// Across incarnations, a lost lease fences every slot within
// schema.PServerFence (2/3 of the TTL) of the send of the last successful
// renewal (Session.Renewed; a watchdog, and every request's check of the
// lease's pserver.Deadline, which holds when the watchdog runs late; the
// lease is renewed every Poll with Session.KeepAlive), and a slot that
// another node held (its restore record exists and is not this node's) is
// served only once that holder has surely fenced: the master may revoke a
// gossip-dead holder's lease early, and the holder, if only partitioned,
// serves on until its watchdog fires. When the master's
// schema.HandoverRecord for the slot is there (the leader knew when the
// holder's last keepalive arrived), the new claimant consumes it and waits
// its schema.HandoverWait; otherwise it waits schema.HandoverWait of the
// holder's lease TTL (which the holder's restore record carries, never the
// claimant's own) after the claim. The restore record (and a sync job's
// rollback) is written after that wait, right before serving, in a Txn
// that requires the claim, so it marks every handover and a lost claim
// publishes nothing.
// Keys and records are schema's: slot claims schema.SlotKey /
// schema.SlotRecord, restore records schema.RestoreKey, handover records
// schema.HandoverKey / schema.HandoverRecord, rollbacks schema.RollbackKey /
// schema.Rollback.
//
// Sync jobs stay one consistent model across slots:
//   - checkpoints are step-exact: each slot snapshots inside the completion
//     of every N-th step (pserver.Slot.SnapshotEvery), so version N of every
//     slot is the model after exactly N steps;
//   - each pass's evaluated parameters are a version too: an eval's pull
//     (PullRequest.checkpoint) makes each slot snapshot what it reads
//     (pserver.Slot.SnapshotOnPull), the same step on every slot since
//     training waits for the eval, and a lagging writer never skips such
//     a snapshot for a periodic one; the pass's metric names that version
//     (fsm/jobq), so `raftps checkpoint best` can pick any pass;
//   - when a slot is restored from version V, it publishes V under
//     schema.RollbackKey (/jobs/<job>/rollback) and every other slot of the
//     job reloads V (Horovod Elastic's restore-and-reset) into a new
//     Slot, which keeps the old one's trainers that had left the steps
//     (Slot.Away) so its steps do not wait for them;
//   - a slot served before that finds no globally consistent version
//     restores from the initializer and publishes version 0: the other
//     slots reset to the initializer too; but a restore that could not
//     reach a holder of the checkpoint (checkpoint.ErrUnreachable) serves
//     and publishes nothing: the claim is released and the slot claimed
//     and restored again after a wait (Poll, doubling up to 10 s);
//   - each rollback starts a new trajectory epoch, and versions are
//     epoch*schema.EpochStride + step, so no version can combine slots of an
//     abandoned trajectory with the new one; a rollback is written only
//     over the record its writer read (mod revision compared), so two
//     slots restored at once take two epochs, one on top of the other,
//     and every slot follows the last;
//   - a sync step that waits Config.StepWaitWarn (10 s) or more for
//     trainers is logged with the trainers it waits for and those that
//     pushed (every live trainer is expected in every step, so one that is
//     alive but stuck holds the others up).
//
// Restores are recorded under schema.RestoreKey (/jobs/<job>/restores/<slot>,
// shown by `raftps job status`) and as PSERVER_RESTORED job events.
//
// A slot is claimed only if its share of the job's parameters and
// optimizer state (SlotBytes) fits in what Config.MemoryBudget has left
// after the node's other slots; otherwise it is left to other nodes and a
// SLOT_NOT_CLAIMED job event says why (budget.go). The node is never run
// out of memory by a job.
//
// A job with replicas >= 2 (issue 34; pserver/DESIGN.md, "Replicated
// slots") has, per slot, a schema.ReplicaRecord: the agent that claims a
// slot and builds it from the initializer places its backups on other
// live pserver nodes (Members that implement PServerPeers) before it
// serves; an agent named as a backup builds the same slot and serves it
// as a replica.Backup (Config.Replicas), but only for a record created
// after its process started: a restarted node's backups are gone, and it
// builds none for the records that name it from before (backups.go); the primary's pushes are
// acknowledged only once every in-sync backup applied them, a failed
// backup is dropped by a Txn that compares the record's epoch, and an
// agent whose backup the master promoted claims the slot and serves it at
// once, woken by its watch of the records (watchPromotions): no restore,
// no handover wait, no rollback (the epoch fences the old primary).
// Backups go to zones no member of the slot holds first (Config.Zone,
// PServerPeers' zones; pickBackups). A primary whose record names fewer backups than the job
// asks for (after a promotion, a drop, or a restore from a checkpoint)
// builds a new one from its snapshot while training goes on and joins it
// by an epoch-compared Txn (rereplicate.go). A primary that loses its
// lease with no in-sync backup holds its fenced slot's state over and
// serves it again with its next lease while the record names it
// (holdover.go). A slot not replicated (R = 1,
// rolled back) keeps the lease handover above. See replicas.go for what
// is not wired.
//
// Files by concern: agent.go (the agent, its lease and fencing), claims.go
// (reconciliation, claiming, restoring and releasing slots), replicas.go
// (replicated slots: placement, replication, promotion), backups.go (the
// backups a node holds, and its restart),
// rereplicate.go (new backups by state transfer), holdover.go (a lone
// primary's state kept across a fence), rollback.go
// (the sync rollback protocol), trainers.go (the trainer feed),
// checkpoints.go (checkpoint scheduling and writing), budget.go (the
// memory budget).
package agent
