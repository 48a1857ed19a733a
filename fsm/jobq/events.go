package jobq

import (
	"fmt"

	"github.com/raftps/raftps/api/errs"
	pb "github.com/raftps/raftps/api/raftpspb"
	"github.com/raftps/raftps/schema"
)

// event is the compact stored form of a pb.JobEvent (the job name is implied).
type event struct {
	seq      int64
	unixNano int64
	taskID   int64
	epoch    int64
	examples int64
	version  int64
	loss     float64
	accuracy float64
	pass     int32
	typ      pb.JobEvent_Type
	trainer  string
	message  string
}

// eventRing keeps the newest cap events of a job.
type eventRing struct {
	buf  []event
	head int // index of the oldest event when len(buf) == cap
	cap  int
}

func (r *eventRing) len() int { return len(r.buf) }

func (r *eventRing) push(e event) {
	if len(r.buf) < r.cap {
		r.buf = append(r.buf, e)
		return
	}
	r.buf[r.head] = e
	r.head = (r.head + 1) % r.cap
}

// at returns the i-th oldest kept event.
func (r *eventRing) at(i int) *event { return &r.buf[(r.head+i)%len(r.buf)] }

// emit appends e with the next seq and unix_nano = the entry's wall clock
// (entryStamp; now, cluster time, without one).
// The message is cut to MaxEventMessage bytes.
func (j *job) emit(now int64, e event) {
	j.eventSeq++
	e.seq, e.unixNano = j.eventSeq, j.stamp.shown(now)
	e.message = truncate(e.message, MaxEventMessage)
	j.events.push(e)
}

func (j *job) eventProto(e *event) *pb.JobEvent {
	return &pb.JobEvent{
		Seq: e.seq, Type: e.typ, Job: j.name, Pass: e.pass, TaskId: e.taskID, Epoch: e.epoch,
		Trainer: e.trainer, Message: e.message, UnixNano: e.unixNano, Loss: e.loss,
		Accuracy: e.accuracy, Examples: e.examples, Version: e.version,
	}
}

// externalEvents are the event types RecordEvent accepts; the others are
// emitted by the queue itself.
var externalEvents = map[pb.JobEvent_Type]bool{
	pb.JobEvent_TRAINER_JOINED:       true,
	pb.JobEvent_TRAINER_LEFT:         true,
	pb.JobEvent_CHECKPOINT_COMMITTED: true,
	pb.JobEvent_PSERVER_RESTORED:     true,
	pb.JobEvent_SLOT_NOT_CLAIMED:     true,
	pb.JobEvent_TRAINER_NOT_STARTED:  true,
	pb.JobEvent_PSERVER_PROMOTED:     true, // a replicated slot's backup serves it (pserver/agent)
	pb.JobEvent_PSERVER_REREPLICATED: true, // a new backup joined a replicated slot (pserver/agent)
}

