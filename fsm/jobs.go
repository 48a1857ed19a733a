package fsm

import (
	pb "github.com/raftps/raftps/api/raftpspb"
	"github.com/raftps/raftps/fsm/jobq"
)

// JobQueue is the deterministic job and task-queue state the FSM embeds
// (implemented by package fsm/jobq). It does no locking and reads no clock:
// the FSM holds its lock around every call and passes the leader's stamped
// time as now (Unix nanoseconds). A mutating method that returns an error
// must have changed nothing; its errors wrap the sentinels of api/errs.
type JobQueue interface {
	JobReader
	Submit(now int64, req *pb.SubmitJobRequest) (*pb.SubmitJobResponse, error)
	Cancel(now int64, req *pb.CancelJobRequest) (*pb.CancelJobResponse, error)
	GetTask(now int64, req *pb.GetTaskRequest) (*pb.GetTaskResponse, error)
	TaskFinished(now int64, req *pb.TaskFinishedRequest) (*pb.TaskFinishedResponse, error)
	TaskFailed(now int64, req *pb.TaskFailedRequest) (*pb.TaskFailedResponse, error)
	ExpireTasks(now int64, req *pb.ExpireTasksRequest) (*pb.ExpireTasksResponse, error)
	RequeueTrainer(now int64, req *pb.RequeueTrainerRequest) (*pb.RequeueTrainerResponse, error)
	RecordEvent(now int64, ev *pb.JobEvent) (*pb.JobEvent, error)
	Delete(now int64, req *pb.DeleteJobRequest) (*pb.DeleteJobResponse, error)
	Prune(now int64, req *pb.PruneJobsRequest) (*pb.PruneJobsResponse, error)
	// MarshalJobs encodes the state as one bounded record per job, sorted
	// by name (the snapshot's job records); UnmarshalJobs replaces the state
	// with such records. UnmarshalBinary reads the whole-queue blob of
	// older snapshots.
	MarshalJobs() ([][]byte, error)
	UnmarshalJobs([][]byte) error
	// SetEntryWall gives the wall clock of the proposer of the entry about
	// to be applied (Entry.now_unix_nano, 0 if none): what the queue
	// stamps on what users read (events, submit and finish times).
	SetEntryWall(wallUnixNano int64)
	UnmarshalBinary([]byte) error
}

// JobReader reads the job state. The reader FSM.Jobs returns takes the FSM's
// read lock around each call, so every call sees one applied state.
type JobReader interface {
	// Job returns a copy of the named job's status.
	Job(name string) (*pb.JobStatus, bool)
	// Jobs returns every job's status (copies).
	Jobs() []*pb.JobStatus
	// Events returns the job's events with seq >= fromSeq, at most limit (> 0).
	Events(job string, fromSeq int64, limit int) ([]*pb.JobEvent, error)
	// EventSeq is the seq of the job's latest event (0 if none).
	EventSeq(job string) int64
	// Tasks returns the job's tasks (copies).
	Tasks(job string) []*pb.Task
	// Pending returns the job's pending tasks (copies): O(pending).
	Pending(job string) []*pb.Task
	// PruneDue names, sorted, the finished jobs a PruneJobs command applied
	// at cluster time now (Unix ns) would delete; it changes nothing.
	PruneDue(now int64, req *pb.PruneJobsRequest) ([]string, error)
}

// defaultJobQueue builds the job queue of a new FSM (and of a restore).
func defaultJobQueue() JobQueue { return jobq.New() }

var _ JobQueue = (*jobq.Queue)(nil)

// Jobs returns a reader of the job state that locks the FSM for each call.
func (f *FSM) Jobs() JobReader { return lockedJobs{f} }

type lockedJobs struct{ f *FSM }

func (r lockedJobs) Job(name string) (*pb.JobStatus, bool) {
	r.f.mu.RLock()
	defer r.f.mu.RUnlock()
	return r.f.jobs.Job(name)
}

func (r lockedJobs) Jobs() []*pb.JobStatus {
	r.f.mu.RLock()
	defer r.f.mu.RUnlock()
	return r.f.jobs.Jobs()
}

func (r lockedJobs) Events(job string, fromSeq int64, limit int) ([]*pb.JobEvent, error) {
	r.f.mu.RLock()
	defer r.f.mu.RUnlock()
	return r.f.jobs.Events(job, fromSeq, limit)
}

func (r lockedJobs) EventSeq(job string) int64 {
	r.f.mu.RLock()
	defer r.f.mu.RUnlock()
	return r.f.jobs.EventSeq(job)
}

func (r lockedJobs) Tasks(job string) []*pb.Task {
	r.f.mu.RLock()
	defer r.f.mu.RUnlock()
	return r.f.jobs.Tasks(job)
}

