// Package jobq holds training jobs and their task queues as deterministic
// Raft state: the PaddlePaddle master's todo / pending / done / failed queues,
// with ElasticDL's adaptive task timeout, Horovod Elastic's trainer blacklist
// and Paddle's "speculative execution" TODO done.
//
// # Usage
//
// The FSM owns one Queue and calls it under its lock, with now the entry's
// cluster time (the FSM's replicated clock: monotonic, re-based by a new
// leader; the Queue reads no clock):
//
//	q := jobq.New()
//	_, err := q.Submit(now, &pb.SubmitJobRequest{Spec: spec})
//	r, _ := q.GetTask(now, &pb.GetTaskRequest{Job: "mnist", Trainer: "n1/t0"})
//	if r.Result == pb.GetTaskResponse_TASK {
//		// ... train on records [r.Task.Begin, r.Task.End) ...
//		q.TaskFinished(now, &pb.TaskFinishedRequest{Job: "mnist", TaskId: r.Task.Id,
//			Epoch: r.Task.Epoch, Metrics: &pb.TaskMetrics{Loss: 0.4, Examples: 100}})
//	}
//	snap, _ := q.MarshalBinary() // FSM snapshot; UnmarshalBinary restores
//
// # Caller's duties and guarantees
//
// All methods are deterministic functions of the state and their arguments:
// no clock, no randomness, no map order (maps are iterated sorted). The
// Queue is not safe for concurrent use; the FSM serializes calls. Commands
// change O(1) tasks, except pass rollover (O(tasks) once per pass) and
// RequeueTrainer / ExpireTasks (O(pending)). Per task the state is 16 bytes
// plus 4 in the todo ring; a 1,000,000-task job is about 20 MB.
// now is cluster time (see package fsm, clock.go): it never goes backwards
// and ignores wall-clock steps and leader changes, so deadlines, durations
// and blacklist cooldowns are immune to them; all arithmetic on times
// saturates, so no now, however extreme, overflows a deadline. The time
// fields compared with now (a task's started and deadline, blacklists, a
// job's internal finish time for retention) are cluster time. What users
// read (JobStatus.submitted_unix_nano and finished_unix_nano, every event's
// unix_nano) is the wall clock of the entry's proposer, which the FSM gives
// with SetEntryWall before each entry: the cluster time lags the wall clock
// by every leaderless period, and a shown time must not. The records of
// MarshalJobs (version 2) keep both finish times.
// Errors wrap the sentinels of package api/errs (ErrInvalid naming the
// field, ErrExists, ErrNotFound, ErrFailedPrecondition, ErrMalformed for a
// bad snapshot). MarshalBinary is canonical: equal states give equal bytes.
//
// Sources: PaddlePaddle, doc/design/cluster_train/master_server.md (2017);
// ElasticDL, docs/designs/elastic_training (task timeout = max(floor,
// 3 x slowest)); Horovod, docs/elastic.rst (blacklist with cooldown).
//
// The design notes of this package ("The queues", "Passes, eval and
// PASS_OVER", "Events", "Specs, bounds and retention") are in DESIGN.md in
// this directory.
package jobq
