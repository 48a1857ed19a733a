package jobq

import (
	"fmt"
	"math"
	"slices"

	pb "github.com/raftps/raftps/api/raftpspb"
	"github.com/raftps/raftps/schema"
)

// ---------------------------------------------------------------- GetTask

// GetTask hands a task of job req.Job to trainer req.Trainer, in this order:
//
//   - JOB_OVER if the job is not running (unknown job: errs.ErrNotFound;
//     empty trainer: errs.ErrInvalid);
//   - WAIT with retry_after_ms until the cooldown ends if the trainer is
//     blacklisted;
//   - the end-of-pass EVAL task if it is due (one in flight at a time);
//   - PASS_OVER (retry_after_ms = WaitRetryMs) while another trainer runs
//     that eval: the pass is over and the next starts when the eval reports;
//   - the front todo task: it becomes pending with a new epoch, trainer,
//     started = now and deadline = now + max(task_timeout_floor_ms,
//     3 x slowest finished task of the job) (ElasticDL);
//   - with todo empty, a speculative backup copy of the longest-running
//     pending task that has run more than 2 x the median of the last 64
//     finished durations (at least 3 needed), has no backup yet and is not
//     held by this trainer (Paddle's "speculative execution");
//   - else WAIT (retry_after_ms = WaitRetryMs).
//
// A backup copy comes back as the task with Epoch = BackupEpoch = the new
// epoch (the one to report), Trainer = the primary's trainer and
// BackupTrainer = req.Trainer. Passes roll over eagerly (in the command that
// finishes the last task), so GetTask never sees an ended pass with work
// left to hand out.
func (q *Queue) GetTask(now int64, req *pb.GetTaskRequest) (*pb.GetTaskResponse, error) {
	j, err := q.job(req.GetJob())
	if err != nil {
		return nil, err
	}
	trainer := req.GetTrainer()
	if err := validTrainer("trainer", trainer); err != nil {
		return nil, err
	}
	if j.state != pb.JobState_JOB_RUNNING {
		return &pb.GetTaskResponse{Result: pb.GetTaskResponse_JOB_OVER, Pass: j.pass}, nil
	}
	if ts := j.trainers[trainer]; ts != nil && now < ts.until {
		return &pb.GetTaskResponse{Result: pb.GetTaskResponse_WAIT, Pass: j.pass, RetryAfterMs: satAdd(satSub(ts.until, now), msNs-1) / msNs}, nil
	}
	switch j.eval.state {
	case evalTodo:
		j.epoch++
		e := &j.eval
		e.state = evalPending
		e.run = run{epoch: j.epoch, started: now, deadline: satAdd(now, j.timeout(j.slowestEval)), trainer: trainer}
		return &pb.GetTaskResponse{Result: pb.GetTaskResponse_TASK, Pass: e.pass, Task: &pb.Task{
			Id: evalID(e.pass), Kind: pb.TaskKind_TASK_KIND_EVAL, Pass: e.pass, Epoch: e.run.epoch,
			Trainer: trainer, StartedUnixNano: now, DeadlineUnixNano: e.run.deadline, State: pb.TaskState_TASK_PENDING,
			Timeouts: int32(e.timeouts), Failures: int32(e.failures),
		}}, nil
	case evalPending:
		return &pb.GetTaskResponse{Result: pb.GetTaskResponse_PASS_OVER, Pass: j.eval.pass, RetryAfterMs: WaitRetryMs}, nil
	}
	if len(j.pending) >= MaxPending {
		return &pb.GetTaskResponse{Result: pb.GetTaskResponse_WAIT, Pass: j.pass, RetryAfterMs: WaitRetryMs}, nil
	}
	if j.todo.len() > 0 {
		id := j.todo.pop()
		j.epoch++
		j.tasks[id].epoch = j.epoch
		j.tasks[id].slot = int32(len(j.pending))
		j.pending = append(j.pending, pendingTask{id: id, primary: run{
			epoch: j.epoch, started: now, deadline: satAdd(now, j.timeout(j.slowest)), trainer: trainer,
		}})
		return &pb.GetTaskResponse{Result: pb.GetTaskResponse_TASK, Pass: j.pass, Task: j.taskProto(id)}, nil
	}
	if p := j.speculative(now, trainer); p != nil {
		j.epoch++
		p.backup = run{epoch: j.epoch, started: now, deadline: satAdd(now, j.timeout(j.slowest)), trainer: trainer}
		t := j.taskProto(p.id)
		// The backup trainer must report the backup epoch; the response names
		// it as the task's epoch and keeps the primary in trainer/backup_*.
		t.Epoch, t.StartedUnixNano, t.DeadlineUnixNano = p.backup.epoch, p.backup.started, p.backup.deadline
		return &pb.GetTaskResponse{Result: pb.GetTaskResponse_TASK, Pass: j.pass, Task: t}, nil
	}
	return &pb.GetTaskResponse{Result: pb.GetTaskResponse_WAIT, Pass: j.pass, RetryAfterMs: WaitRetryMs}, nil
}

