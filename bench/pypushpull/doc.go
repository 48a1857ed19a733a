// Package main is the pypushpull command. Pypushpull measures push+pull
// throughput of raftps's Go pserver client against a running job's
// pservers. bench/python.py runs it next to the Python client (raftps.ps)
// against the same pservers in the same run, so that `make bench` can
// print Python's MB/s as a ratio of Go's.
//
//	go run ./bench/pypushpull --endpoints 127.0.0.1:7000 --job J --iters 5
//
// It reads the job spec (GetJob) and the slots' addresses (the job
// status), pulls once, then times --iters rounds of Push (a zero gradient
// for every dense parameter) followed by Pull, and prints one JSON line:
//
//	{"mb_per_s": 1462.3, "params": 10000000, "iters": 5, "seconds": 0.27, "cpu_seconds": 0.21}
//
// MB counts the float32 bytes pushed and pulled: 2 × 4 × params per round.
// cpu_seconds is the user+system CPU time of this process (all threads)
// over the timed rounds: bench/python.py sets it against the Python
// client's, a figure the load of a shared machine moves less than MB/s.
//
// Flags: --endpoints (a node's client gRPC address), --job (a running job
// with dense parameters), --iters (timed rounds, default 5). It dials in
// plaintext, so the cluster must run with --insecure, as bench/python.py's
// does. A missing job, or a job whose slots are not served yet, exits
// non-zero with the reason.
package main
