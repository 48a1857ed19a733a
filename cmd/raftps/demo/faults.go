package demo

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"sync"
	"time"

	pb "github.com/raftps/raftps/api/raftpspb"
	"github.com/raftps/raftps/raftstore/client"
	"github.com/raftps/raftps/schema"
)

// Aims of a fault's stall (issue 34): a killed slot primary costs at
// most AimSurvivor when the Raft leader survives, at most AimLeader when
// the killed node was the leader (an election first).
const (
	AimSurvivor = 500 * time.Millisecond
	AimLeader   = 1500 * time.Millisecond
)

// RestartAfter is how long after its kill a node is restarted.
const RestartAfter = 5 * time.Second

// Fault is one injected fault and how training took it.
type Fault struct {
	What string // what was killed ("primary of slot 0", ...)
	Node string // the killed node's ID
	// Leader: the killed node was the Raft leader when it was killed.
	Leader bool
	// Role is what the killed node held of the job's slots ("primary of
	// slot 0, backup of slot 1"; "no slot").
	Role string
	At   time.Time
	// Stall is how long training stood still: from the kill to the commit
	// of the first finished task whose trainer reached a step past every
	// step made before the kill (a TASK_DONE event's version is the
	// trainer's step): past the steps of the tasks finished before the
	// kill and the step each slot's backup was promoted at (a promoted
	// backup holds every step acknowledged before the kill). A task that
	// merely finishes after the kill, its last step released before it,
	// does not count.
	Stall time.Duration
	// After is the longest gap between progress events (a finished task,
	// a pass's end or evaluation) after the one that ended Stall, until
	// the node's restart (RestartAfter) or the next fault, and
	After, Before time.Duration
	// Restored is the message of the first PSERVER_RESTORED event within a
	// minute of the kill ("" if none).
	Restored string
	// Promoted is the messages of the PSERVER_PROMOTED events committed
	// between the kill and the restart (RestartAfter): a replicated
	// slot's backup took over, with no restore (none if none).
	Promoted []string
	// StepsLost is the most steps a slot was rolled back by a
	// PSERVER_RESTORED event within a minute of the kill (the "rolled back
	// from step N to version V" of the other slots of a sync job after a
	// restore from a checkpoint); 0 when no slot rolled back.
	StepsLost int64
	// Timeline of the fault, as offsets from At (0: not seen): LeaderAt
	// when a leader other than the killed node answered (the demo's
	// poll, every 20 ms), PromotedAt the commit of the first
	// PSERVER_PROMOTED event, DoneAt the commit of the first finished
	// task.
	LeaderAt, PromotedAt, DoneAt time.Duration
	NewLeader                    string
	// StepBefore is the highest step known made before the kill (see
	// Stall).
	StepBefore int64
	progress   []progress // the window's progress events, in commit order
}

// progress is a progress event: its commit time and, for a finished
// task, the trainer's step.
type progress struct {
	at   time.Time
	task bool
	step int64
}

// measure sets f's Stall, DoneAt and After from its window's progress.
func (f *Fault) measure() {
	f.Stall, f.DoneAt, f.After = 0, 0, 0
	var last time.Time
	for _, p := range f.progress {
		if p.task && f.DoneAt == 0 {
			f.DoneAt = p.at.Sub(f.At)
		}
		if f.Stall == 0 {
			if p.task && p.step > f.StepBefore {
				f.Stall, last = p.at.Sub(f.At), p.at
			}
			continue
		}
		f.After = max(f.After, p.at.Sub(last))
		last = p.at
	}
}

// Aim is the stall the fault is checked against: AimLeader if the
// killed node was the Raft leader, else AimSurvivor.
func (f *Fault) Aim() time.Duration {
	if f.Leader {
		return AimLeader
	}
	return AimSurvivor
}

// Met reports whether training resumed within Aim.
func (f *Fault) Met() bool { return f.Stall > 0 && f.Stall <= f.Aim() }

