// Package checkpoint stores, replicates, points to and restores parameter
// server checkpoints: per virtual shard (vshard) blobs, content-addressed by
// MD5 in each node's Pebble, listed by a manifest per (job, version, slot),
// and named by a pointer /jobs/<job>/checkpoints/<slot> in the Raft
// metadata store.
//
// # Usage
//
//	st, _ := checkpoint.Open(filepath.Join(dataDir, "checkpoints"), logger)
//	pb.RegisterCheckpointStoreServer(grpcServer, checkpoint.NewService(st, logger))
//	mgr, _ := checkpoint.New(checkpoint.Config{NodeID: id, Host: host,
//		Store: st, Meta: raftStore, Peers: gossipPeers})
//
//	// pserver, every N steps, from a consistent in-memory snapshot:
//	ptr, err := mgr.Writer(job, slot).Checkpoint(ctx, checkpoint.WriteRequest{
//		Job: job, Slot: slot, NumPservers: p, Version: step, Step: step,
//		Incarnation: inc, Blobs: blobs, Policy: spec.CheckpointPolicy})
//
//	// pserver, on claiming a slot:
//	blobs, rec, err := mgr.Restore(ctx, checkpoint.RestoreRequest{
//		Job: job, Slot: slot, NumPservers: p})
//	// blobs == nil: initialize (rec.Reason says why); else decode blobs.
//	// errors.Is(err, checkpoint.ErrUnreachable): a replica holder could
//	// not be asked; retry later, do not initialize.
//
// # Design
//
// DESIGN.md beside this file gives the write protocol and why its order
// matters (the invariants it buys, restore's walk, async jobs), the
// storage of blobs and manifests, and the bounds on hostile input.
//
// # Caller's duties
//
//   - Blobs come from a consistent snapshot: encode under the lock, or copy
//     under the lock and encode the copy (Paddle encoded after unlocking
//     while updates kept writing the same memory: torn checkpoints). Each
//     blob is self-describing and carries optimizer state (ElasticDL lost
//     it).
//   - Versions increase per slot; in sync jobs all slots use the same
//     version for the same step (e.g. the step itself), otherwise no version
//     is globally consistent.
//   - One Writer per slot; its Checkpoint calls do not overlap.
//
// # Concurrency
//
// Store, Service, Client and Manager are safe for concurrent use. A Store's
// garbage collection excludes concurrent blob/manifest writes, and blobs
// written without their manifest yet are pinned for 10 minutes.
//
// # Sources
//
//   - PaddlePaddle, "Design Doc: The Client Library of Parameter Server" and
//     "Parameter Server Checkpointing" (doc/design/cluster_train/checkpointing.md,
//     2017): UUID-named snapshot, MD5, /checkpoints/<pserver_id> pointer in
//     etcd, delete older snapshots, restore on restart, fall back to the
//     initializer. Its bugs (torn snapshot, delete before pointer, no fsync,
//     panic on bad checkpoint) are what the order above avoids.
//   - ElasticDL (sql-machine-learning/elasticdl), checkpoint saver:
//     versions, variables-{i}-of-{n}, keep_checkpoint_max, repartition when
//     the number of pservers changes, export the best model by eval metric.
//     Its bugs (no checksum, no optimizer state, keep_checkpoint_max=0
//     deleting every checkpoint) are fixed here.
//
// # Files
//
// manifest.go (the Manifest, its encoding, validation and Pebble keys),
// store.go (the Pebble Store), gc.go (deleting versions, collecting blobs), writer.go (the write protocol), restore.go,
// ops.go (list, verify, export), prune.go, service.go (gRPC service and
// Client). Metadata keys and the pointer's encoding are package schema's
// (schema.CheckpointKey, schema.SlotKey, schema.MarshalPointer).
//
// The export file format is described in FORMAT.md.
package checkpoint
