// Package bench is the harness behind `raftps-bench` (and `make bench`): it
// measures raftps next to a baseline in the same run, on the same machine,
// and writes one table to bench/results/<UTC timestamp>.{md,json}.
//
//	r, err := bench.Run(ctx, bench.Config{Bin: "bin/raftps", Root: ".", Quick: true, Log: os.Stderr})
//	if err != nil { ... }
//	r.WriteText(os.Stdout)
//	paths, err := r.Save("bench/results")
//
// The machine is shared and noisy, so every figure is printed with its
// baseline measured in the same run and the ratio raftps/baseline is the
// number to read, not the absolute value:
//
//   - metadata store: a 3-node raftps cluster and a 3-node etcd cluster
//     (Debian's etcd-server on PATH; scripts/install-etcd.sh installs it) on
//     loopback, each with its default fsync durability, driven by the same
//     load generator (Store) for puts with 1, 16 and 256 clients,
//     linearizable gets, compare-and-swap Txns and lease grant+keepalive;
//     the 1-client puts also on a third cluster, raftps with
//     --raft-log-store wal, up only during that section (rows ending
//     WALSuffix; the main rows are the default store, boltdb); 1-client
//     puts run op by op in turn on every system (RunInterleaved);
//   - etcd client: the same put, get, CAS and lease workloads sent with
//     etcd's Go client (go.etcd.io/etcd/client/v3) to raftps' etcd API and
//     to etcd;
//     the 1-client put is also sent to raftps with raftps' own client,
//     etcd's client on every endpoint and etcd's client on the leader's
//     endpoint alone, interleaved op by op (RunInterleaved), into ratios
//     over raftps' own client (EtcdClientVsOwnRow);
//   - failover: SIGKILL of the leader to the first successful write, both;
//   - security (raftps against itself): two 3-node raftps clusters up at
//     once, one on mutual TLS 1.3 with encrypted gossip (localcluster's
//     default) and one --insecure, puts with 16 clients and pserver
//     push+pull (PushPullTensors x PushPullSize float32 over 2 slots)
//     interleaved in pairs; the ratio is TLS/plaintext;
//   - recovery in training (raftps only): a trainer, the node of pserver
//     slot 0 and the leader SIGKILLed under a running job, timed from the
//     kill to the job's TASK_REQUEUED, PSERVER_RESTORED and TASK_DONE events
//     (the jobs run with replicas 1: that row times the restore path);
//   - replicas (issue 34, replicas.go; raftps only, a fresh 3-node
//     cluster): memory per backup replica (RSS growth of the backup's
//     node process per parameter, beside the primary's); push+pull with
//     replicas 2 against replicas 1, two jobs up at once interleaved in
//     pairs, and per CPU-second of the node processes (/proc); slot 0's
//     node SIGKILLed under a replicas-2 training job, timed to its
//     PSERVER_PROMOTED (median of 5 with the spread; a row of the
//     recovery in training section, beside the R = 1 PSERVER_RESTORED one);
//   - the Go benchmarks of pserver, pserver/checkpoint and trainer, run as
//     `go test -bench` subprocesses and parsed (ParseGoBench);
//   - where raftps' puts are behind etcd's, a CPU profile of raftstore's
//     BenchmarkPut3Node summarized from `go tool pprof -top`;
//   - scaling (`make bench-scaling` runs it alone, about a minute): curves
//     of cost against size, each point bounded in time, measured in this
//     process with light simulated trainers (goroutines, no model): sync
//     step wall time and CPU per step against trainers (1-64, one slot)
//     and slots (1-16, a fixed model); the master's tasks/s, p99 and Raft
//     log entries and bytes per task call against trainers (1-1000, a
//     single-node store) and against a job's finished tasks (which they
//     must not grow with); heap per registered trainer, job, slot replica
//     and gRPC connection; Raft entries and bytes per second against
//     concurrent jobs (1, 4, 16); checkpoint time and bytes against params
//     (1M-100M). Each Curve gets its log-log slope (LogLogSlope) and an
//     SVG (WriteSVG) in bench/results/scaling-<time>/, linked from the
//     results file; a slope above Superlinear is marked.
//
// Elections (`raftps-bench elections`) is apart from Run: one 3-node raftps
// cluster with the flags given, its Raft terms per minute idle and beside
// stress-ng --cpu workers, and its failover times in both; node/DESIGN.md
// ("Raft timing") chose the election defaults with it.
//
// Run needs a built raftps binary, a module checkout (for go test) and
// free loopback ports; it starts and kills only the processes it started.
// A Report is not safe for concurrent mutation.
package bench