// Schedule injects the demo's faults as a job trains: at 35% of the tasks
// it kills a node that holds a slot's primary and is not the Raft leader
// (the leader survives: AimSurvivor), at 65% the Raft leader (AimLeader);
// each is restarted RestartAfter later with the same command line.
type Schedule struct {
	ctx     context.Context // bounds the fault injection (the demo's run)
	cluster *Cluster
	cl      *client.Client
	job     string
	total   int64 // the job's tasks over every pass
	w       io.Writer
	inject  bool // false: measure only (--no-faults)

	mu       sync.Mutex
	done     int64
	faults   []*Fault
	pending  *Fault
	recent   []time.Time // progress in the last RestartAfter, oldest first
	maxStep  int64       // the highest step of a finished task so far
	restores []string    // every restore from a checkpoint and rollback of the run
	restarts sync.WaitGroup
	injected [2]bool // only OnEvent's goroutine reads and writes it
}

// NewSchedule returns the fault schedule of job (total tasks over every
// pass) on cluster, reached through cl; progress lines go to w. Without
// inject it kills nothing (the baseline run, --no-faults). ctx bounds
// the injection.
func NewSchedule(ctx context.Context, cluster *Cluster, cl *client.Client, job string, total int64, w io.Writer, inject bool) *Schedule {
	return &Schedule{ctx: ctx, cluster: cluster, cl: cl, job: job, total: total, w: w, inject: inject}
}

// eventTime is when ev was committed (the leader's clock, which on the
// demo's one machine is the demo's), or now if ev carries no time.
func eventTime(ev *pb.JobEvent) time.Time {
	if ev.UnixNano > 0 {
		return time.Unix(0, ev.UnixNano)
	}
	return time.Now()
}

// OnEvent takes the job's next event: it measures stalls, records
// restores and promotions and injects the fault whose time has come.
// Calls must come from one goroutine.
func (s *Schedule) OnEvent(ev *pb.JobEvent) {
	s.mu.Lock()
	at := eventTime(ev)
	switch ev.Type {
	case pb.JobEvent_TASK_DONE:
		s.done++
		s.progressLocked(at, true, ev.Version)
	case pb.JobEvent_PASS_ENDED, pb.JobEvent_EVAL_REPORTED:
		s.progressLocked(at, false, 0)
	}
	if ev.Type == pb.JobEvent_PSERVER_RESTORED && (ev.Version > 0 || RolledBackSteps(ev.Message) > 0) {
		s.restores = append(s.restores, ev.Message)
	}
	if f := s.pending; f != nil && at.Sub(f.At) < time.Minute && at.After(f.At) {
		switch ev.Type {
		case pb.JobEvent_PSERVER_RESTORED:
			if f.Restored == "" {
				f.Restored = ev.Message
			}
			f.StepsLost = max(f.StepsLost, RolledBackSteps(ev.Message))
		case pb.JobEvent_PSERVER_PROMOTED:
			if at.Sub(f.At) > RestartAfter {
				break // not this fault's (a later failover)
			}
			if step, ok := PromotedStep(ev.Message); ok && step > f.StepBefore {
				f.StepBefore = step
				f.measure()
			}
			if f.PromotedAt == 0 {
				f.PromotedAt = at.Sub(f.At)
			}
			f.Promoted = append(f.Promoted, ev.Message)
		}
	}
	frac := float64(s.done) / float64(s.total)
	s.mu.Unlock()
	if !s.inject {
		return
	}
	if !s.injected[0] && frac >= 0.35 {
		s.injected[0] = true
		go s.kill(s.primaryOffLeader)
	}
	if !s.injected[1] && frac >= 0.65 {
		s.injected[1] = true
		go s.kill(s.leader)
	}
}

