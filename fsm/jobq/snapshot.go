package jobq

import (
	"encoding/binary"
	"fmt"
	"math"
	"slices"

	"google.golang.org/protobuf/proto"

	"github.com/raftps/raftps/api/errs"
	pb "github.com/raftps/raftps/api/raftpspb"
	"github.com/raftps/raftps/jobspec"
)

// snapshotMagic opens a queue snapshot (MarshalBinary), then its version.
// Snapshot format (all integers varints, little-endian floats as 8 bytes):
//
//	"JOBQ" version=1 njobs { job }            jobs sorted by name
//	job:   name spec(proto, deterministic) state message pass submitted finished
//	       epoch final slowest slowestEval durations[] acc metrics[] eval
//	       ckptVersion requeued timeouts trainers[] (sorted by name)
//	       ntasks { slot-kind epoch-delta timeouts failures }
//	       todo[] (ids in queue order, zigzag deltas)
//	       pending[] (sorted by id: id primary backup)
//	       eventSeq events[] (oldest first)
//
// The encoding is canonical: two queues with the same logical state encode to
// the same bytes, whatever their internal slice orders.
const snapshotMagic = "JOBQ"
const snapshotVersion = 1

type enc struct{ b []byte }

func (e *enc) u(v uint64)     { e.b = binary.AppendUvarint(e.b, v) }
func (e *enc) i(v int64)      { e.b = binary.AppendVarint(e.b, v) }
func (e *enc) f(v float64)    { e.b = binary.LittleEndian.AppendUint64(e.b, math.Float64bits(v)) }
func (e *enc) s(v string)     { e.u(uint64(len(v))); e.b = append(e.b, v...) }
func (e *enc) bytes(v []byte) { e.u(uint64(len(v))); e.b = append(e.b, v...) }
func (e *enc) bool(v bool) {
	if v {
		e.u(1)
	} else {
		e.u(0)
	}
}
func (e *enc) run(r run) { e.i(r.epoch); e.i(r.started); e.i(r.deadline); e.s(r.trainer) }

// MarshalBinary encodes the whole state deterministically (see the format
// above). It does not change q. The FSM snapshots with MarshalJobs (one
// bounded record per job); this whole-queue form is what older snapshots
// hold, and UnmarshalBinary still reads it. It does not hold a job's
// wall-clock finish time (read back as its cluster finish time).
func (q *Queue) MarshalBinary() ([]byte, error) {
	size := 1024
	for _, j := range q.jobs {
		size += 1024 + 8*int(j.nTasks) + 64*j.events.len()
	}
	e := &enc{b: append(make([]byte, 0, size), snapshotMagic...)}
	e.u(snapshotVersion)
	e.u(uint64(len(q.jobs)))
	for _, name := range q.names() {
		if err := q.jobs[name].marshal(e); err != nil {
			return nil, err
		}
	}
	return e.b, nil
}

// jobRecordVersion starts every record of MarshalJobs. Version 2 appends
// the job's finishedWall to version 1's job; UnmarshalJobs reads both (a
// version 1 record shows its cluster finish time).
const jobRecordVersion = 2

// MarshalJobs encodes the state as one record per job, sorted by job name:
// jobRecordVersion then the job as in the whole-queue format. Each record
// is at most MaxJobRecordBytes (the bounds of retention.go make it so), so
// a snapshot never holds one unbounded blob. It does not change q.
func (q *Queue) MarshalJobs() ([][]byte, error) {
	out := make([][]byte, 0, len(q.jobs))
	for _, name := range q.names() {
		j := q.jobs[name]
		e := &enc{b: make([]byte, 0, 1024+8*int(j.nTasks)+64*j.events.len())}
		e.u(jobRecordVersion)
		if err := j.marshal(e); err != nil {
			return nil, err
		}
		e.i(j.finishedWall)
		if len(e.b) > MaxJobRecordBytes {
			return nil, fmt.Errorf("jobq: job %q encodes to %d bytes, more than %d", name, len(e.b), MaxJobRecordBytes)
		}
		out = append(out, e.b)
	}
	return out, nil
}