// timeout returns max(floor, 3 x slowest) in ns, saturating at
// math.MaxInt64 (slowest is a difference of two stamped clocks, so it can
// be anything a leader stamped).
func (j *job) timeout(slowest int64) int64 {
	floor := j.spec.TaskTimeoutFloorMs * msNs // <= jobspec.MaxTaskTimeoutFloorMs x 1e6: no overflow
	if slowest > math.MaxInt64/timeoutFactor {
		return math.MaxInt64
	}
	return max(floor, timeoutFactor*slowest)
}

// satAdd returns a+b clamped to the int64 range.
func satAdd(a, b int64) int64 {
	s := a + b
	switch {
	case a > 0 && b > 0 && s < 0:
		return math.MaxInt64
	case a < 0 && b < 0 && s >= 0:
		return math.MinInt64
	}
	return s
}

// satMul returns a*b for a, b >= 0, clamped at math.MaxInt64.
func satMul(a, b int64) int64 {
	if a != 0 && b > math.MaxInt64/a {
		return math.MaxInt64
	}
	return a * b
}

// satSub returns a-b clamped to the int64 range.
func satSub(a, b int64) int64 {
	if b == math.MinInt64 {
		if a >= 0 {
			return math.MaxInt64
		}
		return a - b
	}
	return satAdd(a, -b)
}

// median returns the median of the kept finished durations, or ok = false
// with fewer than backupMinRuns of them.
func (j *job) median() (int64, bool) {
	d := j.durations.ordered()
	if len(d) < backupMinRuns {
		return 0, false
	}
	slices.Sort(d)
	return d[len(d)/2], true
}

// speculative picks the pending task to back up for trainer, or nil.
func (j *job) speculative(now int64, trainer string) *pendingTask {
	med, ok := j.median()
	if !ok {
		return nil
	}
	var best *pendingTask
	for i := range j.pending {
		p := &j.pending[i]
		if p.backup.epoch != 0 || p.primary.trainer == trainer || satSub(now, p.primary.started) <= satMul(backupFactor, med) {
			continue
		}
		if best == nil || p.primary.started < best.primary.started || p.primary.started == best.primary.started && p.id < best.id {
			best = p
		}
	}
	return best
}

// ---------------------------------------------------------------- finish

