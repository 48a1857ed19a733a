// Package demo runs the local clusters of `raftps demo` and `raftps dev`
// and the demo's fault schedule, out of package main (which keeps the
// flags, the job submission and the output).
//
// Cluster is a cluster of child processes of the raftps binary on
// loopback with mutual TLS (internal/testing/localcluster makes its CA, the
// nodes' and the admin's certificates and the gossip keyring); Start
// starts every node and waits for a leader. Schedule kills nodes while a
// job trains: fed each job event (OnEvent), it SIGKILLs the node serving
// pserver slot 0 at 35% of the tasks and the Raft leader at 65%, restarts
// each 5 s later, and records how long training stood still (Fault).
//
//	cluster, err := demo.New(exe, dir, 3)
//	defer cluster.StopAll()
//	cl, leader, err := cluster.Start(ctx, 30*time.Second)
//	sched := demo.NewSchedule(ctx, cluster, cl, job, totalTasks, os.Stderr, true)
//	// follow the job's events into sched.OnEvent, then
//	sched.Wait()
//	faults := sched.Faults()
//
// A Cluster is used by one goroutine; Schedule's methods are safe to call
// from the goroutine that follows the job while its restarts run.
package demo