// UnmarshalJobs replaces q's state with the records of MarshalJobs (sorted
// by job name, names unique). Like UnmarshalBinary it decodes and checks
// everything into a new state first; on error (wrapping errs.ErrMalformed)
// q is unchanged.
func (q *Queue) UnmarshalJobs(recs [][]byte) error {
	eventCap := q.eventCap
	if eventCap <= 0 {
		eventCap = jobspec.MaxEvents
	}
	nq := &Queue{jobs: make(map[string]*job, len(recs)), eventCap: eventCap}
	prevName := ""
	for i, b := range recs {
		d := &dec{b: b}
		v := d.u()
		if (v < 1 || v > jobRecordVersion) && d.err == nil {
			return fmt.Errorf("%w: jobq record %d: version %d, want 1 to %d", errs.ErrMalformed, i, v, jobRecordVersion)
		}
		j := d.job(eventCap)
		if v >= 2 && d.err == nil {
			j.finishedWall = d.i()
		}
		if d.err == nil && len(d.b) != 0 {
			d.fail("record %d: %d trailing bytes", i, len(d.b))
		}
		if d.err != nil {
			return d.err
		}
		if i > 0 && j.name <= prevName {
			return fmt.Errorf("%w: jobq records not sorted at %q", errs.ErrMalformed, j.name)
		}
		prevName = j.name
		nq.jobs[j.name] = j
	}
	if err := nq.check(); err != nil {
		return fmt.Errorf("%w: jobq snapshot: %v", errs.ErrMalformed, err)
	}
	q.adopt(nq.jobs, nq.eventCap)
	return nil
}

// marshal appends the job's encoding to e.
func (j *job) marshal(e *enc) error {
	det := proto.MarshalOptions{Deterministic: true}
	e.s(j.name)
	spec, err := det.Marshal(j.spec)
	if err != nil {
		return fmt.Errorf("jobq: encode spec of %q: %w", j.name, err)
	}
	e.bytes(spec)
	e.u(uint64(j.state))
	e.s(j.message)
	e.i(int64(j.pass))
	e.i(j.submitted)
	e.i(j.finished)
	e.i(j.epoch)
	e.bool(j.final)
	e.i(j.slowest)
	e.i(j.slowestEval)
	d := j.durations.ordered()
	e.u(uint64(len(d)))
	for _, v := range d {
		e.i(v)
	}
	e.f(j.acc.lossSum)
	e.f(j.acc.weight)
	e.i(j.acc.examples)
	e.i(j.acc.finished)
	e.i(j.acc.maxStep)
	e.u(uint64(len(j.metrics)))
	for _, m := range j.metrics {
		b, err := det.Marshal(m)
		if err != nil {
			return fmt.Errorf("jobq: encode metric of %q: %w", j.name, err)
		}
		e.bytes(b)
	}
	e.u(uint64(j.eval.state))
	e.i(int64(j.eval.pass))
	e.run(j.eval.run)
	e.u(uint64(j.eval.timeouts))
	e.u(uint64(j.eval.failures))
	e.i(j.ckptVersion)
	e.i(j.requeued)
	e.i(j.timeouts)
	tnames := make([]string, 0, len(j.trainers))
	for t := range j.trainers {
		tnames = append(tnames, t)
	}
	slices.Sort(tnames)
	e.u(uint64(len(tnames)))
	for _, t := range tnames {
		ts := j.trainers[t]
		e.s(t)
		e.i(int64(ts.consecutive))
		e.i(int64(ts.strikes))
		e.i(ts.until)
	}
	e.u(uint64(j.nTasks))
	prevEpoch := int64(0)
	for id := range j.nTasks {
		t := &j.tasks[id]
		kind := t.slot
		if kind >= 0 {
			kind = 0
		}
		e.u(uint64(-kind)) // 0 pending, 1 todo, 2 done, 3 failed
		e.i(t.epoch - prevEpoch)
		prevEpoch = t.epoch
		e.u(uint64(t.timeouts))
		e.u(uint64(t.failures))
	}
	e.u(uint64(j.todo.len()))
	prev := int64(-1)
	for i := range j.todo.len() {
		id := int64(j.todo.at(i))
		e.i(id - prev - 1)
		prev = id
	}
	ids := j.pendingIDs()
	e.u(uint64(len(ids)))
	for _, id := range ids {
		p := &j.pending[j.tasks[id].slot]
		e.u(uint64(id))
		e.run(p.primary)
		e.run(p.backup)
	}
	e.i(j.eventSeq)
	e.u(uint64(j.events.len()))
	for i := range j.events.len() {
		ev := j.events.at(i)
		e.i(ev.seq)
		e.i(ev.unixNano)
		e.u(uint64(ev.typ))
		e.i(int64(ev.pass))
		e.i(ev.taskID)
		e.i(ev.epoch)
		e.i(ev.examples)
		e.i(ev.version)
		e.f(ev.loss)
		e.f(ev.accuracy)
		e.s(ev.trainer)
		e.s(ev.message)
	}
	return nil
}

