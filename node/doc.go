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
// gRPC service classes below, HTTP); gossip
// (members and their roles and addresses; the forwarder resolves the
// leader's gRPC address from it); the Raft store over the FSM
// (raftstore, fsm) in <DataDir>/raft; the gRPC services (KV, Lease, Watch,
// Internal forwarding, Master, Cluster, CheckpointStore, and PServer with
// the pserver role); the checkpoint blob store in <DataDir>/checkpoints
// with its pruning loop; the pserver and trainer agents of the node's
// roles (gossip.RoleServer, RolePServer, RoleTrainer); the master's leader
// loop (it acts only while this node leads); bootstrap-expect; and the
// HTTP server (/healthz, /readyz, /metrics, and the web dashboard at /:
// package dashboard). Close undoes it in reverse
// order: agents release their leases, RPCs stop, leadership is handed over,
// the node leaves gossip, stores close. Close is safe twice.
//
// # gRPC service classes
//
// The node serves gRPC on three listeners, one server per service class,
// each with its own limits (etcd separates client and peer listeners for
// the same reason): a limit fit for parameter traffic must not let a KV
// client make the node read 1 GiB, and client streams must not starve the
// data path. A call to a service of another class is refused with
// Unimplemented naming the node's three addresses, before its message is
// read.
//
//	class              address (Config)          services                         max recv   max send   streams/conn  buffers/conn
//	client API         GRPCAddr (7000)           KV, Lease, Watch, Cluster,        4 MiB     256 MiB    1000          2 x 256 KiB
//	                                             Master, CheckpointStore
//	pserver data path  PServerAddr (ephemeral)   PServer                           1 GiB       1 GiB    1000          2 x 1 MiB (+ pserver
//	                                                                                                                       window tuning)
//	node-to-node       PeerAddr (ephemeral)      Internal, CheckpointStore        64 MiB      64 MiB     256           2 x 1 MiB
//
// A message over "max recv" is refused by gRPC with ResourceExhausted
// before it is read into memory or reaches a handler (so a 64 MiB KV put
// never reaches Raft; the largest legal put is 1.5 MiB of value). Streams
// beyond the per-connection cap wait for a free one. The client API keeps
// its well-known port; PeerAddr and PServerAddr default to ephemeral ports
// on GRPCAddr's host, announced in gossip (Meta.PeerAddr, Meta.PServerAddr)
// and, for the data path, in the slot records trainers dial. CheckpointStore
// is on both: peers replicate blobs node-to-node, `raftps checkpoint` reads
// them on the client port; its PutBlob and DeleteVersions are served
// node-to-node only (a method-level rule of the class: on the client port
// they are refused with Unimplemented naming the node-to-node port).
//
// # Resource limits
//
// Every size and count a client controls, its cap and what happens at
// the cap (issue 32). Caps marked "node flag" are `raftps node` flags
// (Config fields); the others are constants of the package named.
//
//	what                        cap                                    at the cap
//	message received            4 MiB (client port; grpc.go)           ResourceExhausted by gRPC before it is read
//	message sent                256 MiB (client port)                   ResourceExhausted to the caller (a Range is built whole
//	                                                                    first: use limit; the backend quota bounds the store)
//	streams per connection      1000 (client port)                      further RPCs of that connection wait
//	key size                    1536 B (fsm.MaxKeySize)                 InvalidArgument, before the log
//	value size, admin and node  1.5 MiB (fsm.MaxValueSize)              InvalidArgument, before the log
//	value size, other roles     64 KiB (MaxRoleValueSize)               InvalidArgument on the client port (raftps's and etcd's
//	                                                                    Put and Txn), before the store
//	command size                4 MiB (fsm.MaxCommandSize)              InvalidArgument, before the log
//	txn ops                     128 in the compares and in each branch  InvalidArgument ("too many operations" on etcd's API),
//	                            (--max-txn-ops)                         before the log
//	txn response                4 MiB of keys and values               InvalidArgument naming the cap: a read-only txn is served
//	                            (fsm.MaxTxnResponseBytes)               without the log and refused before any result is built; a
//	                                                                    txn that writes is refused at the leader's gate and again
//	                                                                    in Apply before anything is built or changed (entries of
//	                                                                    older binaries included)
//	keys per job                10000 under /jobs/<job>/ (fsm.MaxJobKeys)     ResourceExhausted naming the job (Apply, deterministic;
//	bytes per job               64 MiB of keys and values (MaxJobKeyBytes)    recounted from the keys on restore); a trainer can write
//	                                                                          only its own jobs' keys, so this is its quota too
//	backend                     2 GiB of keys and values               ResourceExhausted at the leader's gate, and the NOSPACE
//	                            (--quota-backend-bytes)                 alarm key /alarms/nospace is written: every replica then
//	                                                                    refuses writes that add keys until an admin deletes keys
//	                                                                    and then the alarm key (deletes go on); etcd's API answers
//	                                                                    "database space exceeded", and `etcdctl alarm list` and
//	                                                                    `alarm disarm` show and delete the alarm
//	watchers per etcd stream    1000 (etcdapi.DefaultMaxWatchersPerStream)  the create is answered created+canceled, reason naming it
//	watchers per connection     5000 (raftstore.DefaultMaxWatchersPerConn)  same on etcd's API; ResourceExhausted on raftps's Watch
//	watchers per node           20000 (raftstore.DefaultMaxWatchers)        same
//	watch history               10000 revisions, 256 MiB                older revisions are compacted; a watcher behind them is
//	                            (fsm.HistoryRevisions, HistoryBytes)    canceled with compact_revision
//	lease TTL                   9e9 s (fsm.MaxLeaseTTL)                 InvalidArgument
//	leases                      100000 in the store (fsm.MaxLeases)     ResourceExhausted (Apply); no cap per identity yet
//	disk                        64 MiB free (--disk-reserve-mib)        ResourceExhausted for every write (Disk space below)
//	connections not yet         a handshake deadline and a cap in       closed (Raft, HTTP) or the handshake refused (gRPC);
//	authenticated               flight per source IP, per port          others' connections go on (Security below)
//
// Watchers cost no goroutine while in sync: the store hands each applied
// revision's events to the matching watchers from one goroutine
// (raftstore's doc, Watches), and an etcd stream sends for all of its
// watchers from one.
//
// # Security
//
// With Config.TLS (--tls-ca-file, --tls-cert-file, --tls-key-file) the
// three gRPC ports, every gRPC dial the node makes (write forwarding,
// checkpoint replication, its trainers' pserver clients, bootstrap, the
// dashboard) and the Raft transport run mutual TLS 1.3 with the node's
// certificate (package security; reloaded when the files change). Each
// call is authorised by the role in the caller's certificate
// (security.Authorizer); the node-to-node port and the Raft port accept
// the node role only. With HTTPTLS the HTTP port serves mutual TLS too
// (every path needs a certificate of the cluster CA; the dashboard
// authorises each request by its role); without it, on a TLS node, the
// plaintext dashboard is read-only. `raftps node`
// refuses to start without TLS material unless --insecure; `raftps
// status` shows tls: on|off. GossipKeyringFile encrypts gossip with a
// keyring that the Keyring service (`raftps keyring`) changes on every
// alive member (over mutual TLS only). Jobs' dataset paths are confined to
// DatasetRoots (default <DataDir>/datasets): the submit check and the
// trainer agent refuse anything else, and every dataset file is opened
// through an os.Root of its directory (a symbolic link out of it is
// refused: dataset.ErrOutsideDir).
//
// Gossip decides liveness (a node reported dead loses its leases and
// tasks, and a dead voter is removed after DeadServerTimeout) and carries
// addresses; it is authenticated by the keyring alone, so a TLS node
// refuses to start without GossipKeyringFile (ErrNoGossipKeyring) unless
// InsecureGossip (--insecure-gossip, unsafe). Gossip never makes a member
// by itself: a node gossip reports becomes a Raft member (the master's
// reconcile, bootstrap-expect) and gets a /nodes/<id> record only after
// it proved over its Raft port that it holds the node certificate of its
// ID (raftstore.Store.VerifyPeer); `--insecure --join` against a TLS
// cluster stays out of both, and out of gossip itself with a keyring.
//
// Connections that send nothing hold no port (issue 32, hole 2):
//
//	port        handshake (or first request) within   in flight per source IP        idle
//	Raft        3 s, each in its own goroutine         16 handshakes (more: closed)   (authenticated)
//	gRPC (x3)   security.HandshakeTimeout (5 s)        256 TLS handshakes (refused)   (authenticated)
//	HTTP        5 s (TLS handshake and headers)        256 before the first request   1 min
//	gossip TCP  gossip.Config.TCPTimeout (5 s), one goroutine per connection (memberlist), no per-source cap
//
// The data dir is 0700 and every file in it 0600, whatever the umask
// (Raft snapshots, Pebble's files, node-id, LOCK); a data dir an older
// release left readable by others is tightened at start with a warning.
//
// # Disk space
//
// Every write the node starts (client API, forwarded from followers, its
// agents' and the master's) first asks a raftstore.DiskGuard: while the
// data dir's file system has less than Config.DiskReserve free (64 MiB by
// default), it is refused at once with ResourceExhausted naming the data
// dir and the figures, /readyz answers 503 with the same reason and
// StatusResponse.errors (`raftps status`) lists it. Reads and lease
// keepalives go on, the leader keeps leading (no write the node starts
// meets ENOSPC in its log; the store's own revocations of expired leases
// do not pass the guard, the reserve leaves room for them), and writes resume by themselves as soon as space returns (the
// guard reads the free space, fstatfs on the open data dir, on every write).
//
// # Memory budgets
//
// Config.PServerMemoryBudget (`--pserver-memory-budget`, default half the
// machine's memory) bounds the parameters and optimizer state of the
// node's pserver slots together, Config.TrainerMemoryBudget
// (`--trainer-memory-budget`, default a quarter) the models and gradients
// of its trainers together. Both are announced in gossip
// (gossip.Meta.PServerBudget, TrainerBudget). At submit the master refuses
// with ResourceExhausted a job whose state exceeds the sum of the live
// pservers' budgets, whose slot share (state / num_pservers) exceeds the
// largest one, whose slots do not pack whole into the budgets
// (Σ floor(budget / share) < num_pservers), or whose model exceeds every
// trainer's (master/admission.go);
// above all budgets, jobspec.MaxJobBytes (64 GiB) is refused with
// InvalidArgument. A job admitted against the cluster may still not fit a
// node's remaining budget (other jobs): the pserver agent then does not
// claim the slot (a SLOT_NOT_CLAIMED job event names the figures) and the
// trainer agent starts no trainer (TRAINER_NOT_STARTED); the job waits
// for room, the node is never run out of memory.
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
// # Raft log store
//
// Config.RaftLogStore (`--raft-log-store`, also `raft-log-store:` in
// --config-file) is boltdb (raft-boltdb, the default) or wal
// (hashicorp/raft-wal: one fdatasync per Raft append instead of two; about
// twice the puts at one client in `make bench`). It is chosen at the data
// dir's first start and recorded in <DataDir>/raft/log-store; a restart
// naming the other store is refused (raftstore.ErrLogStoreMismatch, naming
// both), and a data dir from before the record, holding raft.db, is
// boltdb. Nodes of one cluster may run different stores: the store is
// local, Raft replicates entries, not files. To move a node to the other
// store (Consul's migration): `raftps member remove` it (or stop it and
// let the dead-server cleanup remove it), wipe its --data-dir, and start
// it with the other --raft-log-store and --join: it rejoins empty and
// catches up from the leader's snapshot and log. Do one node at a time and
// wait for it to be a voter again (`raftps status`) before the next, so
// the cluster keeps its quorum. `--raft-log-verify-interval` (off by
// default) turns on Consul's check of the log stores across nodes: the
// leader appends a checkpoint that often, and every node compares the
// checksum of the entries its own store reads back with the leader's,
// logging an error on a mismatch (raftstore's verify.go).
//
// # Bootstrap
//
// With no Join and BootstrapExpect <= 1, a server node bootstraps a
// single-node cluster. With BootstrapExpect = k > 1 it waits until gossip
// shows k alive server nodes, asks them whether any is already in a
// cluster (then the leader adds it), and only if every one answered that
// none is, bootstraps all k with the same configuration (Store.Bootstrap;
// Consul's bootstrap_expect); while one cannot be asked it waits, warns
// and asks again, since a node that bootstraps beside a cluster makes an
// entry 1 of its own with the cluster's index and term. A
// restarted node has Raft state and never bootstraps, so the same flags
// serve every start. Nodes without RoleServer join as Raft non-voters. A
// node added first with `raftps member add NAME --learner` (and then
// started with --join) stays a non-voter until `raftps member promote`.
//
// # Raft timing
//
// Config.HeartbeatInterval and ElectionTimeout are etcd's
// --heartbeat-interval and --election-timeout (bare milliseconds, also
// config-file keys; defaults 50 and 500): how often the leader heartbeats
// each follower, and how long a follower hears no leader before it stands
// for election. As in etcd, the election timeout must be at least 5
// heartbeat intervals and at most 50 s, or the node does not start.
// RaftTimeouts maps them onto hashicorp/raft, which has no heartbeat
// interval of its own (its leader heartbeats every HeartbeatTimeout/10 to
// /5): HeartbeatTimeout = min(10 x interval, election timeout),
// ElectionTimeout = the election timeout, and LeaderLeaseTimeout =
// HeartbeatTimeout, so that a leader steps down after as long without a
// quorum as a follower waits without a leader (etcd's CheckQuorum).
// Consul's raft_multiplier keeps the lease at half; with it, loaded
// leaders stepped down on their own.
//
// The defaults keep one leader beside CPU hogs and fail over within
// 1.5 s. `raftps-bench elections` measures both (terms per minute of a
// 3-node cluster while idle and beside stress-ng --cpu, and leader SIGKILL
// to the first acknowledged write); on the 2-core dev box, 2026-11-27,
// shared with other builds (the load average is in brackets):
//
//	hashicorp/raft HT/ET/lease    etcd flags    terms/min       terms/min loaded   failover (s)         failover loaded (s)
//	500/500/250 ms (before)       -             0.00 [9]        1.33 [21]          0.98 median, 1.20    1.17 median, 1.43
//	500/500/500 ms (default)      50 / 500      0.00 [16]       0.33 [16]          1.00 median, 1.20    1.29 median, 1.50
//	1000/1000/1000 ms             100 / 1000    0.00 [15]       0.00 [22]          2.64 median, 2.93    2.35 median, 2.38
//
// (1 min idle and 3 min beside 4 stress-ng workers, 3 failovers each.)
// The two 500 ms settings again, side by side at the same time (2 min
// beside 4 stress-ng workers and the package tests, load 27; then 8 min
// with 8 workers, load 37; 5 failovers each):
//
//	                        terms/min   terms/min loaded   failover (s)         failover loaded (s)
//	lease 250 ms (before)   0.50        1.62               1.25 median, 1.43    1.37 median, 1.61
//	lease 500 ms (default)  0.00        0.12               1.06 median, 1.33    1.05 median, 1.24
//
// In those 8 minutes the 250 ms leaders stepped down 12 times on their
// own ("failed to contact quorum of nodes, stepping down"), the 500 ms
// ones once. The default's 16 failovers took 0.72 to 1.50 s. Longer
// timeouts hold a leader better but fail over later: etcd's own 100/1000
// never changed leader under load and took 2.0 to 2.9 s. Reproduce with
//
//	raftps-bench elections --flags "--heartbeat-interval 50 --election-timeout 500"
//
// # Failure
//
// Failed reports a condition the node cannot run with (its ID is used by
// another live member); Run then closes the node and returns the error.
package node
