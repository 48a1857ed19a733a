// Package main is the raftps command, the one binary of a raftps cluster.
//
// `raftps node` runs a node: the embedded Raft metadata store, gossip, the
// master's leader loop, the gRPC API and the pserver and trainer agents of
// the node's roles (Node in node.go is the lifecycle: NewNode, Open, Close;
// tests build it directly). Every other subcommand is a client of the gRPC
// API over --endpoints: kv, lease, members, status, job, train, checkpoint,
// and demo, which starts a local 3-node cluster as child processes and
// trains on Fashion-MNIST while killing nodes.
//
//	raftps node --id n1 --data-dir /var/lib/raftps --join 10.0.0.2:7002,10.0.0.3:7002 --bootstrap-expect 3
//	raftps kv put /hello world
//	raftps train --model mlp --pservers 2 --mode sync
//
// Signals become a context: SIGINT/SIGTERM close the node in reverse order
// (agents release their leases, RPCs stop, leadership is handed over, the
// node leaves gossip, stores close). Errors from the cluster carry their
// gRPC code; exit codes: 1 error, 2 job failed, 3 accuracy below target,
// 4 a demo fault not survived, 5 checkpoint verification found mismatches.
package main