type dec struct {
	b   []byte
	err error
}

func (d *dec) fail(format string, args ...any) {
	if d.err == nil {
		d.err = fmt.Errorf("%w: jobq snapshot: %s", errs.ErrMalformed, fmt.Sprintf(format, args...))
	}
}

func (d *dec) u() uint64 {
	if d.err != nil {
		return 0
	}
	v, n := binary.Uvarint(d.b)
	if n <= 0 {
		d.fail("bad uvarint")
		return 0
	}
	d.b = d.b[n:]
	return v
}

func (d *dec) i() int64 {
	if d.err != nil {
		return 0
	}
	v, n := binary.Varint(d.b)
	if n <= 0 {
		d.fail("bad varint")
		return 0
	}
	d.b = d.b[n:]
	return v
}

// n reads a count of items of at least min bytes each.
func (d *dec) n(minBytes int) int {
	v := d.u()
	if v > uint64(len(d.b)/max(minBytes, 1)) {
		d.fail("count %d exceeds the remaining %d bytes", v, len(d.b))
		return 0
	}
	return int(v)
}

func (d *dec) i32() int32 {
	v := d.i()
	if v < math.MinInt32 || v > math.MaxInt32 {
		d.fail("value %d out of int32 range", v)
		return 0
	}
	return int32(v)
}

func (d *dec) u16() uint16 {
	v := d.u()
	if v > math.MaxUint16 {
		d.fail("value %d out of uint16 range", v)
		return 0
	}
	return uint16(v)
}

func (d *dec) f() float64 {
	if d.err != nil {
		return 0
	}
	if len(d.b) < 8 {
		d.fail("short float")
		return 0
	}
	v := math.Float64frombits(binary.LittleEndian.Uint64(d.b))
	d.b = d.b[8:]
	return v
}

func (d *dec) bytes() []byte {
	n := d.n(1)
	if d.err != nil {
		return nil
	}
	v := d.b[:n:n]
	d.b = d.b[n:]
	return v
}

func (d *dec) s() string  { return string(d.bytes()) }
func (d *dec) bool() bool { return d.u() != 0 }
func (d *dec) run() run   { return run{epoch: d.i(), started: d.i(), deadline: d.i(), trainer: d.s()} }

