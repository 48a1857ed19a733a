// Package master runs raftps' leader-only work and serves the Master and
// Cluster gRPC APIs on every node.
//
// The master is PaddlePaddle's master server (2017 cloud design) with its
// state moved into the Raft FSM: job specs, the todo/pending/done/failed
// task queues, passes and job events are FSM state (package fsm/jobq), so a
// master failover is a Raft election and nothing is rebuilt. This package
// only holds loops and RPC handlers.
//
//	m := master.New(master.Config{Logger: log}, store, gossip)
//	go m.Run(ctx)                                // follows leadership; idle on followers
//	master.NewService(store, gossip).Register(grpcServer)
//
// # Leader loop
//
// Run follows raftstore's leadership channel (fed by raft.Config.NotifyCh,
// as Consul's monitorLeadership). On gaining leadership it makes a
// linearizable read (an own-term barrier, then a wait for the FSM), so the
// FSM holds everything earlier leaders committed, and then, until
// leadership is lost:
//
//   - reconciles gossip membership into the Raft configuration
//     (reconcile.go): an alive
//     server node joins as a voter while there are fewer than MaxVoters
//     voters, as a non-voter after that, and a learner (schema.LearnerKey,
//     written by MemberAdd with is_learner) as a non-voter until
//     MemberPromote; a node that left gracefully is
//     removed; a failed one is only marked unhealthy and removed after
//     DeadServerTimeout, never below three voters (raft-autopilot's rule);
//     a schema.NodeRecord per node (schema.NodeKey) is written from gossip
//     for each node that proved its identity (verified) or is a Raft
//     member at gossip's Raft address;
//     the server role is gossip.RoleServer;
//   - releases a node that gossip declares dead or left: the pending tasks
//     of its trainers are requeued at once (COMMAND_REQUEUE_TRAINER) and the
//     leases of its trainer and pserver keys revoked, so sync steps go on
//     and other nodes claim its pserver slots without waiting for a TTL.
//     For each slot it held, a schema.HandoverRecord tells the next
//     claimant how long the node, if only partitioned, may still serve:
//     schema.HandoverWait from the age of the lease's last keepalive at
//     this leader (raftstore.Store.LeaseLastKeepAlive, read after the
//     revoke applied) or, when this leader saw no keepalive of the lease
//     (it took over since), from the start of its leadership
//     (raftstore.Store.LeaderSince: keepalives are acknowledged only after
//     a quorum confirms the leader, so every one an earlier leader took
//     arrived before); none is written when this server does not lead, and
//     the claimant then waits a whole TTL. A node that died before this leader took over is released on
//     the next reconciliation, since its gossip event is gone.
//     Before the revoke, each replicated slot (issue 34) whose record
//     names the node as primary (claimed or not) is failed over
//     (replicas.go): its schema.ReplicaRecord
//     moves to an alive in-sync backup in one Txn that compares its
//     epoch, and that node's agent serves the slot it holds once the
//     claim is freed (no restore, no handover wait); a backup whose node
//     restarted since the record named it (another gossip instance)
//     holds nothing and is passed over; a record with no such backup is
//     deleted, and the slot restores as with R = 1;
//   - sweeps task deadlines (COMMAND_EXPIRE_TASKS; the FSM decides with the
//     leader's clock stamped in the entry) and requeues the tasks of
//     trainers whose registration key vanished; and fails over replicated
//     slots whose primary holds no claim (orphans.go): at once when the
//     primary is not alive in gossip (a survivor of --force-new-cluster
//     never hears of the dead), after ClaimLapseGrace when it is (its
//     lease lapsed while cut off from the leader), by promotion only.
//   - prunes finished jobs past Config.KeepFinishedJobs and
//     Config.FinishedJobMaxAge (COMMAND_PRUNE_JOBS), and their keys; ages
//     are cluster time, and it proposes a prune only when the FSM's rule
//     (jobq PruneDue) names a job at its estimate of the entry's clock, so
//     every prune deletes something.
//
// # Services
//
// Every Master RPC is a Raft command applied through the store's typed
// methods (raftstore.Store.SubmitJob, GetTask, ...), which forward to the
// leader, so any node serves any call; errors leave through
// rpctypes.ToStatus, the one table. Writes are exactly-once for a client
// that sends a request id (raftstore/client does): a retried GetTask gets
// the same task, a retried SubmitJob its first answer. Reads (GetJob, ListJobs, WatchJob) are
// linearizable and assemble trainers, pserver slots, checkpoint pointers
// and restore records from the job's keys with package schema's parsers. WatchJob streams a
// job's events gap-free from any sequence number and resumes on another
// node after a failure. DeleteJob removes a job that is not running and
// then its keys under schema.JobPrefix. SubmitJob rejects a bad spec with InvalidArgument
// naming the field (the dataset path is checked on the receiving node; the
// rest deterministically in the FSM, including the cluster-wide cap
// jobspec.MaxJobBytes), and a valid job that does not fit in the memory
// budgets the live nodes announce in gossip with ResourceExhausted naming
// the need and the capacity (admission.go: the slots packing whole into the
// pserver budgets, Σ floor(budget / slot share) >= slots; the dense model
// and gradients within the largest trainer budget; a kind of node that no
// live member announces a budget for is not checked). A spec that leaves
// replicas 0 gets 2 when at least two live pserver nodes exist and the
// job passes admission with two copies of each slot, else 1; the choice
// and its reason (JobSpec.replicas_default, "capacity for 2", "only 1
// pserver node") are written into the spec before the Raft command, so
// they are decided once and kept through snapshots and restarts.
//
// ReportSuspect (suspect.go; issue 34) takes reports of a replicated
// slot's suspect primary (a trainer's failed call, a backup's broken
// replication stream) on any node: Suspects probes the primary's pserver
// endpoint with a deadline of the failover timeout
// (--pserver-failover-timeout) and, only if the probe fails, promotes an
// alive in-sync backup with the epoch-compared Txn of a failover, which
// also deletes the old primary's claim, and releases the failed node's
// trainers of the job (tasks requeued, leases revoked) so that a sync
// step stops waiting for them; at most one probe per slot per timeout, so
// reports are cheap and cannot force a failover of a primary that
// answers. Suspects.CheckAll checks every replicated slot's primary so;
// the node runs it as its leader loop starts (Config.OnLeader), so a
// primary that died with the old leader, or while there was none, is
// failed over without waiting for a report or for gossip.
// Suspects.FollowGossip (suspect_gossip.go) is the third source:
// on the Raft leader it reports every slot whose primary's node gossip
// suspects (gossip.EventSuspect). raftps_pserver_suspect_reports_total
// counts reports by source (trainer, replication, gossip) and verdict
// (Collectors).
//
// The Cluster service's membership changes (members.go) run on the
// leader only (Unavailable, NOT_LEADER, elsewhere; the CLI finds the
// leader): MemberAdd (etcd's member add; AlreadyExists for an id or
// address present), MemberPromote (a learner in the leader's term within
// PromoteMaxLag entries of its log, asked over Internal.RaftProgress;
// else FailedPrecondition; NotFound for an unknown id) and MemberRemove
// (a server gone for good).
//
// Concurrency: Master's methods are for one Run goroutine; Service is safe
// for concurrent use.
package master
