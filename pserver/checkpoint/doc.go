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
//
// # The write protocol and why its order matters
//
// A checkpoint of one slot is written in four steps, each one durable before
// the next begins:
//
//  1. Blobs, then the manifest, into the local Pebble, each write synced
//     (pebble.Sync). A manifest is only stored if every blob it names is
//     present, so a manifest never names a missing blob.
//  2. Copies of blobs and manifest to R-1 other nodes (policy.replicas,
//     default 2), preferring other hosts. Each receiver verifies every blob's
//     MD5 before storing it, and stores the manifest last. If fewer peers
//     exist or answer, the checkpoint proceeds and the pointer's replicas
//     records who really holds it.
//  3. The pointer, a protojson pb.CheckpointPointer naming the manifest's
//     MD5, the version, the replicas and the kept versions, committed by a
//     Txn whose compares are the slot's ps key /jobs/<job>/ps/<slot> (mod
//     revision and value: the writer's incarnation) and the pointer's own mod
//     revision. A pserver whose slot was re-claimed (a zombie) gets ErrFenced
//     and the pointer does not move. The kept versions obey keep_max but
//     always include the newest version every slot names; a commit that
//     drops versions also compares the mod revisions of the other slots'
//     pointers it decided on, and decides again if one moved, so concurrent
//     commits can never leave the job without a globally complete version.
//  4. Only then, versions beyond keep_max are deleted: manifests first, then
//     those of their blobs no remaining manifest references (reference
//     counting by a scan of the manifests; Store.GCBlobs), locally and
//     on the replicas (best effort: an orphan costs disk, never correctness;
//     Manager.Prune, run now and then on every node, sweeps what no pointer
//     names). A replica deletes through the DeleteVersions RPC, which it
//     checks against the slot's committed pointer (Service.WithMeta): it
//     never deletes a version the pointer names or one newer than it.
//
// Invariants this order buys: the pointer only ever names a version whose
// manifest and blobs are durable on every node it lists (1, 2 before 3); a
// crash anywhere before 3 leaves the previous pointer and everything it
// names intact, plus harmless orphans; a crash after 3 leaves the new
// version complete. Deletion after 3 means the versions a pointer names are
// never deleted while named (Paddle deleted the old snapshot before the new
// pointer was written: a crash in between lost both). keep_max counts
// versions per slot: 0 keeps all (ElasticDL's keep_checkpoint_max=0 deleted
// everything), 1 only the new one, n the n newest; in addition the newest
// version that every slot names is never dropped while another slot has not
// yet committed a newer one, so a sync job always has a version to restore.
//
// Restore reads every slot's pointer and walks versions newest first. A
// version is usable if every old slot (0..num_pservers-1 of that version)
// names it — a globally consistent cut for sync training — and if the
// manifests and the needed blobs are found, MD5 verified, locally or on any
// replica. Needed vshards are taken from whichever old slot held them, so a
// job restarted with a different number of pservers is repartitioned by
// vshard (ElasticDL's variables-{i}-of-{n}). On failure the next older kept
// version is tried; if none works, blobs is nil and the record's reason
// starts with "initializer:". Every decision is logged with its reason and
// recorded in the pb.RestoreRecord. Restore never panics on bad data (Paddle
// panicked on a bad checkpoint instead of falling back).
//
// Async jobs (RestoreRequest.Async) have no global cut: their slots
// checkpoint at unrelated versions (e.g. updates applied), so each old slot
// contributes its own newest usable version and falls back independently.
//
// # Storage
//
// Blobs live under blob/<md5hex> in Pebble, one value per vshard (MBs to
// hundreds of MBs). A checkpoint of at least DefaultIngestThreshold bytes is
// hashed and written in one pipeline: MD5s many blobs at once in the SIMD
// lanes of minio/md5-simd, each blob written as soon as its MD5 is known
// as an uncompressed one-key external sstable (xxhash64 block checksums:
// less CPU than crc32c), fsynced, and all of them ingested at once (the
// bytes are written once, like a plain file; through the WAL they would be
// written twice); smaller ones go through the WAL with one sync. Listing
// blob keys reads every blob's block back, so only Store.GC (Prune's
// backstop) lists them; a checkpoint's deletion names its candidates. Bloom
// filters keep presence checks of missing blobs from reading multi-MB
// blocks. Readers re-hash every blob (GetBlob, VerifyBlob): a flipped byte
// is ErrCorrupt naming the md5, never silently restored. Each manifest is
// stored with its MD5 and re-hashed on read, and checked against the md5
// its pointer records (kept versions' md5s too, kept_md5s); a stored
// manifest is never replaced by different bytes.
//
// # Hostile input
//
// Bytes from peers and disk are bounded before anything is allocated from
// them: manifests (num_pservers ≤ MaxManifestPservers, vshards ≤
// MaxManifestVShards, blob sizes ≤ MaxBlobSize, sums overflow-checked, and a
// version's slot count is checked against the pointers before any loop over
// it); PutBlob and GetBlob buffers grow with the data and stop at the size
// announced or promised by the manifest; PutBlob streams per peer are
// bounded (MaxStreamsPerPeer); export shape products and offsets are
// overflow-checked (MaxExportValues) and its memory is bounded by the
// decoded blocks, not the shapes; blob-reading workers recover panics into
// errors.
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
