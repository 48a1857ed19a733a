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
// Open starts, in this order: the listeners (gRPC API, HTTP); gossip
// (members and their roles and addresses; the forwarder resolves the
// leader's gRPC address from it); the Raft store over the FSM
// (raftstore, fsm) in <DataDir>/raft; the gRPC services (KV, Lease, Watch,
// Internal forwarding, Master, Cluster, CheckpointStore, and PServer with
// the pserver role); the checkpoint blob store in <DataDir>/checkpoints
// with its pruning loop; the pserver and trainer agents of the node's
// roles (gossip.RoleServer, RolePServer, RoleTrainer); the master's leader
// loop (it acts only while this node leads); bootstrap-expect; and the
// HTTP server (/healthz, /readyz, /metrics). Close undoes it in reverse
// order: agents release their leases, RPCs stop, leadership is handed over,
// the node leaves gossip, stores close. Close is safe twice.
//
// # Data dir
//
// Open first takes <DataDir>/LOCK (flock, exclusive, never waiting) and
// writes its pid into it; the kernel releases it when the process exits,
// however it exits. A second node on the same data dir fails at once with
// ErrDataDirLocked naming the dir and the holding process (pid and command
// line) instead of waiting forever in bolt's own flock. No start-up step
// waits for something that may never come (gossip joins and
// bootstrap-expect wait in the background), and Open checks its context
// between steps, so SIGTERM stops a starting node too.
//
// # Bootstrap
//
// With no Join and BootstrapExpect <= 1, a server node bootstraps a
// single-node cluster. With BootstrapExpect = k > 1 it waits until gossip
// shows k alive server nodes, asks them whether any is already in a
// cluster (then the leader adds it), and otherwise bootstraps all k with
// the same configuration (Store.Bootstrap; Consul's bootstrap_expect). A
// restarted node has Raft state and never bootstraps, so the same flags
// serve every start. Nodes without RoleServer join as Raft non-voters.
//
// # Failure
//
// Failed reports a condition the node cannot run with (its ID is used by
// another live member); Run then closes the node and returns the error.
package node
