// Package main is the raftps command, the one binary of a raftps cluster.
//
// `raftps node` parses its flags into a node.Config and runs a node.Node
// (package node: the Raft store, gossip, the master, the gRPC API and the
// pserver and trainer agents of the node's roles). Every other subcommand
// is a client of the gRPC API over --endpoints, laid out like etcdctl:
// ctl.go holds the root command with the one list of subcommands, one
// file per command group and a named function per subcommand
// (newKVPutCmd, newSnapshotRestoreCmd, ...: kv.go, lease.go and
// lease_list.go, member.go, endpoint.go, status.go, job.go, train.go,
// checkpoint.go, snapshot.go, version.go, demo.go, dev.go, lock.go: lock
// and elect run etcd's client v3 concurrency.Mutex and Election over the
// node's etcd API; member add|promote|remove go to the leader). The work
// that needs no cluster (snapshot files, snapshot restore, the export
// file) is package cmd/raftps/offline (etcd's etcdutl); the local
// clusters of demo and dev and the demo's fault schedule are package
// cmd/raftps/demo,
// globals.go the client flags (--endpoints,
// --dial-timeout, --command-timeout, each also from RAFTPS_<FLAG>), and
// printer.go the output formats of --output/-o (alias --write-out/-w):
// simple (default), json (one object per result, snake_case keys, lists
// as fields; a stream of such objects for kv watch and lease keepalive:
// the shape is documented in printer.go) or table; any other
// value is an error. configfile.go reads `raftps node --config-file`.
// demo starts a local 3-node cluster as child processes and trains on
// Fashion-MNIST while killing nodes; dev (Consul's `agent -dev`) starts
// the same cluster with the demo's start and runs it until Ctrl-C,
// printing the export RAFTPS_* lines of its admin certificate (--dir keeps
// it and starts it again later: localcluster.Save/Load). The benchmark is
// cmd/raftps-bench.
//
//	raftps node --id n1 --data-dir /var/lib/raftps --join 10.0.0.2:7002,10.0.0.3:7002 --bootstrap-expect 3
//	raftps kv put /hello world
//	raftps endpoint status --cluster -w table
//	raftps member add n4 --peer-urls 10.0.0.4:7001 --learner   # then start n4 with --join
//	raftps member promote n4                                   # once it is in sync with the leader
//	raftps train --model mlp --pservers 2 --mode sync
//
// Signals become a context: SIGINT/SIGTERM close the node in reverse order
// (agents release their leases, RPCs stop, leadership is handed over, the
// node leaves gossip, stores close). Errors from the cluster carry their
// gRPC code. Exit codes (exitcode.go, the one place that decides them):
//
//	code  kv, lease, member, endpoint,       train, demo, checkpoint,
//	      snapshot, lock, elect (etcdctl's)   job, node and the rest
//	0     success                             success
//	1     any other error                     any error not below
//	2     no node reachable (ErrDial,         train: the job failed or was
//	      Unavailable)                        cancelled
//	3     malformed input (kv txn's stdin)    train: accuracy below target
//	4     not served (Unimplemented)          demo: a fault not survived
//	5     -                                   checkpoint verify: mismatches
//	128   bad flags or arguments              -
//	N     lock NAME COMMAND: COMMAND's exit status
package main