// TaskFinished reports a task done. It is accepted if the task is pending
// and req.Epoch names its primary or its backup copy (the first finish wins;
// the other copy's later finish is a stale no-op), or names the pending eval
// task. An accepted train finish moves the task to done, records its
// duration (now - started of that copy) for the adaptive timeout and the
// median, adds the loss (weighted by examples) to the pass metric, resets the
// trainer's consecutive failures and emits TASK_DONE; the last task of a pass
// ends the pass. A finish with metrics.step >= spec.max_steps ends the job
// after this pass (its eval, if any, still runs). An accepted eval finish
// stores the pass's PassMetric, emits EVAL_REPORTED and rolls the pass over.
// Stale or unknown (job not running, task not pending, epoch mismatch)
// finishes return accepted = false and change nothing. The epoch is the
// fence: req.Trainer is not consulted. Unknown job: errs.ErrNotFound.
func (q *Queue) TaskFinished(now int64, req *pb.TaskFinishedRequest) (*pb.TaskFinishedResponse, error) {
	j, err := q.job(req.GetJob())
	if err != nil {
		return nil, err
	}
	no := &pb.TaskFinishedResponse{}
	if j.state != pb.JobState_JOB_RUNNING {
		return no, nil
	}
	m := req.GetMetrics()
	if req.TaskId < 0 {
		e := &j.eval
		if e.state != evalPending || req.TaskId != evalID(e.pass) || req.Epoch != e.run.epoch {
			return no, nil
		}
		j.slowestEval = max(j.slowestEval, satSub(now, e.run.started)) // negative (clock skew between leaders) is ignored
		j.succeeded(e.run.trainer)
		step := m.GetStep()
		if step == 0 {
			step = j.acc.maxStep
		}
		pm := j.passMetric()
		pm.TestLoss, pm.TestAccuracy, pm.Step = m.GetLoss(), m.GetAccuracy(), step
		pm.CheckpointVersion = j.versionAt(step)
		j.emit(now, event{typ: pb.JobEvent_EVAL_REPORTED, pass: e.pass, taskID: req.TaskId, epoch: req.Epoch,
			trainer: e.run.trainer, loss: m.GetLoss(), accuracy: m.GetAccuracy(), examples: m.GetExamples(), version: pm.CheckpointVersion})
		*e = evalTask{}
		j.rollover(now, pm)
		return &pb.TaskFinishedResponse{Accepted: true}, nil
	}
	if req.TaskId >= int64(j.nTasks) || j.tasks[req.TaskId].slot < 0 {
		return no, nil
	}
	id := int32(req.TaskId)
	p := &j.pending[j.tasks[id].slot]
	var c run
	switch req.Epoch {
	case p.primary.epoch:
		c = p.primary
	case p.backup.epoch:
		if req.Epoch == 0 {
			return no, nil
		}
		c = p.backup
	default:
		return no, nil
	}
	j.tasks[id].epoch = c.epoch
	j.removePending(id, slotDone)
	j.nDone++
	// Cluster time never goes backwards; clamp at 0 all the same.
	d := max(satSub(now, c.started), 0)
	j.slowest = max(j.slowest, d)
	j.durations.push(d)
	j.succeeded(c.trainer)
	examples := max(m.GetExamples(), 0)
	if loss, w := m.GetLoss(), float64(max(examples, 1)); finite(loss) && finite(j.acc.lossSum+loss*w) && finite(j.acc.weight+w) {
		j.acc.lossSum += loss * w
		j.acc.weight += w
	}
	j.acc.examples = satAdd(j.acc.examples, examples)
	j.acc.finished++
	j.acc.maxStep = max(j.acc.maxStep, m.GetStep())
	j.emit(now, event{typ: pb.JobEvent_TASK_DONE, pass: j.pass, taskID: int64(id), epoch: c.epoch,
		trainer: c.trainer, loss: m.GetLoss(), accuracy: m.GetAccuracy(), examples: m.GetExamples(), version: m.GetStep()})
	if ms := j.spec.MaxSteps; ms > 0 && m.GetStep() >= ms && !j.final {
		j.final = true
		left := j.todo.len() + len(j.pending)
		for len(j.pending) > 0 {
			j.removePending(j.pending[len(j.pending)-1].id, slotTodo)
		}
		j.endPass(now, fmt.Sprintf("max_steps %d reached at step %d; %d tasks not run", ms, m.GetStep(), left))
		return &pb.TaskFinishedResponse{Accepted: true}, nil
	}
	j.maybeEndPass(now)
	return &pb.TaskFinishedResponse{Accepted: true}, nil
}

// succeeded resets the trainer's consecutive failure count.
func (j *job) succeeded(trainer string) {
	if ts := j.trainers[trainer]; ts != nil {
		ts.consecutive = 0
	}
}