// progressLocked records progress at at (a finished task at step if
// task) in the window of every fault that holds at, or in StepBefore of
// a fault killed after at, and keeps the progress of the last
// RestartAfter for the next fault's Before.
func (s *Schedule) progressLocked(at time.Time, task bool, step int64) {
	s.recent = append(s.recent, at)
	for len(s.recent) > 0 && at.Sub(s.recent[0]) > RestartAfter {
		s.recent = s.recent[1:]
	}
	if task {
		s.maxStep = max(s.maxStep, step)
	}
	for i, f := range s.faults {
		if !at.After(f.At) {
			if task {
				f.StepBefore = max(f.StepBefore, step) // committed before the kill, seen after
			}
			continue
		}
		// A fault's window: until its restart, cut short by the next
		// fault (whose stall is its own).
		if at.Sub(f.At) > RestartAfter || i+1 < len(s.faults) && at.After(s.faults[i+1].At) {
			continue
		}
		f.progress = append(f.progress, progress{at: at, task: task, step: step})
		f.measure()
	}
}

// longestGap is the longest gap between consecutive times of ts (sorted)
// and until end.
func longestGap(ts []time.Time, end time.Time) time.Duration {
	var g time.Duration
	for i := 1; i < len(ts); i++ {
		g = max(g, ts[i].Sub(ts[i-1]))
	}
	if len(ts) > 0 {
		g = max(g, end.Sub(ts[len(ts)-1]))
	}
	return g
}

// Restores returns the messages of every restore from a checkpoint
// (a PSERVER_RESTORED event of a version > 0: a slot's first claim
// restores version 0, the initializer) and every rollback of the run so
// far, in order, within a fault's window or not: with replicated slots
// there should be none (issue 34's "no rollback event").
func (s *Schedule) Restores() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.restores)
}

// Wait waits for the restarts of the killed nodes.
func (s *Schedule) Wait() { s.restarts.Wait() }

// Faults returns the faults injected so far, in order.
func (s *Schedule) Faults() []*Fault {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]*Fault(nil), s.faults...)
}

// kill SIGKILLs the node pick chooses, times the election if it was the
// leader, and restarts it RestartAfter later.
func (s *Schedule) kill(pick func(context.Context) (*Fault, error)) {
	cctx, cancel := context.WithTimeout(s.ctx, 10*time.Second)
	f, err := pick(cctx)
	cancel()
	if err != nil {
		fmt.Fprintf(s.w, "\nfault: %v\n", err)
		return
	}
	d := s.cluster.Node(f.Node)
	if d == nil {
		return
	}
	f.At = time.Now()
	d.Kill()
	s.mu.Lock()
	f.Before = longestGap(s.recent, f.At)
	f.StepBefore = s.maxStep
	s.faults = append(s.faults, f)
	s.pending = f
	s.mu.Unlock()
	fmt.Fprintf(s.w, "\nfault: SIGKILL %s (%s) at %s\n", f.Node, f.What, f.At.UTC().Format("15:04:05.000"))
	s.restarts.Add(1)
	go func() {
		defer s.restarts.Done()
		s.timeLeader(f)
		time.Sleep(time.Until(f.At.Add(RestartAfter)))
		if err := d.Start(); err == nil {
			fmt.Fprintf(s.w, "\nrestarted %s with the same command line\n", f.Node)
		}
	}()
}

