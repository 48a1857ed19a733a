// Package demo runs the local clusters of `raftps demo` and `raftps dev`
// and the demo's fault schedule, out of package main (which keeps the
// flags, the job submission and the output).
//
// Cluster is a cluster of child processes of the raftps binary on
// loopback with mutual TLS (internal/testing/localcluster makes its CA, the
// nodes' and the admin's certificates and the gossip keyring); Start
// starts every node and waits for a leader. Schedule kills nodes while a
// job trains: fed each job event (OnEvent), it SIGKILLs a node that holds
// a slot's primary and is not the Raft leader at 35% of the tasks
// (PickPrimaryOffLeader; checked against AimSurvivor, 0.5 s) and the Raft
// leader at 65% (AimLeader, 1.5 s: an election first), restarts each
// RestartAfter (5 s) later, and records per fault whether the node was the
// leader, what it held (Role), a timeline (a new leader answering, the
// first promotion, the first finished task) and how long training stood
// still (Fault.Stall: from the kill to the commit of the first finished
// task whose trainer reached a step past every step made before the kill,
// the TASK_DONE event's version; After and Before give the job's own pace
// around it). CheckSteps is the check that no sync step was
// lost or applied twice: every slot's final checkpoint is at the same
// step, the last step the trainers were released on (StepCheck says why
// a fault-free run's count is not a constant to compare with).
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