// removePending takes task id out of pending and sets its slot to to
// (slotTodo pushes it onto the back of todo). O(1): swap with the last.
func (j *job) removePending(id int32, to int32) {
	i := j.tasks[id].slot
	last := int32(len(j.pending) - 1)
	if i != last {
		j.pending[i] = j.pending[last]
		j.tasks[j.pending[i].id].slot = i
	}
	j.pending[last] = pendingTask{}
	j.pending = j.pending[:last]
	j.tasks[id].slot = to
	switch to {
	case slotTodo:
		j.todo.push(id)
	case slotFailed:
		j.nFailed++
	}
}

// ---------------------------------------------------------------- fail

// TaskFailed reports that a trainer gave up on a task (req.Reason). It is
// accepted if req.Epoch names a pending copy of the task (or the pending
// eval). The task's failures and the trainer's consecutive failures count
// one up; BlacklistAfter consecutive failures blacklist the trainer for
// 1 s, 2 s, 4 s, ... up to 1 h (Horovod Elastic). If another copy of the
// task still runs, only the failed copy is dropped; otherwise the task goes
// back to todo (TASK_REQUEUED), or to failed (TASK_FAILED) once failures +
// timeouts exceed spec.max_task_timeouts. A failed eval is retried the same
// way; past the threshold the pass rolls over without test metrics. Stale or
// unknown reports return accepted = false. Unknown job: errs.ErrNotFound.
func (q *Queue) TaskFailed(now int64, req *pb.TaskFailedRequest) (*pb.TaskFailedResponse, error) {
	j, err := q.job(req.GetJob())
	if err != nil {
		return nil, err
	}
	no := &pb.TaskFailedResponse{}
	if j.state != pb.JobState_JOB_RUNNING {
		return no, nil
	}
	if req.TaskId < 0 {
		e := &j.eval
		if e.state != evalPending || req.TaskId != evalID(e.pass) || req.Epoch != e.run.epoch {
			return no, nil
		}
		j.failed(now, e.run.trainer)
		e.failures = sat(e.failures)
		j.evalBack(now, "failed: "+req.Reason)
		return &pb.TaskFailedResponse{Accepted: true}, nil
	}
	if req.TaskId >= int64(j.nTasks) || j.tasks[req.TaskId].slot < 0 {
		return no, nil
	}
	id := int32(req.TaskId)
	t := &j.tasks[id]
	p := &j.pending[t.slot]
	switch {
	case req.Epoch == p.primary.epoch:
		j.failed(now, p.primary.trainer)
		t.failures = sat(t.failures)
		if p.backup.epoch != 0 {
			j.promote(id)
			return &pb.TaskFailedResponse{Accepted: true}, nil
		}
		j.back(now, id, p.primary, "failed: "+req.Reason)
	case req.Epoch == p.backup.epoch && req.Epoch != 0:
		j.failed(now, p.backup.trainer)
		t.failures = sat(t.failures)
		p.backup = run{}
	default:
		return no, nil
	}
	j.maybeEndPass(now)
	return &pb.TaskFailedResponse{Accepted: true}, nil
}

func sat(v uint16) uint16 {
	if v == math.MaxUint16 {
		return v
	}
	return v + 1
}

// failed counts a failure of trainer and blacklists it on the
// BlacklistAfter-th consecutive one.
func (j *job) failed(now int64, trainer string) {
	ts := j.trainers[trainer]
	if ts == nil {
		ts = &trainerStat{}
		j.trainers[trainer] = ts
	}
	ts.consecutive++
	defer j.forgetTrainers(now)
	if ts.consecutive < BlacklistAfter {
		return
	}
	ts.consecutive = 0
	if ts.strikes < math.MaxInt32 {
		ts.strikes++
	}
	ts.until = satAdd(now, cooldown(ts.strikes))
}