// timeLeader polls for a leader other than f's killed node for up to 5 s
// and records when one answered.
func (s *Schedule) timeLeader(f *Fault) {
	ctx, cancel := context.WithTimeout(s.ctx, 5*time.Second)
	defer cancel()
	for ctx.Err() == nil {
		cctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
		st, err := s.cl.Cluster.Status(cctx, &pb.StatusRequest{})
		cancel()
		if err == nil && st.Leader != "" && st.Leader != f.Node {
			s.mu.Lock()
			f.LeaderAt, f.NewLeader = time.Since(f.At), st.Leader
			s.mu.Unlock()
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// primaryOffLeader picks the first fault: the primary of the lowest slot
// whose primary is not the Raft leader; if the leader holds every
// primary, the leader (the Fault says so, and is checked against
// AimLeader).
func (s *Schedule) primaryOffLeader(ctx context.Context) (*Fault, error) {
	leader, slots, err := s.layout(ctx)
	if err != nil {
		return nil, err
	}
	id, ok := PickPrimaryOffLeader(slots, leader)
	if !ok {
		return nil, errors.New("no slot is served")
	}
	return s.fault(id, leader, slots, "primary of a slot, not the Raft leader"), nil
}

// leader picks the second fault: the Raft leader.
func (s *Schedule) leader(ctx context.Context) (*Fault, error) {
	leader, slots, err := s.layout(ctx)
	if err != nil {
		return nil, err
	}
	return s.fault(leader, leader, slots, "the Raft leader"), nil
}

func (s *Schedule) fault(id, leader string, slots []*pb.PServerSlot, what string) *Fault {
	f := &Fault{What: what, Node: id, Leader: id == leader, Role: Role(slots, id)}
	if id == leader && what != "the Raft leader" {
		f.What = "the Raft leader: it held every slot's primary"
	}
	return f
}

// layout reads the Raft leader and the job's slots (primary, backups).
func (s *Schedule) layout(ctx context.Context) (string, []*pb.PServerSlot, error) {
	leader, err := WaitLeader(ctx, s.cl)
	if err != nil {
		return "", nil, err
	}
	r, err := s.cl.Master.GetJob(ctx, &pb.GetJobRequest{Name: s.job})
	if err != nil {
		return "", nil, err
	}
	return leader, r.Status.Pservers, nil
}

// PickPrimaryOffLeader is the node serving the lowest slot of slots whose
// primary is not leader, else the leader if it serves a slot; false if
// no slot is served.
func PickPrimaryOffLeader(slots []*pb.PServerSlot, leader string) (string, bool) {
	sorted := slices.Clone(slots)
	slices.SortFunc(sorted, func(a, b *pb.PServerSlot) int { return int(a.Index - b.Index) })
	for _, p := range sorted {
		if p.Node != "" && p.Node != leader {
			return p.Node, true
		}
	}
	for _, p := range sorted {
		if p.Node != "" {
			return p.Node, true
		}
	}
	return "", false
}

// Role says what node holds of slots: "primary of slot 0, backup of
// slot 1", or "no slot".
func Role(slots []*pb.PServerSlot, node string) string {
	var r []string
	for _, p := range slots {
		if p.Node == node {
			r = append(r, fmt.Sprintf("primary of slot %d", p.Index))
		}
		if slices.Contains(p.Backups, node) {
			r = append(r, fmt.Sprintf("backup of slot %d", p.Index))
		}
	}
	if len(r) == 0 {
		return "no slot"
	}
	return strings.Join(r, ", ")
}

// PromotedStep is the step of a promotion event's message ("slot S on
// N: backup promoted at epoch E, version V, step T, in D (...)",
// pserver/agent); false for any other message.
func PromotedStep(msg string) (int64, bool) {
	if !strings.Contains(msg, "backup promoted") {
		return 0, false
	}
	_, rest, ok := strings.Cut(msg, ", step ")
	if !ok {
		return 0, false
	}
	var step int64
	if n, _ := fmt.Sscanf(rest, "%d", &step); n != 1 {
		return 0, false
	}
	return step, true
}

// RolledBackSteps is the number of steps a rollback event's message
// ("slot S on N: rolled back from step F to version V ...", pserver/agent)
// threw away: F minus V's step (schema.EpochStride); 0 for any other
// message.
func RolledBackSteps(msg string) int64 {
	_, rest, ok := strings.Cut(msg, "rolled back from step ")
	if !ok {
		return 0
	}
	var from, version int64
	if n, _ := fmt.Sscanf(rest, "%d to version %d", &from, &version); n != 2 {
		return 0
	}
	return max(0, from-version%schema.EpochStride)
}
