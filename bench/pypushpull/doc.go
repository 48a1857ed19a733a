// Command pypushpull measures push+pull throughput of the Go pserver
// client against a running job's pservers, for bench/python.py, which runs
// the Python client (raftps.ps) against the same pservers in the same run.
//
//	go run ./bench/pypushpull --endpoints 127.0.0.1:7000 --job J --iters 5
//
// It reads the job spec (GetJob) and the slot addresses (the job status),
// pulls once, then times iters rounds of Push (a gradient of zeros for
// every dense param) + Pull, and prints one JSON line:
// {"mb_per_s": ..., "params": N, "iters": K, "seconds": S}, where MB counts
// the float32 bytes pushed and pulled (2 x 4 x params per round).
//
// Flags: --endpoints (a node's client gRPC address), --job (a running job
// with dense params), --iters (timed rounds, default 5). It dials in
// plaintext, so the cluster must run with --insecure (as make bench's
// clusters do). Errors (no such job, no slots yet) exit non-zero with the
// reason.
package main
