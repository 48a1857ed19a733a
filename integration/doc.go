// Package integration holds the tests that start real `raftps` processes on
// loopback: the cluster end-to-end tests here, and the Jepsen-style fault
// suite in integration/jepsen.
//
// harness.go builds the clusters (NewCluster over internal/testing/localcluster):
// mutual TLS and gossip encryption by default, the admin's certificate for
// the Go client (Cluster.Client, Cluster.DialOptions) and the CLI
// (Cluster.CLI); a test about plaintext says --insecure.
//
// The tests, by file:
//   - cluster_test.go, startup_test.go: bootstrap, --join, restarts, a
//     wrong or busy data dir, follower forwarding;
//   - training_test.go, master_test.go: jobs trained to their end under
//     SIGKILLs (requeue, slot handover, checkpoint restore and rollback);
//   - security_test.go, rotation_test.go: what mutual TLS and roles refuse,
//     certificate and gossip keyring rotation under load;
//   - ops_test.go, ops_offline_test.go, member_test.go: snapshot
//     save/restore, --force-new-cluster, member add/promote/remove,
//     endpoint status, `make demo` with no route out;
//   - etcd_*_test.go: etcdctl and etcd's Go client against raftps, side
//     by side with a real etcd;
//   - bench_test.go, security_bench_test.go: benchmarks on real processes.
//
// The package runs as part of `go test ./...` (make test); the offline
// demo test runs `raftps demo` in a network namespace with no route out
// (`unshare --net --map-root-user`).
package integration
