// Package trainer is the stateless worker of a raftps job: it takes tasks
// from the master, trains on their records against the parameter servers,
// and reports back. Models live in trainer/model, data in trainer/dataset,
// in-memory fakes of the master and the pservers in trainer/trainertest.
//
// # Usage
//
// cmd wires a Trainer to gRPC clients of the Master service and of the job's
// pservers (any types with the methods of the Master and PS interfaces):
//
//	tr, err := trainer.New(trainer.Config{ID: "n1-t0", Job: "fashion", Logger: log}, master, ps)
//	if err != nil { ... }
//	err = tr.Run(ctx) // nil when the job is over; ctx.Err() when cancelled
//	st := tr.Stats()  // tasks, examples, retries, ExamplesPerSec(), PSTime
//
// # The task loop
//
// Run reads the JobSpec (Master.GetJob), loads the dataset from the node's
// disk (Config.DataDir or spec.dataset.path), builds the model, and asks
// for tasks until the master says JOB_OVER. A training task is a range
// [begin, end) of positions in the pass's shuffled order
// (dataset.Permutation(records, spec.seed, task.pass)), so every trainer
// agrees on its records without talking to the others. For each mini-batch
// of spec.batch_size records the trainer pulls the dense parameters and the
// embedding rows the batch needs (Model.SparseRows), computes the gradient
// of the mean loss, and pushes it; in sync mode Push blocks until the step
// completes. A PS that is a PushPuller (the agent's pserver client) returns
// the parameters with the push's reply, so an async task pulls once,
// before its first step, and a sync trainer once until it leaves the step
// (the last push of a task brings back the next task's parameters); a step
// that fails pulls afresh. TaskFinished then reports the mean loss, examples, duration
// and the version trained on; the "task trained" log line also gives
// ps_time, the part of the task spent in pserver calls (Stats.PSTime sums
// it), which tells a trainer waiting on the network or on a sync step from
// one busy computing. An eval task scores the pulled parameters on
// the test split and reports accuracy, loss and the version evaluated; a
// PS that is a CheckpointPuller checkpoints what the eval pulls, so that
// version is a checkpoint version.
//
// # Faults
//
// The trainer holds nothing that must survive it: a killed trainer's task
// is requeued by the master and redone elsewhere from the same records.
// Transient errors (IsRetryable: gRPC Unavailable, DeadlineExceeded,
// Aborted, ResourceExhausted) are retried with jittered exponential backoff
// (Config.MinBackoff..MaxBackoff): master calls for as long as ctx lives,
// so a master failover is a pause; a failed mini-batch is redone from the
// pull, so a pserver slot moving to another node is a pause too. Past the
// task's deadline the task is dropped without a report (the master has
// requeued it already, and a late finish would be stale). Errors that retry
// cannot fix (bad shapes, a task outside the dataset) are reported with
// TaskFailed and the loop goes on.
//
// Sync-mode pservers wait for every trainer of the step, and a registered
// trainer counts from the start, pushed or not. The trainer calls
// LeaveStep whenever it stops pushing: before every sleep on WAIT (also when
// WAIT is the first answer it gets, and again at each later one: a slot
// restored on another node or rolled back is a new Slot that expects every
// registered trainer), before an eval task, at PASS_OVER and JOB_OVER, and
// when Run returns.
//
// A call that keeps failing, or one call that has not returned (a sync push
// whose step waits for another trainer), is logged at warn level every
// Config.WarnEvery (5 s), so a trainer that makes no progress says where
// it waits.
//
// # Baseline
//
// TrainLocal trains the same model on the same records in the same order
// with the same update rules (Optimizer, which mirrors the pservers') in one
// process without RPC. It is the accuracy reference for distributed runs and
// the denominator of the "with vs without RPC" throughput ratio. On
// Fashion-MNIST with batch 64 and 3 passes it reaches 84.1% test accuracy
// with softmax (adagrad, lr 0.1) and 85.7% with an MLP [128] (momentum 0.9,
// lr 0.01); see TestTrainLocalFashionMNIST and BenchmarkTrainLocal.
//
// # Concurrency
//
// A Trainer runs one task at a time; call Run once. Stats is safe to call
// from other goroutines. Several Trainers may share a process (datasets are
// cached read-only by dataset.LoadFashionMNIST).
package trainer