// cooldown is the blacklist duration (ns) of the n-th blacklisting:
// 1 s x 2^(n-1), at most 1 h.
func cooldown(n int32) int64 {
	if n > 12 { // 2^12 s > 1 h
		return BlacklistMax
	}
	n = max(n, 1)
	return min(BlacklistBase<<(n-1), BlacklistMax)
}

// promote drops the primary copy of pending task id and makes its backup
// the primary.
func (j *job) promote(id int32) {
	p := &j.pending[j.tasks[id].slot]
	p.primary, p.backup = p.backup, run{}
	j.tasks[id].epoch = p.primary.epoch
}

// back moves pending task id (whose last copy c ended) to todo, or to failed
// once failures + timeouts exceed the threshold.
func (j *job) back(now int64, id int32, c run, why string) {
	t := &j.tasks[id]
	if int(t.failures)+int(t.timeouts) > int(j.spec.MaxTaskTimeouts) {
		j.removePending(id, slotFailed)
		j.emit(now, event{typ: pb.JobEvent_TASK_FAILED, pass: j.pass, taskID: int64(id), epoch: c.epoch, trainer: c.trainer,
			message: fmt.Sprintf("%s; %d failures + %d timeouts > max_task_timeouts %d", why, t.failures, t.timeouts, j.spec.MaxTaskTimeouts)})
		return
	}
	j.removePending(id, slotTodo)
	j.requeued++
	j.emit(now, event{typ: pb.JobEvent_TASK_REQUEUED, pass: j.pass, taskID: int64(id), epoch: c.epoch, trainer: c.trainer, message: why})
}

// evalBack returns the pending eval to evalTodo, or gives up on it past the
// threshold and rolls the pass over without test metrics.
func (j *job) evalBack(now int64, why string) {
	e := &j.eval
	if int(e.failures)+int(e.timeouts) > int(j.spec.MaxTaskTimeouts) {
		j.emit(now, event{typ: pb.JobEvent_TASK_FAILED, pass: e.pass, taskID: evalID(e.pass), epoch: e.run.epoch, trainer: e.run.trainer,
			message: fmt.Sprintf("eval %s; %d failures + %d timeouts > max_task_timeouts %d; pass ends without test metrics", why, e.failures, e.timeouts, j.spec.MaxTaskTimeouts)})
		*e = evalTask{}
		j.rollover(now, j.passMetric())
		return
	}
	j.emit(now, event{typ: pb.JobEvent_TASK_REQUEUED, pass: e.pass, taskID: evalID(e.pass), epoch: e.run.epoch, trainer: e.run.trainer, message: why})
	e.state, e.run = evalTodo, run{}
	j.requeued++
}

// ---------------------------------------------------------------- expire

// ExpireTasks expires the pending tasks of job req.Job whose deadline is
// before now, in id order: a task whose every copy is past its deadline goes
// back to todo with timeouts+1 (TASK_REQUEUED), or to failed past the
// threshold (TASK_FAILED); a dead copy next to a live one is just dropped.
// The pending eval expires the same way. req.Job == "" expires every running
// job (sorted by name). Returns the number of tasks that left pending.
// Unknown job: errs.ErrNotFound.
func (q *Queue) ExpireTasks(now int64, req *pb.ExpireTasksRequest) (*pb.ExpireTasksResponse, error) {
	names := []string{req.GetJob()}
	if req.GetJob() == "" {
		names = q.names()
	} else if _, err := q.job(req.GetJob()); err != nil {
		return nil, err
	}
	var n int64
	for _, name := range names {
		n += q.jobs[name].expire(now)
	}
	return &pb.ExpireTasksResponse{Expired: n}, nil
}

