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
//	go test ./integration/jepsen -run TestJepsenReplicatedSlots -v  # replicated slots, ~1.5 min (in the short suite)
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
// Replicated pserver slots (issue 34) have a scenario of their own,
// TestJepsenReplicatedSlots (slots*.go): jobs with replicas 2 on 3 nodes,
// one fault per fresh job aimed at a slot's primary (SlotFaults: SIGKILL
// and restart, SIGSTOP past gossip's detection and SIGCONT, a partition
// from its in-sync backups, one from the Raft leader), clients that push
// integer-valued gradients with unique push ids, each push to an element
// of its own (SGD, learning rate 1, zeros: an element's final value is
// the number of times its push was applied). CheckSlotPushes (async):
// every acknowledged push applied exactly once, also those a deposed
// primary acknowledged, indeterminate ones at most once. CheckSyncSteps
// (sync): every slot at the same step, and its parameters equal to a
// replay of the acknowledged pushes step by step. The pushes (invoke
// time, ok/info/fail, push id, answering node and epoch) are
// "slot-push" records of history.jsonl, the phases' final states in
// slots.json.
//
// The design notes of this package ("Hosts", "Nemesis", "Workloads and
// checkers", "Scenarios", "Results") are in DESIGN.md in this directory.
package jepsen