func (r lockedJobs) Pending(job string) []*pb.Task {
	r.f.mu.RLock()
	defer r.f.mu.RUnlock()
	return r.f.jobs.Pending(job)
}

func (r lockedJobs) PruneDue(now int64, req *pb.PruneJobsRequest) ([]string, error) {
	r.f.mu.RLock()
	defer r.f.mu.RUnlock()
	return r.f.jobs.PruneDue(now, req)
}

// touched records that job changed (for Notification.JobsChanged).
func (c *applyCtx) touched(job string) {
	if job != "" {
		c.note.JobsChanged = append(c.note.JobsChanged, job)
	}
}

// applySubmitJob creates a job. With jobq.MaxJobs jobs kept, the submit
// first deletes the oldest finished jobs; those count as touched too.
func (f *FSM) applySubmitJob(c *applyCtx, req *pb.SubmitJobRequest) (*pb.SubmitJobResponse, error) {
	var before []*pb.JobStatus
	if js := f.jobs.Jobs(); len(js) >= jobq.MaxJobs {
		before = js
	}
	resp, err := f.jobs.Submit(c.now, req)
	if err == nil {
		c.touched(req.GetSpec().GetName())
		for _, j := range before {
			if _, ok := f.jobs.Job(j.GetName()); !ok {
				c.touched(j.GetName())
			}
		}
	}
	return resp, err
}

// applyDeleteJob removes a job that is not running (jobq.Queue.Delete).
func (f *FSM) applyDeleteJob(c *applyCtx, req *pb.DeleteJobRequest) (*pb.DeleteJobResponse, error) {
	resp, err := f.jobs.Delete(c.now, req)
	if err == nil {
		c.touched(req.GetName())
	}
	return resp, err
}

// applyPruneJobs deletes finished jobs past the retention limits, judged
// with the entry's cluster time (jobq.Queue.Prune).
func (f *FSM) applyPruneJobs(c *applyCtx, req *pb.PruneJobsRequest) (*pb.PruneJobsResponse, error) {
	resp, err := f.jobs.Prune(c.now, req)
	if err == nil {
		for _, name := range resp.GetDeleted() {
			c.touched(name)
		}
	}
	return resp, err
}

func (f *FSM) applyCancelJob(c *applyCtx, req *pb.CancelJobRequest) (*pb.CancelJobResponse, error) {
	resp, err := f.jobs.Cancel(c.now, req)
	if err == nil {
		c.touched(req.GetName())
	}
	return resp, err
}

func (f *FSM) applyGetTask(c *applyCtx, req *pb.GetTaskRequest) (*pb.GetTaskResponse, error) {
	resp, err := f.jobs.GetTask(c.now, req)
	if err == nil {
		c.touched(req.GetJob())
	}
	return resp, err
}

func (f *FSM) applyTaskFinished(c *applyCtx, req *pb.TaskFinishedRequest) (*pb.TaskFinishedResponse, error) {
	resp, err := f.jobs.TaskFinished(c.now, req)
	if err == nil {
		c.touched(req.GetJob())
	}
	return resp, err
}

func (f *FSM) applyTaskFailed(c *applyCtx, req *pb.TaskFailedRequest) (*pb.TaskFailedResponse, error) {
	resp, err := f.jobs.TaskFailed(c.now, req)
	if err == nil {
		c.touched(req.GetJob())
	}
	return resp, err
}

// applyExpireTasks expires overdue tasks of req.Job, or of every job when
// req.Job is empty (then every job counts as touched).
func (f *FSM) applyExpireTasks(c *applyCtx, req *pb.ExpireTasksRequest) (*pb.ExpireTasksResponse, error) {
	resp, err := f.jobs.ExpireTasks(c.now, req)
	if err == nil {
		if req.GetJob() != "" {
			c.touched(req.GetJob())
		} else if resp.GetExpired() > 0 {
			for _, j := range f.jobs.Jobs() {
				c.touched(j.GetName())
			}
		}
	}
	return resp, err
}

func (f *FSM) applyRequeueTrainer(c *applyCtx, req *pb.RequeueTrainerRequest) (*pb.RequeueTrainerResponse, error) {
	resp, err := f.jobs.RequeueTrainer(c.now, req)
	if err == nil {
		c.touched(req.GetJob())
	}
	return resp, err
}

func (f *FSM) applyJobEvent(c *applyCtx, req *pb.JobEvent) (*pb.JobEvent, error) {
	resp, err := f.jobs.RecordEvent(c.now, req)
	if err == nil {
		c.touched(req.GetJob())
	}
	return resp, err
}