func (j *job) expire(now int64) int64 {
	if j.state != pb.JobState_JOB_RUNNING {
		return 0
	}
	var n int64
	for _, id := range j.pendingIDs() {
		t := &j.tasks[id]
		p := &j.pending[t.slot]
		primaryDead := p.primary.deadline < now
		backupDead := p.backup.epoch != 0 && p.backup.deadline < now
		switch {
		case primaryDead && (p.backup.epoch == 0 || backupDead):
			t.timeouts = sat(t.timeouts)
			j.timeouts++
			n++
			last := p.primary
			if p.backup.epoch != 0 && p.backup.deadline > last.deadline {
				last = p.backup
			}
			j.back(now, id, last, "timeout")
		case primaryDead:
			j.promote(id)
		case backupDead:
			p.backup = run{}
		}
	}
	if e := &j.eval; e.state == evalPending && e.run.deadline < now {
		e.timeouts = sat(e.timeouts)
		j.timeouts++
		n++
		j.evalBack(now, "timeout")
	}
	j.maybeEndPass(now)
	return n
}

// pendingIDs returns the ids of the pending tasks, sorted.
func (j *job) pendingIDs() []int32 {
	ids := make([]int32, len(j.pending))
	for i := range j.pending {
		ids[i] = j.pending[i].id
	}
	slices.Sort(ids)
	return ids
}

// ---------------------------------------------------------------- requeue

// RequeueTrainer gives back at once everything trainer req.Trainer holds in
// job req.Job (gossip declared it dead, or it left): its pending tasks go
// back to todo in id order without counting a timeout (TASK_REQUEUED), its
// backup copies are dropped, a primary copy next to another trainer's backup
// is replaced by that backup, and a pending eval goes back to be handed out
// again. Emits TRAINER_LEFT (message req.Reason). req.Job == "" does this in
// every running job where the trainer holds a task or has a failure record.
// Returns the number of tasks that went back to todo. Unknown job:
// errs.ErrNotFound; empty trainer: errs.ErrInvalid.
func (q *Queue) RequeueTrainer(now int64, req *pb.RequeueTrainerRequest) (*pb.RequeueTrainerResponse, error) {
	if err := validTrainer("trainer", req.GetTrainer()); err != nil {
		return nil, err
	}
	var n int64
	if req.GetJob() == "" {
		for _, name := range q.names() {
			j := q.jobs[name]
			if j.state == pb.JobState_JOB_RUNNING && (j.holds(req.Trainer) || j.trainers[req.Trainer] != nil) {
				n += j.requeueTrainer(now, req.Trainer, req.Reason)
			}
		}
		return &pb.RequeueTrainerResponse{Requeued: n}, nil
	}
	j, err := q.job(req.GetJob())
	if err != nil {
		return nil, err
	}
	if j.state == pb.JobState_JOB_RUNNING {
		n = j.requeueTrainer(now, req.Trainer, req.Reason)
	}
	return &pb.RequeueTrainerResponse{Requeued: n}, nil
}

func (j *job) holds(trainer string) bool {
	if j.eval.state == evalPending && j.eval.run.trainer == trainer {
		return true
	}
	for i := range j.pending {
		if j.pending[i].primary.trainer == trainer || j.pending[i].backup.trainer == trainer {
			return true
		}
	}
	return false
}

func (j *job) requeueTrainer(now int64, trainer, reason string) int64 {
	var n int64
	why := "trainer left"
	if reason != "" {
		why += ": " + reason
	}
	for _, id := range j.pendingIDs() {
		p := &j.pending[j.tasks[id].slot]
		switch {
		case p.backup.epoch != 0 && p.backup.trainer == trainer && p.primary.trainer == trainer:
			p.backup = run{}
			fallthrough
		case p.backup.epoch == 0 && p.primary.trainer == trainer:
			n++
			epoch := p.primary.epoch
			j.removePending(id, slotTodo) // p is invalid from here
			j.requeued++
			j.emit(now, event{typ: pb.JobEvent_TASK_REQUEUED, pass: j.pass, taskID: int64(id), epoch: epoch, trainer: trainer, message: why})
		case p.primary.trainer == trainer:
			j.promote(id)
		case p.backup.trainer == trainer && p.backup.epoch != 0:
			p.backup = run{}
		}
	}
	if e := &j.eval; e.state == evalPending && e.run.trainer == trainer {
		j.emit(now, event{typ: pb.JobEvent_TASK_REQUEUED, pass: e.pass, taskID: evalID(e.pass), epoch: e.run.epoch, trainer: trainer, message: why})
		e.state, e.run = evalTodo, run{}
		j.requeued++
	}
	j.emit(now, event{typ: pb.JobEvent_TRAINER_LEFT, pass: j.pass, trainer: trainer, message: reason})
	return n
}

