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
// # The queues
//
// A job's dataset of spec.dataset.records records is cut into
// ceil(records / records_per_task) tasks; task i covers records
// [i*records_per_task, min((i+1)*records_per_task, records)). Every train
// task is in exactly one queue:
//
//	         GetTask (new epoch, deadline)
//	todo ─────────────────────────────────► pending ──TaskFinished(epoch)──► done
//	 ▲  ◄── TaskFailed / ExpireTasks / ──────┘   │                           │
//	 │      RequeueTrainer                        │ failures+timeouts         │
//	 │                                            ▼ > max_task_timeouts       │
//	 │                                          failed (stays failed)        │
//	 └──────────────── end of pass: done → todo, counts reset, pass+1 ◄──────┘
//
// todo is a FIFO (by id at the start of a pass; requeued tasks join the back).
// Each hand-out gets the job's next epoch (strictly increasing, shared by all
// tasks of the job), so a finish or failure report naming an older epoch is
// recognised as stale and ignored (accepted = false). Deadlines are
// now + max(task_timeout_floor_ms, 3 x the slowest finished task) (ElasticDL);
// ExpireTasks, proposed by the master's leader loop, sends overdue tasks back
// to todo counting a timeout. RequeueTrainer gives back everything a trainer
// that gossip declared dead holds, without counting a timeout.
//
// With todo empty, a pending task that has run more than 2 x the median
// finished duration gets a backup copy on another trainer (backup_epoch,
// backup_trainer); whichever copy finishes first wins, the other's finish is
// a stale no-op. A task expires only when all its copies are overdue.
//
// A trainer that reports BlacklistAfter (3) consecutive TaskFailed is
// blacklisted for 1 s, then 2 s, 4 s, ... up to 1 h on later blacklistings
// (Horovod Elastic); GetTask answers it WAIT with retry_after_ms. An
// accepted finish resets the consecutive count, not the doubling.
//
// # Passes, eval and PASS_OVER
//
// A pass ends in the command that empties todo and pending (the last
// TaskFinished, TaskFailed to failed, or ExpireTasks to failed): PASS_ENDED
// is emitted, and then
//
//   - with spec.eval_each_pass, an EVAL task (kind TASK_KIND_EVAL, id -1-pass,
//     its own epoch and deadline) becomes due. The next GetTask hands it out;
//     while it runs every other trainer gets PASS_OVER (retry_after_ms
//     WaitRetryMs): the pass is over and the next starts when the eval
//     reports. Training stands still only for the eval. Its TaskFinished
//     stores the PassMetric (train loss averaged over the pass weighted by
//     examples, examples, test_loss = metrics.loss, test_accuracy =
//     metrics.accuracy, step, and as checkpoint_version the committed
//     checkpoint version holding the parameters after exactly that step,
//     if any: one committed later is attached then, see RecordEvent; 0
//     otherwise) and emits EVAL_REPORTED. A failing or
//     expiring eval is retried up to max_task_timeouts, then skipped.
//   - then the pass rolls over at once: done tasks go back to todo in id
//     order with their counts reset and pass+1; failed tasks stay failed.
//     After the last pass the job is JOB_SUCCEEDED; a pass in which no task
//     got done (all failed) makes it JOB_FAILED; a finish reporting
//     metrics.step >= spec.max_steps cuts the pass short (pending copies go
//     back to todo unrun), runs its eval and ends the job JOB_SUCCEEDED.
//     JOB_ENDED is emitted with finished_unix_nano.
//
// So GetTask never has to roll a pass over itself, and PASS_OVER means exactly
// "wait for the end-of-pass eval". Deterministic shuffling inside a task is
// the trainer's business (seeded by spec.seed and the pass).
//
// # Events
//
// Every change worth watching is a JobEvent with seq = previous + 1 (no gaps)
// and unix_nano = the entry's wall clock (SetEntryWall; now without one): JOB_SUBMITTED, TASK_DONE, TASK_REQUEUED, TASK_FAILED,
// PASS_ENDED, EVAL_REPORTED, TRAINER_LEFT, JOB_ENDED, and the external ones
// the master records with RecordEvent (TRAINER_JOINED, TRAINER_LEFT,
// CHECKPOINT_COMMITTED, PSERVER_RESTORED). The newest
// jobspec.MaxEvents per job are kept (and snapshotted) so WatchJob can resume after a leader change.
//
// # Specs, bounds and retention
//
// Submit validates a spec with jobspec.ValidateSpec, the one validation of
// a job spec (package jobspec holds the bounds, defaults and StateBytes;
// master and the agents import it, not this package). A spec it accepts
// gives a job that the snapshot reproduces exactly.
//
// The job state is bounded (retention.go): jobspec.MaxTasks tasks, MaxPending
// copies out at once (then WAIT), event messages cut to MaxEventMessage
// bytes, trainer ids up to MaxTrainerLen, MaxTrainerRecords blacklist
// records, at most MaxJobs jobs (a submit beyond deletes the oldest finished
// job, or is refused with errs.ErrFailedPrecondition if all run). Delete
// removes a finished job; Prune deletes finished jobs older than an age (in
// cluster time) or beyond a count. MarshalJobs encodes one record per job,
// each at most MaxJobRecordBytes.
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
package jobq
