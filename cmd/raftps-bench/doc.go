// Package main is the raftps-bench command. Raftps-bench measures raftps
// against etcd 3.4 and against the machine's own limits, and prints
// ratios. It is the command behind `make bench` (the measurements
// themselves are package bench) and is kept out of the product binary:
// `make bench` builds it, installs etcd with scripts/install-etcd.sh and
// runs
//
//	raftps-bench --bin bin/raftps
//
// # Reading the results
//
// Every side-by-side row runs its two sides interleaved (A B A B ..., at
// least 5 pairs) in the same run and reports the median of the per-pair
// ratios with its min–max spread: this machine is shared and noisy, so
// absolute times do not hold from one minute to the next, ratios mostly
// do. The 1-client put rows go finer: within each pair, one op on each
// side in turn (bench.RunInterleaved), so drifts shorter than a run
// (a neighbour's fsyncs) hit both sides alike too. RATIO is raftps over the baseline; for times (lower is better) a
// ratio below 1 means raftps is faster. A Markdown table and a JSON file
// per run go to bench/results/<UTC timestamp>.{md,json}.
//
// # Sections
//
//   - kv: 256-byte puts at 1, 16 and 256 clients, and linearizable gets,
//     CAS txns and lease grant+keepalive at 16, each sent as the same
//     request messages to a 3-node raftps and a 3-node etcd;
//   - etcdclient: the same workloads through etcd's Go client, against
//     raftps's etcd v3 API and against etcd;
//   - failover: leader SIGKILL to the first acknowledged write;
//   - tls: mutual TLS against plaintext (puts, pserver push+pull);
//   - training: trainer, pserver-node and leader SIGKILLs in a running job
//     (time to requeue, restore, next finished task);
//   - replicas: replicated pserver slots (issue 34): memory per backup
//     replica, push+pull with 2 replicas against 1 (and per CPU-second),
//     slot-node SIGKILL to the promotion of its backup;
//   - gobench: the Go benchmarks of pserver, checkpoint and trainer turned
//     into ratios (push+pull vs gRPC echo and raw TCP, checkpoint write vs
//     a plain write+fsync, trainer+pserver vs in-process);
//   - profile: a CPU profile of 1-client puts, summarised.
//
// # Elections
//
//	raftps-bench elections --flags "--heartbeat-interval 50 --election-timeout 500"
//
// counts the terms per minute of one 3-node raftps cluster started with
// --flags, idle (--idle, 1 min) and beside stress-ng --cpu --hogs (4) for
// --loaded (3 min), and times --trials (5) leader-SIGKILL failovers in
// each phase; one line of figures. node/DESIGN.md ("Raft timing") lists the
// runs behind the node's election defaults.
//
// # Flags
//
//	--bin        the raftps binary the nodes run (default <root>/bin/raftps)
//	--out        results directory (default <root>/bench/results)
//	--skip       sections to leave out, e.g. --skip kv,profile
//	--quick      2 s per workload, 3 recovery trials, 1x Go benchmarks
//	--dataset    Fashion-MNIST of the training section
//	--keep-data  keep the clusters' data dirs and logs
//	--root       module root (default: the go.mod above the working dir)
package main
