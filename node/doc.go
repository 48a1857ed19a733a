// Package node is one raftps node as a library (etcd's server/embed,
// rqlite's cluster/bootstrap.go): `raftps node` parses its flags into a
// Config and runs a Node; tests build one in-process.
//
//	cfg := node.DefaultConfig()
//	cfg.ID, cfg.DataDir = "n1", "/var/lib/raftps"
//	cfg.Join = []string{"10.0.0.2:7002", "10.0.0.3:7002"}
//	cfg.BootstrapExpect = 3
//	n, err := node.New(cfg) // validates; no I/O
//	if err != nil { ... }
//	err = n.Run(ctx)        // Open, serve until ctx ends or the node fails, Close
//
// # What a node runs
//
// Open starts, in this order: the data dir lock; the listeners (the three
// gRPC service classes of DESIGN.md, HTTP); gossip
// (members and their roles and addresses; the forwarder resolves the
// leader's gRPC address from it); the Raft store over the FSM
// (raftstore, fsm) in <DataDir>/raft; the gRPC services (KV, Lease, Watch,
// Internal forwarding, Master, Cluster, CheckpointStore, and PServer and
// Replica with the pserver role); the checkpoint blob store in <DataDir>/checkpoints
// with its pruning loop; the pserver and trainer agents of the node's
// roles (gossip.RoleServer, RolePServer, RoleTrainer); the master's leader
// loop (it acts only while this node leads); bootstrap-expect; and the
// HTTP server (/healthz, /readyz, /metrics, and the web dashboard at /:
// package dashboard). Close undoes it in reverse
// order: agents release their leases, RPCs stop, leadership is handed over,
// the node leaves gossip, stores close. Close is safe twice.
//
// The design notes of this package ("gRPC service classes", "Resource
// limits", "Security", "Disk space", "Memory budgets", "Data dir", "Raft
// log store", "Bootstrap", "Raft timing", "Failure") are in DESIGN.md in
// this directory.
package node
