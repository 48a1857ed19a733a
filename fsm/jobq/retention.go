package jobq

import (
	"fmt"
	"slices"
	"unicode/utf8"

	"github.com/raftps/raftps/api/errs"
	pb "github.com/raftps/raftps/api/raftpspb"
)

// Bounds on the job state (issue 12 item 8). With them every job's state,
// and so its snapshot record, is bounded whatever clients send:
//
//	tasks    <= jobspec.MaxTasks x ~17 B (slot, epoch delta, counts)     ~  71 MB
//	todo     <= jobspec.MaxTasks x 5 B                                    ~  21 MB
//	pending  <= MaxPending x 2 copies x (30 + MaxTrainerLen) B    ~  21 MB
//	events   <= jobspec.MaxEvents x (~90 + MaxTrainerLen + MaxEventMessage) B ~ 47 MB
//	metrics  <= jobspec.MaxPasses x ~60 B, trainers <= MaxTrainerRecords x ~150 B,
//	spec     <= jobspec.MaxSpecBytes
//
// about 170 MB at worst, below MaxJobRecordBytes; and at most MaxJobs jobs.
const (
	// MaxJobs bounds the number of jobs. A submission beyond it deletes the
	// oldest finished jobs first (by finish time, then name) and is refused
	// (errs.ErrFailedPrecondition) if every job is running.
	MaxJobs = 1024
	// MaxEventMessage bounds an event's message in bytes: longer messages
	// (a trainer's failure reason, a recorded event) are cut at a UTF-8
	// boundary, with "..." appended.
	MaxEventMessage = 256
	// MaxTrainerLen bounds a trainer id (GetTask, RecordEvent,
	// RequeueTrainer refuse longer ones with errs.ErrInvalid).
	MaxTrainerLen = 128
	// MaxPending bounds the pending copies of one job: GetTask answers WAIT
	// while that many are out.
	MaxPending = 1 << 16
	// MaxTrainerRecords bounds a job's per-trainer failure records: past
	// it, records of trainers that are neither blacklisted nor failing are
	// forgotten.
	MaxTrainerRecords = 4096
	// MaxJobRecordBytes bounds one job's snapshot record (see above).
	MaxJobRecordBytes = 512 << 20
)

// truncate cuts s to at most n bytes at a rune boundary, marking the cut.
func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	cut := n - len("...")
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + "..."
}

func validTrainer(field, trainer string) error {
	switch {
	case trainer == "":
		return invalid(field, "must not be empty")
	case len(trainer) > MaxTrainerLen:
		return invalid(field, "is %d bytes, more than %d", len(trainer), MaxTrainerLen)
	}
	return nil
}

func (j *job) running() bool { return j.state == pb.JobState_JOB_RUNNING }

// Delete removes a job that is not running, with its tasks and events, and
// returns its last status. A running job is errs.ErrFailedPrecondition
// (cancel it first); an unknown job errs.ErrNotFound. The job's keys in the
// key/value store (slots, trainers, checkpoints) are not the queue's: the
// caller deletes them.
func (q *Queue) Delete(now int64, req *pb.DeleteJobRequest) (*pb.DeleteJobResponse, error) {
	j, err := q.job(req.GetName())
	if err != nil {
		return nil, err
	}
	if j.running() {
		return nil, fmt.Errorf("%w: job %q is running; cancel it before deleting it", errs.ErrFailedPrecondition, j.name)
	}
	st := j.status()
	delete(q.jobs, j.name)
	return &pb.DeleteJobResponse{Status: st}, nil
}

// Prune deletes finished jobs past the retention limits, measured with now
// (the entry's cluster time, so every replica deletes the same jobs): the
// jobs PruneDue names. Returns the deleted names, sorted. A negative limit
// is errs.ErrInvalid.
func (q *Queue) Prune(now int64, req *pb.PruneJobsRequest) (*pb.PruneJobsResponse, error) {
	del, err := q.PruneDue(now, req)
	if err != nil {
		return nil, err
	}
	for _, name := range del {
		delete(q.jobs, name)
	}
	return &pb.PruneJobsResponse{Deleted: del}, nil
}

// PruneDue returns, sorted, the finished jobs Prune would delete at now
// (cluster time, Unix ns) and changes nothing: those that finished more
// than max_age_ms before now (0: no age limit), then the oldest finished
// beyond the newest keep_finished (0: no count limit). Running jobs are
// never due. The set only grows with now, so a leader that finds it
// non-empty at its estimate of cluster time (fsm.ClockEstimator, never
// ahead of the next entry's clock) proposes a prune that deletes. A
// negative limit is errs.ErrInvalid.
func (q *Queue) PruneDue(now int64, req *pb.PruneJobsRequest) ([]string, error) {
	if req.GetMaxAgeMs() < 0 {
		return nil, invalid("max_age_ms", "must be >= 0, got %d", req.GetMaxAgeMs())
	}
	if req.GetKeepFinished() < 0 {
		return nil, invalid("keep_finished", "must be >= 0, got %d", req.GetKeepFinished())
	}
	finished := q.finishedOldestFirst()
	var del []string
	if age := req.GetMaxAgeMs(); age > 0 {
		maxAge := satMul(age, msNs)
		for len(finished) > 0 && satSub(now, finished[0].finished) > maxAge {
			del = append(del, finished[0].name)
			finished = finished[1:]
		}
	}
	if keep := int(req.GetKeepFinished()); keep > 0 && len(finished) > keep {
		for _, j := range finished[:len(finished)-keep] {
			del = append(del, j.name)
		}
	}
	slices.Sort(del)
	return del, nil
}

// finishedOldestFirst returns the jobs that are not running, ordered by
// finish time then name.
func (q *Queue) finishedOldestFirst() []*job {
	var out []*job
	for _, name := range q.names() {
		if j := q.jobs[name]; !j.running() {
			out = append(out, j)
		}
	}
	slices.SortStableFunc(out, func(a, b *job) int {
		switch {
		case a.finished < b.finished:
			return -1
		case a.finished > b.finished:
			return 1
		}
		return 0
	})
	return out
}

// makeRoom deletes the oldest finished jobs until a new job fits under
// MaxJobs, or returns errs.ErrFailedPrecondition if every job is running.
// It changes nothing when it fails.
func (q *Queue) makeRoom() error {
	over := len(q.jobs) + 1 - MaxJobs
	if over <= 0 {
		return nil
	}
	finished := q.finishedOldestFirst()
	if len(finished) < over {
		return fmt.Errorf("%w: %d jobs are running, the most this cluster keeps (MaxJobs %d)", errs.ErrFailedPrecondition, len(q.jobs)-len(finished), MaxJobs)
	}
	for _, j := range finished[:over] {
		delete(q.jobs, j.name)
	}
	return nil
}

// forgetTrainers keeps the job's trainer records under MaxTrainerRecords by
// dropping those of trainers that are neither blacklisted at now nor on a
// failure streak. Deterministic: the set dropped depends only on the state.
func (j *job) forgetTrainers(now int64) {
	if len(j.trainers) <= MaxTrainerRecords {
		return
	}
	for name, ts := range j.trainers {
		if ts.consecutive == 0 && ts.until <= now {
			delete(j.trainers, name)
		}
	}
}
