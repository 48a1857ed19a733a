// Package replica replicates a parameter server slot from its primary to
// its backups, fenced by the slot's replica epoch (pserver/DESIGN.md,
// "Replicated slots"; issue 34).
//
// The slot's configuration {epoch, primary, in-sync backups} is kept in
// Raft; updates travel only on this package's path. The primary's slot
// reports each update it applies (pserver.Slot.OnUpdate: the gradient the
// optimizer applied, the learning rate scale, the push ids it completes,
// seq = the version after it); a Replicator stamps the primary's epoch
// on it and sends it to every in-sync backup, and returns only when every
// one acknowledged it at that epoch, or with a *BackupError naming the
// backups that did not (the caller asks the leader to drop them with a
// Raft commit that bumps the epoch, and acknowledges nothing meanwhile).
//
// A Backup applies each update through pserver.Slot.ApplyReplicated, the
// optimizer code the primary ran, in seq order, so its slot ends byte
// identical to the primary's, push-id memory included (a trainer's retry
// on a promoted backup is answered, not applied twice). It refuses a
// request whose epoch is older than the one it knows (ErrStaleEpoch,
// FailedPrecondition, naming both epochs): a deposed primary cannot
// complete an acknowledgement once the backup learned the newer epoch
// (SetEpoch, from the watch of the slot's record, or any request of the
// new primary). Requests that arrive ahead of their turn are buffered, not
// refused: a call for seq n waits until n-1 is applied, at most MaxPending
// ahead of the applied seq (else ErrTooFarAhead, ResourceExhausted); a
// request at or below the applied seq is a duplicate and is acknowledged
// without being applied again. Adopting a newer epoch fails the calls of
// older epochs still waiting.
//
//	b := replica.NewBackup(job, slot, epoch)     // slot: a pserver.Slot built like the primary's
//	r := replica.NewReplicator(epoch, map[string]replica.Peer{"n2": peer})
//	primary.OnUpdate(func(u *pb.ReplicateRequest) { queue <- u })
//	err := r.Replicate(ctx, <-queue)          // before the push is acknowledged
//
// Over the network, a node serves its backups with Service (the Replica
// service's Replicate stream: requests applied concurrently, acks sent as
// each applies) and a primary reaches each backup through a Stream, a
// Peer over one such stream whose failure status maps back to the
// sentinels (so BackupError.Deposed works across gRPC). Requests go with
// the tensor codec (pserver/wire): gradients leave from their buffers and
// arrive in data-pool buffers, returned once applied. A request whose
// turn it is is applied in the stream's receiving goroutine; only one
// ahead of its turn waits in its own.
//
// Wired (issue 34): the node registers Service on its pserver port
// (/raftps.v1.Replica/Replicate: role node only); pserver/agent places
// backups, holds them, runs a Replicator per replicated primary and makes
// pushes wait for it (pserver.Slot.SetAckGate); the master promotes a
// backup when the primary's node is gone; re-replication builds a new
// backup from the primary's snapshot (Install, Service.Install with the
// node's Installer; then Stream.Send/Wait for the updates after it).
// Not wired: trainers' epoch handling (a deposed primary answers
// ErrFenced instead; pserver/DESIGN.md, "Replicated slots", Status).
package replica