// ---------------------------------------------------------------- passes

// maybeEndPass ends the pass when todo and pending are empty and no eval of
// it is due.
func (j *job) maybeEndPass(now int64) {
	if j.state == pb.JobState_JOB_RUNNING && j.todo.len() == 0 && len(j.pending) == 0 && j.eval.state == evalNone {
		j.endPass(now, "")
	}
}

// endPass emits PASS_ENDED and either schedules the eval of the pass
// (spec.eval_each_pass and at least one task done) or rolls over.
func (j *job) endPass(now int64, why string) {
	pm := j.passMetric()
	msg := fmt.Sprintf("%d done, %d failed", j.nDone, j.nFailed)
	if why != "" {
		msg += "; " + why
	}
	j.emit(now, event{typ: pb.JobEvent_PASS_ENDED, pass: j.pass, loss: pm.TrainLoss, examples: pm.Examples, message: msg})
	if j.spec.EvalEachPass && j.nDone > 0 {
		j.eval = evalTask{state: evalTodo, pass: j.pass}
		return
	}
	j.rollover(now, pm)
}

// passMetric returns the train part of the current pass's metric.
func (j *job) passMetric() *pb.PassMetric {
	pm := &pb.PassMetric{Pass: j.pass, Examples: j.acc.examples, Step: j.acc.maxStep, CheckpointVersion: j.versionAt(j.acc.maxStep)}
	if j.acc.weight > 0 {
		pm.TrainLoss = j.acc.lossSum / j.acc.weight
	}
	return pm
}

// versionAt is the newest committed checkpoint version if it holds the
// parameters after exactly step (CheckpointVersionStep), else 0: a metric
// names only the version whose parameters it measured (RecordEvent attaches
// one committed later).
func (j *job) versionAt(step int64) int64 {
	if v := j.ckptVersion; v > 0 && schema.VersionStep(v) == step {
		return v
	}
	return 0
}

// rollover stores the pass's metric and starts the next pass (done tasks
// back to todo in id order, per-task counts reset), or ends the job: failed
// if no task of the pass got done, succeeded after the last pass or when
// max_steps was reached.
func (j *job) rollover(now int64, pm *pb.PassMetric) {
	j.metrics = append(j.metrics, pm)
	switch {
	case j.nDone == 0:
		j.end(now, pb.JobState_JOB_FAILED, fmt.Sprintf("pass %d: all %d tasks failed", j.pass, j.nFailed))
		return
	case j.final:
		j.end(now, pb.JobState_JOB_SUCCEEDED, fmt.Sprintf("max_steps %d reached in pass %d", j.spec.MaxSteps, j.pass))
		return
	case j.pass+1 >= j.spec.Passes:
		msg := fmt.Sprintf("%d passes done", j.spec.Passes)
		if j.nFailed > 0 {
			msg += fmt.Sprintf("; %d tasks failed", j.nFailed)
		}
		j.end(now, pb.JobState_JOB_SUCCEEDED, msg)
		return
	}
	j.pass++
	j.acc = passAcc{}
	j.todo.reset()
	for id := range j.nTasks {
		t := &j.tasks[id]
		if t.slot == slotDone {
			t.slot, t.timeouts, t.failures = slotTodo, 0, 0
			j.todo.push(id)
		}
	}
	j.nDone = 0
}

// end ends the job in state st and emits JOB_ENDED.
func (j *job) end(now int64, st pb.JobState, msg string) {
	j.state, j.message, j.finished, j.finishedWall = st, msg, now, j.stamp.shown(now)
	j.emit(now, event{typ: pb.JobEvent_JOB_ENDED, pass: j.pass, message: st.String() + ": " + msg})
}

func finite(v float64) bool { return !math.IsNaN(v) && !math.IsInf(v, 0) }
