// Package pserver is raftps's parameter server: it holds a job's parameters
// cut into virtual shards, applies trainers' gradients with an optimizer
// (SGD, momentum, Adam, Adagrad) in sync or async mode, snapshots shards for
// checkpoints, and serves it all over gRPC; Client is the trainers' side.
//
// # Sharding
//
// A job's parameters (JobSpec.params) are cut into V = num_virtual_shards
// (default 64) virtual shards, the unit of checkpoint and repartitioning:
//
//   - a dense tensor is flattened row-major and split into blocks of
//     dense_block_size float32s (default 65536); block b of parameter p lives
//     in vshard VShardOfBlock(p, b, V) = (FNV-1a-32(p) + b) mod V, so a large
//     tensor spreads over every pserver;
//   - an embedding table [buckets, dim] is split by row: row r lives in
//     VShardOfRow(p, r, V) = FNV-1a-64(p ‖ r) mod V; a row is stored from
//     its first push (a pull of a row never pushed returns its initial
//     value and stores nothing).
//
// Vshard v is served by slot SlotOfVShard(v, n) = v mod n of the job's n
// pservers. Initial values are drawn from a generator seeded by (job seed,
// parameter name, block or row), so every partitioning yields the same model.
//
// # Update modes
//
// Async (Li et al. 2014, "Scaling distributed machine learning with the
// parameter server", OSDI; the Paddle pserver's async SGD): every push is
// applied on arrival; with staleness bound k > 0 a push computed on a
// version older than Version()-k fails with FailedPrecondition and the
// trainer re-pulls (stale-synchronous parallel).
//
// Sync (the Paddle pserver design's "synchronous SGD"; membership handled as
// in Horovod Elastic): one update per step from the gradients of the
// trainers of the current membership epoch. The node calls SetTrainers with
// /jobs/<job>/trainers/ whenever it changes. A step's members are fixed at
// its first push; a step completes when each has pushed or left (LeaveStep,
// or removal by SetTrainers, e.g. its lease expired), so a dead or finished
// trainer never hangs the others. The update uses the example-weighted
// average Σ nᵢgᵢ / Σ nᵢ: k trainers are exactly one process on the
// concatenated batch, each element summed in float64 in the order the
// pushes were counted. Push blocks until the step completes; the step
// reads each push's gradient from the request when it completes (a push
// that stops waiting first folds the pushes up to its own into one float64
// sum per key).
//
// Retries: every Client.Push carries a push id (PushRequest.push_id, the
// same on each retry); a slot applies a push id at most once and answers a
// retry with the version the first attempt produced, keeping the last 64
// ids of up to 4096 trainers. The memory is the slot's, not in
// checkpoints: a slot restored on another node has forgotten it, so an
// async retry there applies even if the restored checkpoint held the push
// (a sync retry is stale there: it names the old incarnation).
//
// # Hostile input
//
// Nothing a trainer sends is trusted (DESIGN.md, "Validation before
// mutation"): pushes are validated tensor by tensor (also per message of
// PushStream) with |g| <= MaxGradient, examples <= MaxExamples, trainer ids
// of at most MaxTrainerIDLen bytes and no block or row twice, and an update
// is committed only if every resulting value and optimizer state is finite
// (else InvalidArgument, slot unchanged). A sync push from a trainer not in
// the trainer set waits at most MemberWait. Named pulls are sized before allocating, refuse duplicates
// and are capped at MaxPullBytes; pulls never create rows. RestoreSlot
// refuses non-finite or negative-step state. The Client refuses pull
// responses carrying blocks of another slot.
//
// # Fencing
//
// A pserver claims slot i of a job with ClaimSlot: a Txn that creates
// /jobs/<job>/ps/<i> = {node, addr, incarnation} under the pserver's lease
// only if the key does not exist. The incarnation is the key's
// create_revision. Every later metadata write for the slot (checkpoint
// pointers) carries FenceCompare(job, i, incarnation), which fails once the
// lease expired or another pserver re-claimed the slot. When its lease is
// lost the node calls Slot.Fence (or Server.Unhost): from then on every call
// fails with gRPC Unavailable "slot lost its lease; re-resolve", blocked
// sync pushes included, and clients re-resolve the slot's new owner.
// Timers are not the only fence: the node attaches its lease's
// serve-until (Deadline, extended only by renewals that succeeded) with
// Slot.SetDeadline, and the slot checks it on every request and again
// before every reply, so a node paused past its deadline answers the
// requests queued meanwhile Unavailable, and an update that finishes after
// the deadline or a Fence is not acknowledged (Push says what the trainer
// sees then).
//
// # Checkpoints
//
// Slot.Snapshot, the step snapshots of Slot.SnapshotEvery and the eval
// snapshots of Slot.SnapshotOnPull (a pull with PullRequest.checkpoint
// snapshots what it reads, once per step) take values,
// optimizer state and update counts copy-on-write: under the slot's lock
// they only freeze the current buffers, and the copy is made outside it
// while updates go on (an update copies only a block it reaches first);
// the slot keeps at most one extra copy of itself (snapshot.go).
// EncodeVShard writes one
// vshard in a versioned, self-describing, CRC-checked binary format
// (documented in vshard.go); RestoreSlot rebuilds a slot from the blobs of
// the vshards it owns, whichever slots wrote them, so restoring with another
// number of pservers is just another choice of blobs. Storage and
// replication of blobs are in pserver/checkpoint.
//
// # Usage
//
// On a pserver node:
//
//	s, err := pserver.NewSlot(spec, slot, spec.NumPservers) // or RestoreSlot
//	s.SetDeadline(until) // the lease's serve-until (Deadline)
//	srv := pserver.NewServer()
//	srv.Host(spec.Name, slot, s)
//	gs := grpc.NewServer(pserver.ServerOptions()...)
//	pb.RegisterPServerServer(gs, srv)
//	lis, err := pserver.Listen(addr) // SocketBufferBytes socket buffers
//	go gs.Serve(lis)
//	// on /jobs/<job>/trainers/ changes: s.SetTrainers(ids)
//	// on lease loss:                    srv.Unhost(spec.Name, slot)
//
// On a trainer:
//
//	c, _ := pserver.NewClient(spec, trainerID, resolver)
//	params := c.NewParams()
//	for {
//		_ = c.Pull(ctx, params)
//		grads := model.Gradients(params, batch)
//		err := c.Push(ctx, &pserver.Grads{Dense: grads, Examples: n})
//		if errors.Is(err, pserver.ErrStale) { continue } // re-pull
//	}
//	_ = c.LeaveStep(ctx) // out of data (sync mode)
//
// Client.PushPull(ctx, grads, params) is Push then Pull in one round trip
// per slot: the push asks for the slot's parameters in its reply
// (PushRequest.pull), read after the update (sync: after the step). The
// trainer uses it for every step of a task but the last. Against the
// plain Push + Pull it lifted BenchmarkTrainerRPCvsLocal's median from
// 0.75-0.76x to 0.78-0.82x of in-process training (3 interleaved A/B runs).
//
// # Concurrency
//
// Slot, Server and Client are safe for concurrent use. A Slot serializes
// updates with one lock; pulls share it. Within one update, the entries'
// dry runs and commits, and a sync step's mean, run in chunks on every
// core (runChunks: the
// handler and GOMAXPROCS-1 helper goroutines shared by all slots). Errors carry gRPC codes
// (status.Code works on them) and wrap the sentinels of errors.go.
//
// # Replication
//
// Replicated slots (DESIGN.md, "Replicated slots"; package
// pserver/replica) rest on two hooks: Slot.OnUpdate reports every update
// a slot applies (async push, released sync step) as a
// ReplicateRequest (the gradient applied, learning rate scale, push
// ids, seq = version), and Slot.ApplyReplicated applies such an update to
// a backup's slot through the same validation and optimizer code, in seq
// order, so the backup ends byte-identical, push-id memory included. Not
// wired yet: pushes are still acknowledged without waiting for backups.
//
// # Sources
//
//   - PaddlePaddle cloud design (2017), doc/design/cluster_train:
//     parameter_server.md, pserver_client.md, checkpointing.md.
//   - M. Li et al., "Scaling Distributed Machine Learning with the Parameter
//     Server", OSDI 2014.
//   - Horovod Elastic (horovod.ai, docs/elastic.rst): membership changes
//     between steps, learning rate scaled by the number of workers.
//   - Optimizers: Kingma & Ba 2015 (Adam), Duchi, Hazan & Singer 2011
//     (Adagrad), Sutskever et al. 2013 (momentum, Nesterov), Glorot &
//     Bengio 2010 (initializer).
package pserver