// UnmarshalBinary replaces q's state with the snapshot b. The snapshot is
// decoded and checked (every task in exactly one queue, counts, epochs,
// event seqs) into a new state first; on error (wrapping errs.ErrMalformed)
// q is unchanged.
func (q *Queue) UnmarshalBinary(b []byte) error {
	if len(b) < len(snapshotMagic) || string(b[:len(snapshotMagic)]) != snapshotMagic {
		return fmt.Errorf("%w: jobq snapshot: bad magic", errs.ErrMalformed)
	}
	d := &dec{b: b[len(snapshotMagic):]}
	if v := d.u(); v != snapshotVersion && d.err == nil {
		return fmt.Errorf("%w: jobq snapshot: version %d, want %d", errs.ErrMalformed, v, snapshotVersion)
	}
	eventCap := q.eventCap
	if eventCap <= 0 {
		eventCap = jobspec.MaxEvents
	}
	nq := &Queue{jobs: map[string]*job{}, eventCap: eventCap}
	njobs := d.n(8)
	prevName := ""
	for range njobs {
		j := d.job(eventCap)
		if d.err != nil {
			return d.err
		}
		if j.name <= prevName && prevName != "" || nq.jobs[j.name] != nil {
			return fmt.Errorf("%w: jobq snapshot: jobs not sorted at %q", errs.ErrMalformed, j.name)
		}
		prevName = j.name
		nq.jobs[j.name] = j
	}
	if d.err == nil && len(d.b) != 0 {
		d.fail("%d trailing bytes", len(d.b))
	}
	if d.err != nil {
		return d.err
	}
	if err := nq.check(); err != nil {
		return fmt.Errorf("%w: jobq snapshot: %v", errs.ErrMalformed, err)
	}
	q.adopt(nq.jobs, nq.eventCap)
	return nil
}

// job decodes one job record (jobEncoder's layout) for a queue whose
// event rings hold eventCap events; nil once d has failed.
func (d *dec) job(eventCap int) *job {
	j := &job{name: d.s(), trainers: map[string]*trainerStat{}, events: eventRing{cap: eventCap}}
	spec := &pb.JobSpec{}
	if err := proto.Unmarshal(d.bytes(), spec); err != nil {
		d.fail("spec of %q: %v", j.name, err)
		return nil
	}
	if d.err != nil {
		return nil
	}
	if spec.Name != j.name || spec.Dataset == nil || spec.RecordsPerTask <= 0 || spec.Dataset.Records <= 0 {
		d.fail("job %q: inconsistent spec", j.name)
		return nil
	}
	j.spec = spec
	j.state = pb.JobState(d.u())
	j.message = d.s()
	j.pass = d.i32()
	j.submitted, j.finished, j.epoch = d.i(), d.i(), d.i()
	j.finishedWall = j.finished // a version 2 record overrides it
	j.final = d.bool()
	j.slowest, j.slowestEval = d.i(), d.i()
	nd := d.n(1)
	if nd > durationWindow {
		d.fail("job %q: %d durations", j.name, nd)
	}
	for range nd {
		j.durations.push(d.i())
	}
	j.acc = passAcc{lossSum: d.f(), weight: d.f(), examples: d.i(), finished: d.i(), maxStep: d.i()}
	for range d.n(1) {
		m := &pb.PassMetric{}
		if err := proto.Unmarshal(d.bytes(), m); err != nil {
			d.fail("metric of %q: %v", j.name, err)
		}
		j.metrics = append(j.metrics, m)
	}
	j.eval = evalTask{state: uint8(min(d.u(), 255)), pass: d.i32(), run: d.run(), timeouts: d.u16(), failures: d.u16()}
	j.ckptVersion, j.requeued, j.timeouts = d.i(), d.i(), d.i()
	d.trainers(j)
	n := d.n(4)
	if d.err != nil {
		return nil
	}
	if !d.tasks(j, n) || !d.todo(j, n) || !d.pending(j, n) {
		return nil
	}
	d.events(j, eventCap)
	return j
}

// trainers decodes j's trainer stats (sorted by name).
func (d *dec) trainers(j *job) {
	prevT := ""
	for k := range d.n(4) {
		name := d.s()
		if k > 0 && name <= prevT {
			d.fail("job %q: trainers not sorted at %q", j.name, name)
		}
		prevT = name
		j.trainers[name] = &trainerStat{consecutive: d.i32(), strikes: d.i32(), until: d.i()}
	}
}

