// Package offline is the work of the raftps subcommands that need no
// running cluster, kept apart from the cluster clients of package main as
// etcd keeps etcdutl apart from etcdctl:
//
//   - snapshot files (`snapshot status`, and the check `snapshot save`
//     makes before it keeps a file): InspectSnapshotFile, ReadSnapshotFile;
//   - seeding a new node's data dir from one (`snapshot restore`): Restore,
//     ParseInitialCluster;
//   - the export file of `checkpoint export`: its formats (ExportAs,
//     VShardDecoder) and its atomic write with chosen permission bits
//     (WriteFileAtomicMode, ParseFileMode). The parameters themselves are
//     read from the cluster's replicas by a checkpoint.Manager.
//
// For example:
//
//	info, err := offline.InspectSnapshotFile("backup.db")
//	res, err := offline.Restore(offline.RestoreConfig{File: "backup.db", DataDir: dir, ID: "n1", RaftAddr: "10.0.0.1:7001"})
//
// Errors: ErrBadSnapshotFile for a file that is not a whole snapshot (a
// newer format wraps fsm.ErrNewerFormat instead), and the errors of
// raftstore.SeedFromSnapshot. Functions are safe for concurrent use.
package offline