// RecordEvent appends an event reported from outside the queue (a trainer
// joined or left, a checkpoint was committed, a pserver restored) to the log
// of job ev.Job with the next seq and unix_nano = now, and returns the stored
// copy (its message cut to MaxEventMessage bytes). Other types
// (TASK_DONE, PASS_ENDED, ...) are emitted by the queue itself and
// rejected with errs.ErrInvalid, as is a trainer id over MaxTrainerLen
// bytes; an unknown job is
// errs.ErrNotFound. A CHECKPOINT_COMMITTED version is the checkpoint_version
// of a PassMetric only if it holds the parameters the metric measured: its
// step (CheckpointVersionStep) is the metric's, whether it was committed
// before the pass's metric was stored (the newest version) or after it (the
// newest metric without a version, same epoch). TRAINER_LEFT does not
// requeue anything: use RequeueTrainer for that.
func (q *Queue) RecordEvent(now int64, ev *pb.JobEvent) (*pb.JobEvent, error) {
	if ev == nil {
		return nil, invalid("event", "is required")
	}
	j, err := q.job(ev.Job)
	if err != nil {
		return nil, err
	}
	if !externalEvents[ev.Type] {
		return nil, invalid("type", "%v is emitted by the task queue, not recorded", ev.Type)
	}
	if len(ev.Trainer) > MaxTrainerLen {
		return nil, invalid("trainer", "is %d bytes, more than %d", len(ev.Trainer), MaxTrainerLen)
	}
	if ev.Type == pb.JobEvent_CHECKPOINT_COMMITTED && ev.Version > j.ckptVersion {
		// A checkpoint of the parameters the newest metric measured (its
		// step, on the trajectory of the newest version known, so not a
		// rollback's) committed after the metric was stored: name it.
		if n := len(j.metrics); n > 0 {
			m := j.metrics[n-1]
			if m.CheckpointVersion == 0 && schema.VersionStep(ev.Version) == m.Step &&
				ev.Version/schema.EpochStride == j.ckptVersion/schema.EpochStride {
				m.CheckpointVersion = ev.Version
			}
		}
		j.ckptVersion = ev.Version
	}
	pass := ev.Pass
	if pass == 0 {
		pass = j.pass
	}
	j.emit(now, event{
		typ: ev.Type, pass: pass, taskID: ev.TaskId, epoch: ev.Epoch, trainer: ev.Trainer,
		message: ev.Message, loss: ev.Loss, accuracy: ev.Accuracy, examples: ev.Examples, version: ev.Version,
	})
	return j.eventProto(j.events.at(j.events.len() - 1)), nil
}

// Events returns up to limit events of the job with seq >= fromSeq, oldest
// first (limit <= 0: all kept). The newest jobspec.MaxEvents events per job are
// kept; a fromSeq older than the oldest kept event returns an error wrapping
// errs.ErrCompacted (OutOfRange, as a watch from a compacted revision) that
// names the oldest kept seq. An unknown job
// is errs.ErrNotFound.
func (q *Queue) Events(name string, fromSeq int64, limit int) ([]*pb.JobEvent, error) {
	j, err := q.job(name)
	if err != nil {
		return nil, err
	}
	n := j.events.len()
	oldest := j.eventSeq - int64(n) + 1
	if fromSeq < oldest && oldest > 1 {
		return nil, fmt.Errorf("%w: job %q events from seq %d were dropped; the oldest kept is %d",
			errs.ErrCompacted, name, fromSeq, oldest)
	}
	start := max(fromSeq-oldest, 0)
	var out []*pb.JobEvent
	for i := int(start); i < n && (limit <= 0 || len(out) < limit); i++ {
		out = append(out, j.eventProto(j.events.at(i)))
	}
	return out, nil
}

// EventSeq returns the seq of the job's newest event (0 for none or an
// unknown job).
func (q *Queue) EventSeq(name string) int64 {
	if j, ok := q.jobs[name]; ok {
		return j.eventSeq
	}
	return 0
}

// deque is a fixed-capacity FIFO ring of task ids (a task is in todo at most
// once, so the capacity is the number of tasks).
type deque struct {
	buf  []int32
	head int
	n    int
}

func (d *deque) init(capacity int) { d.buf, d.head, d.n = make([]int32, capacity), 0, 0 }
func (d *deque) len() int          { return d.n }
func (d *deque) reset()            { d.head, d.n = 0, 0 }

func (d *deque) push(id int32) {
	d.buf[(d.head+d.n)%len(d.buf)] = id
	d.n++
}

func (d *deque) pop() int32 {
	id := d.buf[d.head]
	d.head = (d.head + 1) % len(d.buf)
	d.n--
	return id
}

// at returns the i-th id from the front.
func (d *deque) at(i int) int32 { return d.buf[(d.head+i)%len(d.buf)] }

// ring keeps the newest durationWindow durations.
type ring struct {
	buf  []int64
	head int
}

func (r *ring) push(v int64) {
	if len(r.buf) < durationWindow {
		r.buf = append(r.buf, v)
		return
	}
	r.buf[r.head] = v
	r.head = (r.head + 1) % durationWindow
}

// ordered returns the kept values oldest first.
func (r *ring) ordered() []int64 {
	out := make([]int64, 0, len(r.buf))
	for i := range r.buf {
		out = append(out, r.buf[(r.head+i)%len(r.buf)])
	}
	return out
}