// tasks decodes j's n task states (n as the spec gives it); false once d
// has failed.
func (d *dec) tasks(j *job, n int) bool {
	if want := jobspec.NumTasks(j.spec.Dataset.Records, j.spec.RecordsPerTask); int64(n) != want || n > jobspec.MaxTasks {
		d.fail("job %q: %d tasks, spec gives %d", j.name, n, want)
		return false
	}
	j.nTasks = int32(n)
	j.tasks = make([]task, n)
	prevEpoch := int64(0)
	for id := range j.tasks {
		kind := d.u()
		if kind > 3 {
			d.fail("job %q task %d: bad state %d", j.name, id, kind)
			return false
		}
		t := &j.tasks[id]
		t.slot = -int32(kind)
		t.epoch = prevEpoch + d.i()
		prevEpoch = t.epoch
		t.timeouts, t.failures = d.u16(), d.u16()
		switch t.slot {
		case slotDone:
			j.nDone++
		case slotFailed:
			j.nFailed++
		}
	}
	return true
}

// todo decodes j's todo queue (delta-coded task ids); false once d has
// failed.
func (d *dec) todo(j *job, n int) bool {
	j.todo.init(n)
	prev := int64(-1)
	for range d.n(1) {
		id := prev + 1 + d.i()
		if id < 0 || id >= int64(n) || j.tasks[id].slot != slotTodo || j.todo.len() >= n {
			d.fail("job %q: bad todo id %d", j.name, id)
			return false
		}
		j.tasks[id].slot = -100 // seen; restored below
		j.todo.push(int32(id))
		prev = id
	}
	for k := range j.todo.len() {
		j.tasks[j.todo.at(k)].slot = slotTodo
	}
	return true
}

// pending decodes j's pending tasks and their runs; false once d has
// failed.
func (d *dec) pending(j *job, n int) bool {
	for range d.n(8) {
		id := d.u()
		p := pendingTask{primary: d.run(), backup: d.run()}
		if d.err != nil {
			return false
		}
		if id >= uint64(n) || j.tasks[id].slot != 0 {
			d.fail("job %q: bad pending id %d", j.name, id)
			return false
		}
		p.id = int32(id)
		j.tasks[id].slot = int32(len(j.pending))
		j.pending = append(j.pending, p)
	}
	return true
}

// events decodes j's event sequence and its newest events (at most
// eventCap kept), interning repeated strings.
func (d *dec) events(j *job, eventCap int) {
	j.eventSeq = d.i()
	ne := d.n(12)
	// A snapshot with more events than this ring holds keeps the newest.
	j.events.buf = make([]event, 0, min(ne, eventCap))
	intern := map[string]string{}
	str := func() string {
		b := d.bytes()
		if s, ok := intern[string(b)]; ok {
			return s
		}
		s := string(b)
		if len(intern) < 4096 {
			intern[s] = s
		}
		return s
	}
	for range ne {
		ev := event{seq: d.i(), unixNano: d.i(), typ: pb.JobEvent_Type(d.u()), pass: d.i32(), taskID: d.i(), epoch: d.i(),
			examples: d.i(), version: d.i(), loss: d.f(), accuracy: d.f(), trainer: str(), message: str()}
		j.events.push(ev)
	}
}

// Check verifies the queue's invariants (those UnmarshalBinary and
// UnmarshalJobs enforce on a snapshot, see check) and returns the first
// violation, or nil. O(tasks): for tests and fuzzers.
func (q *Queue) Check() error { return q.check() }

// check verifies the invariants of every job: each task is in exactly one
// of todo, pending, done and failed, and the task's slot agrees; the counts
// match; pending copies have epochs in (0, epoch] and a trainer; the eval
// state is valid; event seqs are contiguous and end at eventSeq. O(tasks).
func (q *Queue) check() error {
	for _, name := range q.names() {
		if err := q.jobs[name].check(); err != nil {
			return fmt.Errorf("job %q: %w", name, err)
		}
	}
	return nil
}

