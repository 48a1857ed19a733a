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
// As root (namespaces and nftables need it; without root the tests fail,
// -short leaves them out):
//
//	go test ./integration/jepsen -run TestJepsen -v                  # short: 3 nodes, 4 faults, 80 s of workload, ~1.5 min
//	go test ./integration/jepsen -run TestJepsen -v -jepsen.training # + a training job under the faults, ~2.5 min
//	go test ./integration/jepsen -run TestJepsen -v -tags jepsen_long -jepsen.long -timeout 30m  # 5 nodes, every fault kind twice, training, ~10 min; also builds the long-only scenarios (scenarios_long_test.go)
//	go test ./integration/jepsen -run 'Check|Hosts' -v               # checker tests (no root) and host tests (root)
//	go test ./integration/jepsen -run 'LeaseLoss|SpecFuzz|ClockStep|KeepMax' -v -tags jepsen_long  # the scenarios (DESIGN.md, Scenarios)
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
// The design notes of this package ("Hosts", "Nemesis", "Workloads and
// checkers", "Scenarios", "Results") are in DESIGN.md in this directory.
package jepsen
