// Package pserver is raftps's parameter server: it holds a job's
// parameters cut into virtual shards, applies trainers' gradients with an
// optimizer (pserver/optim: SGD, momentum, Adam, Adagrad) in sync or async
// mode, snapshots shards for checkpoints, and serves it all over gRPC
// (Slot, Server). The rest of the parameter-server code is in packages a
// trainer can link without this one:
//
//   - pserver/wire: what server and client share: the sharding Layout,
//     the tensor codec, the error sentinels, transport and socket tuning;
//   - pserver/psclient: the trainers' Client;
//   - pserver/optim: the optimizers, a deterministic Apply per entry;
//   - pserver/vshard: the on-disk vshard blob format;
//   - pserver/checkpoint: storage and replication of blobs;
//   - pserver/replica: primary-to-backup replication of a slot's updates
//     (Slot.OnUpdate, Slot.ApplyReplicated, and Slot.SetAckGate, which holds a
//     push's reply until its backups applied it; wired by pserver/agent).
//
// # Sharding
//
// A job's parameters are cut into V = num_virtual_shards (default 64)
// virtual shards, the unit of checkpoint and repartitioning: dense tensors
// by block of dense_block_size float32s (wire.VShardOfBlock), embedding
// tables by row (wire.VShardOfRow; a row is stored from its first push).
// Vshard v is served by slot v mod n of the job's n pservers. Initial
// values are seeded by (job seed, parameter, block or row), so every
// partitioning yields the same model.
//
// # Update modes
//
// Async (Li et al. 2014; the Paddle pserver's async SGD): every push is
// applied on arrival; with staleness bound k > 0 a push computed on a
// version older than Version()-k fails with FailedPrecondition and the
// trainer re-pulls (stale-synchronous parallel).
//
// Sync (Paddle's "synchronous SGD"; membership as in Horovod Elastic): one
// update per step, the example-weighted average Σ nᵢgᵢ / Σ nᵢ of the
// gradients of the step's members, fixed at its first push from the set
// SetTrainers gives; a step completes when each has pushed or left
// (LeaveStep, or removal by SetTrainers), so a dead trainer never hangs
// the others. Push blocks until the step completes.
//
// Every push carries a push id, the same on each retry; a slot applies a
// push id at most once and answers a retry with the version the first
// attempt produced (the slot's memory, not in checkpoints).
//
// # Hostile input, fencing, checkpoints
//
// Nothing a trainer sends is trusted: pushes are validated tensor by
// tensor (MaxGradient, MaxExamples, MaxTrainerIDLen, no block or row
// twice), an update is committed only if every result is finite (else
// InvalidArgument, slot unchanged), and named pulls are capped at
// wire.MaxPullBytes. A pserver claims a slot with ClaimSlot (incarnation =
// the claim key's create_revision) and guards its metadata writes with
// FenceCompare. On lease loss the node calls Slot.Fence (or
// Server.Unhost); the slot also checks its lease's serve-until (Deadline,
// Slot.SetDeadline) on every request and before every reply, so a paused
// node answers Unavailable and clients re-resolve. A replicated slot's
// primary serves under its record's epoch (Slot.SetEpoch; Slot.Depose once
// a backup refused it): a Pull or Push naming another epoch is refused with
// wire.ErrEpoch (FailedPrecondition) before it reads or applies anything,
// and the client resolves the slot again (epoch 0 is not checked).
// Slot.Snapshot,
// SnapshotEvery and SnapshotOnPull copy state copy-on-write; EncodeVShard
// writes one vshard blob and RestoreSlot rebuilds a slot from the blobs of
// the vshards it owns, whatever number of pservers wrote them.
// DESIGN.md gives the reasons and the details of each.
//
// # Usage
//
// On a pserver node:
//
//	s, err := pserver.NewSlot(spec, slot, spec.NumPservers) // or RestoreSlot
//	s.SetDeadline(until) // the lease's serve-until (Deadline)
//	srv := pserver.NewServer()
//	srv.Host(spec.Name, slot, s)
//	gs := grpc.NewServer(wire.ServerOptions()...)
//	pb.RegisterPServerServer(gs, srv)
//	lis, err := wire.Listen(addr) // SocketBufferBytes socket buffers
//	go gs.Serve(lis)
//	// on /jobs/<job>/trainers/ changes: s.SetTrainers(ids)
//	// on lease loss:                    srv.Unhost(spec.Name, slot)
//
// On a trainer: psclient.NewClient (pserver/psclient's doc).
//
// # Concurrency
//
// Slot and Server are safe for concurrent use. A Slot serializes updates
// with one lock; pulls share it. Within one update, the entries' dry runs
// and commits, and a sync step's mean, run in chunks on every core
// (runChunks: the handler and GOMAXPROCS-1 helper goroutines shared by all
// slots). Errors carry gRPC codes (status.Code works on them) and wrap the
// sentinels of pserver/wire.
//
// # Sources
//
//   - PaddlePaddle cloud design (2017), doc/design/cluster_train:
//     parameter_server.md, pserver_client.md, checkpointing.md.
//   - M. Li et al., "Scaling Distributed Machine Learning with the Parameter
//     Server", OSDI 2014.
//   - Horovod Elastic (horovod.ai, docs/elastic.rst): membership changes
//     between steps, learning rate scaled by the number of workers.
//   - Glorot & Bengio 2010 (initializer); the optimizers' in pserver/optim.
package pserver