func (j *job) check() error {
	if j.spec == nil || j.spec.Name != j.name {
		return fmt.Errorf("spec missing or misnamed")
	}
	if _, ok := pb.JobState_name[int32(j.state)]; !ok || j.state == pb.JobState_JOB_PENDING {
		return fmt.Errorf("bad state %d", j.state)
	}
	if int(j.nTasks) != len(j.tasks) || j.pass < 0 || j.pass >= j.spec.Passes {
		return fmt.Errorf("nTasks %d, %d tasks, pass %d", j.nTasks, len(j.tasks), j.pass)
	}
	seen := make([]uint8, j.nTasks)
	if j.todo.len() > 0 && len(j.todo.buf) < int(j.nTasks) {
		return fmt.Errorf("todo buffer too small")
	}
	for k := range j.todo.len() {
		id := j.todo.at(k)
		if id < 0 || id >= j.nTasks || seen[id] != 0 || j.tasks[id].slot != slotTodo {
			return fmt.Errorf("todo[%d] = task %d is not a todo task, or is there twice", k, id)
		}
		seen[id] = 1
	}
	for i := range j.pending {
		p := &j.pending[i]
		if p.id < 0 || p.id >= j.nTasks || seen[p.id] != 0 || j.tasks[p.id].slot != int32(i) {
			return fmt.Errorf("pending[%d] = task %d is inconsistent", i, p.id)
		}
		seen[p.id] = 2
		if p.primary.epoch <= 0 || p.primary.epoch > j.epoch || p.primary.trainer == "" || j.tasks[p.id].epoch != p.primary.epoch {
			return fmt.Errorf("task %d: bad primary copy (epoch %d, trainer %q)", p.id, p.primary.epoch, p.primary.trainer)
		}
		if p.backup.epoch != 0 && (p.backup.epoch < 0 || p.backup.epoch > j.epoch || p.backup.epoch == p.primary.epoch || p.backup.trainer == "") {
			return fmt.Errorf("task %d: bad backup copy (epoch %d)", p.id, p.backup.epoch)
		}
		if p.backup.epoch == 0 && p.backup != (run{}) {
			return fmt.Errorf("task %d: half a backup copy", p.id)
		}
	}
	var done, failed int32
	for id := range j.nTasks {
		t := &j.tasks[id]
		if t.epoch < 0 || t.epoch > j.epoch {
			return fmt.Errorf("task %d: epoch %d outside [0, %d]", id, t.epoch, j.epoch)
		}
		switch t.slot {
		case slotDone:
			done++
		case slotFailed:
			failed++
		case slotTodo:
			if seen[id] != 1 {
				return fmt.Errorf("task %d is todo but not in the todo queue", id)
			}
		default:
			if t.slot < 0 || seen[id] != 2 {
				return fmt.Errorf("task %d: bad slot %d", id, t.slot)
			}
		}
	}
	if done != j.nDone || failed != j.nFailed {
		return fmt.Errorf("counts done %d/%d failed %d/%d", done, j.nDone, failed, j.nFailed)
	}
	switch j.eval.state {
	case evalNone:
		if j.eval != (evalTask{}) {
			return fmt.Errorf("stale eval record")
		}
	case evalTodo, evalPending:
		if !j.spec.EvalEachPass || j.eval.pass != j.pass || (j.todo.len() > 0 && !j.final) || len(j.pending) > 0 {
			return fmt.Errorf("eval of pass %d due in pass %d with %d todo, %d pending", j.eval.pass, j.pass, j.todo.len(), len(j.pending))
		}
		if (j.eval.state == evalPending) != (j.eval.run.epoch != 0) || j.eval.run.epoch > j.epoch {
			return fmt.Errorf("eval state %d with epoch %d", j.eval.state, j.eval.run.epoch)
		}
	default:
		return fmt.Errorf("bad eval state %d", j.eval.state)
	}
	if j.state == pb.JobState_JOB_RUNNING && j.eval.state == evalNone && j.todo.len()+len(j.pending) == 0 {
		return fmt.Errorf("running with an ended pass not rolled over")
	}
	n := j.events.len()
	if n > j.events.cap || int64(n) > j.eventSeq {
		return fmt.Errorf("%d events, seq %d", n, j.eventSeq)
	}
	for k := range n {
		if want := j.eventSeq - int64(n) + 1 + int64(k); j.events.at(k).seq != want {
			return fmt.Errorf("event %d has seq %d, want %d", k, j.events.at(k).seq, want)
		}
	}
	return nil
}
