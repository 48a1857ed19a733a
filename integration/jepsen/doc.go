// Package jepsen is raftps's Jepsen-style fault suite: it runs real `raftps
// node` processes in Linux network namespaces, drives key/value, watch and
// lease workloads against them over gRPC while a nemesis injects one fault at
// a time, and checks the recorded history.
//
// The method is that of Jepsen's etcd 3.4.3 analysis and etcd's
// tests/robustness: histories are checked with Porcupine, a write that failed
// or timed out is kept as indeterminate (it may take effect at any time after
// its call, or never), a read that failed is dropped.
//
// # Running
//
// As root (namespaces and nftables need it; without root the tests say
// "skipped"):
//
//	go test ./integration/jepsen -run TestJepsen -v                  # short: 3 nodes, 4 faults, 80 s of workload, ~1.5 min
//	go test ./integration/jepsen -run TestJepsen -v -jepsen.training # + a training job under the faults, ~2.5 min
//	go test ./integration/jepsen -run TestJepsen -v -jepsen.long -timeout 30m  # 5 nodes, every fault kind twice, training, ~10 min
//	go test ./integration/jepsen -run 'Check|Hosts' -v               # checker tests (no root) and host tests (root)
//	go test ./integration/jepsen -run 'LeaseLoss|SpecFuzz|ClockStep|KeepMax' -v  # the scenarios (see Scenarios)
//
// Flags (after the package): -jepsen.bin PATH (default: go build -tags
// raftps_testclock ./cmd/raftps into a temp dir; the test fails, saying why, if that fails or
// `raftps node --help` lacks a flag the suite uses), -jepsen.out DIR,
// -jepsen.seed N, -jepsen.faults kill-leader,loss,... (overrides the
// schedule; kinds in AllFaults), -jepsen.training, -jepsen.long,
// -jepsen.canary (register reads are made serializable: a follower answers
// from its own state, which lags the leader's acknowledgements even without
// faults, so the checker must find the history not linearizable; the test
// then passes only if it does — in practice on nearly every key), and
// -jepsen.replay DIR/history.jsonl for TestReplay, which re-checks a
// recorded history's registers and leases.
//
// Missing iproute2 or nftables are installed with apt-get. `tc netem` is not
// used: loss and partitions are nftables rules inside the nodes' namespaces.
//
// # Hosts
//
// NewHosts makes a bridge rps-<pid>-br in the root namespace (10.77.S.1/24,
// S = pid%200+20) and one namespace rps-<pid>-nI per node with a veth pair
// (node I at 10.77.S.(10+I)). Every node runs
//
//	raftps node --id nI --data-dir D --grpc-addr IP:7000 --raft-addr IP:7001 \
//	    --gossip-addr IP:7002 --http-addr IP:7003 --join <other gossip addrs> \
//	    --bootstrap-expect N --log-level info
//
// through `ip netns exec` (which execs in place, so SIGSTOP/SIGKILL reach the
// node). Clients run in the root namespace and talk to the nodes through the
// bridge. Hosts.Close (called by t.Cleanup, by a SIGINT/SIGTERM handler, and
// on setup errors) kills the processes and removes the namespaces, veths and
// the bridge; SweepStale removes rps-<pid>-* objects of dead pids at start.
//
// # Nemesis
//
// One fault at a time, each held for Hold (pauses 1.5-3 s, longer than the
// 500 ms election timeout) and then healed, with quiet time between; the
// schedule is a bounded list and stops by itself. Kinds: kill-random,
// kill-leader (SIGKILL, restart with the same data dir), pause-random,
// pause-leader (SIGSTOP/SIGCONT), partition-leader, partition-halves,
// partition-ring (majority ring with 5 nodes, a bridge with 3),
// partition-one-way (the leader's packets to the others dropped), loss
// (20-40 % random loss on one node, nft numgen), partition-heal (a follower
// isolated, healed under writes, isolated and healed again quickly; the
// hashicorp/raft #695 scenario), kill-pserver (SIGKILL of the node serving
// pserver slot 0 of the running job, restart), membership (a follower
// stops gracefully and is removed from the Raft configuration, then
// restarts and is added back: removing and adding a node under load; the
// record says whether both were observed). The leader is found with
// Cluster.Status. The short suite in `make test` runs kill-leader,
// pause-leader, partition-leader, loss and membership.
// Each fault is a history record with type, target, start and end.
//
// # Workloads and checkers
//
//   - Registers (RunRegisters, CheckRegisters): 5 clients do get / put /
//     compare-and-swap (Txn: compare value, then put) on 3 keys, each op
//     against a random node with a 1 s timeout. Porcupine checks
//     linearizability per key (RegisterModel). Indeterminate writes get
//     Return = +inf; the client then continues as a new process. The history
//     is patched as etcd's robustness tests do (PorcupineOps): an
//     indeterminate write whose unique value nobody observed, and that no
//     cas which failed after it was sent may have seen, is dropped, an
//     observed one returns when its first observer returned; keys rotate
//     every 5 s. Both keep Porcupine fast (ms instead of timing out).
//     RunEtcdRegisters is the same workload through etcd's Go client
//     against raftps' etcd API (TestJepsenEtcdClient, short and long).
//   - Watches (StartWatchers, CheckWatches): 3 prefix watchers resume from
//     their last revision + 1 on a random node after any stream error, and
//     also drop their stream every 8-16 s to resume elsewhere. Per
//     watcher: revisions never go back, no (revision, key) twice, every
//     acknowledged put whose revision it covered is there with its value,
//     every event another watcher saw in its covered range is there too, and
//     nothing is beyond the final linearizable read's revision. At the end an
//     acknowledged fence put must reach every watcher.
//   - Leases (RunLeases, CheckLeases): a keeper keeps its lease alive and
//     reads its keys every 250 ms; a key missing in a read that returned
//     before the last answered keepalive's promise (sent + TTL) ran out is a
//     violation. An expirer stops keeping its lease alive; its keys must be
//     gone by max(stop, promise) + election timeout + slack (pushed to
//     fault end + TTL when a fault, or a Raft term change seen in response
//     headers, overlaps: a new leader extends every lease by its TTL).
//   - Training (RunTraining, CheckTraining): over a job's JobEvent stream,
//     seqs are gap-free, each task is TASK_DONE exactly once per pass and a
//     finished pass has every task done or failed; every restore that names a
//     checkpoint version (JobStatus.restores and the PSERVER_RESTORED events)
//     matches the MD5 of the pointer committed for that slot and version
//     (seen by a KV watch on /jobs/<job>/checkpoints/ from revision 1).
//     FollowJob takes a Master client (and a Watch client); the suite submits
//     the job with `raftps job submit` and uses a round-robin client over
//     all nodes (DialBalanced).
//
// The checkers' own tests (checker_test.go) feed doctored histories: a stale
// read, a lost write, a watch gap, a duplicate watch event, a lease key that
// vanished while kept alive, a task done twice, a missing task; each flips
// the verdict from ok to violation, and the honest history passes.
// replay_test.go re-checks recorded histories: -jepsen.replay FILE, and
// testdata/etcd-violation-20261123.jsonl, a run reported non-linearizable
// by a history patch that was unsound (now linearizable, as it was).
//
// # Scenarios
//
// scenarios_test.go runs one targeted fault each on a fresh 3-node cluster,
// with checkers of their own (scenarios.go; results under
// <-jepsen.out>/<name> or integration/results/<UTC>-<name>):
//
//   - TestJepsenFollowerLeaseLoss (short and long): every node serves
//     pservers on IP:7004; probes Pull every slot on every node every
//     100 ms (a Pull is answered exactly when the slot is hosted, i.e.
//     accepts pushes). A follower hosting a slot of an async job is
//     partitioned from the other nodes for 3 x the pserver lease TTL (15 s).
//     CheckSlotServing: no two claims (node, incarnation) of one slot
//     served in overlapping time, and the follower stopped serving within
//     the TTL (the fence time's bounds are in the notes, and the "slot
//     fenced" time from the node's log). After the heal the same process
//     must serve a new claim (a second job of 3 slots gets one per node).
//   - TestJepsenSpecFuzzRestart (short and long): 26 fixed extreme job specs
//     (MaxInt64 records and records per task, 2^30 hidden units and
//     virtual shards, huge shapes, NaN learning rate, ...) and 40 random
//     ones (-jepsen.seed) under the register workload; CheckSpecFuzz:
//     each refused with InvalidArgument/ResourceExhausted or accepted as a
//     job with tasks. Then every node's snapshot is streamed and decoded
//     (raftps snapshot save/status), every node is SIGKILLed at once and
//     restarted: the cluster must form again, serve the accepted jobs
//     unchanged, stream decodable snapshots, and the registers stay
//     linearizable. Nodes have
//     the server role only (no accepted model is allocated).
//   - TestJepsenLeaderClockStep (-jepsen.long): the leader's wall clock is
//     stepped +1h and back through raftstore.TestClockOffsetEnv (a
//     file read by a node built with -tags raftps_testclock, as the suite
//     builds it: the wall stamp of the entries it proposes), then every follower is set 1h ahead and the leader paused
//     2 s (a failover to a node ahead); CheckNoTimeouts (no task requeued
//     for a timeout or failed), leases, registers, training.
//   - TestJepsenKeepMaxOne (-jepsen.long): a sync job of 3 slots with
//     keep_max 1 and a checkpoint every 5 steps under kill-pserver,
//     kill-random, kill-pserver; CheckCompleteVersions (over every
//     committed pointer in commit order a version named by every slot
//     exists), a sampler fetching each slot's manifest of the newest
//     complete version from its replicas every second (md5 must match the
//     pointer; missing while still named is a violation), CheckTraining.
//
// # Results
//
// Each run writes, under -jepsen.out (default integration/results/<UTC
// timestamp>): history.jsonl (every op, watch event, lease record, fault and
// note, one JSON object per line, times in ns since the run's start),
// linearizability.html (Porcupine's visualization, faults as annotations),
// logs/nI.log (each node's stdout and stderr, appended across restarts), and
// summary.json / summary.txt (ops per workload, faults by type, each
// checker's verdict and violations). TestJepsen fails if any checker reports
// a violation; a Porcupine timeout is "unknown" and does not fail the run.
//
// Concurrency: History, Hosts and the workloads are safe for concurrent use;
// a Nemesis runs its schedule from one goroutine.
package jepsen
