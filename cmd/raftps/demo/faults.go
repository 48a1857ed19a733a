package demo

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
	"time"

	pb "github.com/raftps/raftps/api/raftpspb"
	"github.com/raftps/raftps/raftstore/client"
	"github.com/raftps/raftps/schema"
)

// Fault is one injected fault and how training took it.
type Fault struct {
	What string // what was killed ("raft leader", ...)
	Node string // the killed node's ID
	At   time.Time
	// Stall is the longest time without a finished task in the 20 s after
	// the kill or until the next fault, whichever is first (the kill
	// itself counts as the start of the first gap).
	Stall time.Duration
	// Restored is the message of the first PSERVER_RESTORED event within a
	// minute of the kill ("" if none).
	Restored string
	// Promoted is the message of the first PSERVER_PROMOTED event within
	// a minute of the kill: a replicated slot's backup took over, with no
	// restore ("" if none).
	Promoted string
	// StepsLost is the most steps a slot was rolled back by a
	// PSERVER_RESTORED event within a minute of the kill (the "rolled back
	// from step N to version V" of the other slots of a sync job after a
	// restore from a checkpoint); 0 when no slot rolled back.
	StepsLost int64
	lastDone  time.Time
}

// Schedule injects the demo's faults as a job trains: at 35% of the tasks
// it kills the node serving pserver slot 0, at 65% the Raft leader; each
// is restarted 5 s later with the same command line.
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

// OnEvent takes the job's next event: it measures stalls, records
// restores and injects the fault whose time has come. Calls must come
// from one goroutine.
func (s *Schedule) OnEvent(ev *pb.JobEvent) {
	s.mu.Lock()
	if ev.Type == pb.JobEvent_TASK_DONE {
		s.done++
		now := time.Now()
		for i, f := range s.faults {
			// A fault's window: 20 s, cut short by the next fault
			// (whose stall is its own).
			if now.Sub(f.At) > 20*time.Second || i+1 < len(s.faults) && now.After(s.faults[i+1].At) {
				continue
			}
			if f.lastDone.IsZero() {
				f.lastDone = f.At
			}
			if gap := now.Sub(f.lastDone); gap > f.Stall {
				f.Stall = gap
			}
			f.lastDone = now
		}
	}
	if ev.Type == pb.JobEvent_PSERVER_RESTORED && s.pending != nil && s.pending.Restored == "" && time.Since(s.pending.At) < time.Minute {
		s.pending.Restored = ev.Message
	}
	if ev.Type == pb.JobEvent_PSERVER_RESTORED && s.pending != nil && time.Since(s.pending.At) < time.Minute {
		s.pending.StepsLost = max(s.pending.StepsLost, RolledBackSteps(ev.Message))
	}
	if ev.Type == pb.JobEvent_PSERVER_PROMOTED && s.pending != nil && s.pending.Promoted == "" && time.Since(s.pending.At) < time.Minute {
		s.pending.Promoted = ev.Message
	}
	frac := float64(s.done) / float64(s.total)
	s.mu.Unlock()
	if !s.inject {
		return
	}
	if !s.injected[0] && frac >= 0.35 {
		s.injected[0] = true
		go s.kill("node serving pserver slot 0", s.slot0)
	}
	if !s.injected[1] && frac >= 0.65 {
		s.injected[1] = true
		go s.kill("raft leader", func(ctx context.Context) (string, error) { return WaitLeader(ctx, s.cl) })
	}
}

// Wait waits for the restarts of the killed nodes.
func (s *Schedule) Wait() { s.restarts.Wait() }

// Faults returns the faults injected so far, in order.
func (s *Schedule) Faults() []*Fault {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]*Fault(nil), s.faults...)
}

// kill SIGKILLs the node pick names and restarts it 5 s later.
func (s *Schedule) kill(what string, pick func(context.Context) (string, error)) {
	cctx, cancel := context.WithTimeout(s.ctx, 10*time.Second)
	id, err := pick(cctx)
	cancel()
	if err != nil {
		fmt.Fprintf(s.w, "\nfault %q: %v\n", what, err)
		return
	}
	d := s.cluster.Node(id)
	if d == nil {
		return
	}
	f := &Fault{What: what, Node: id, At: time.Now()}
	d.Kill()
	s.mu.Lock()
	s.faults = append(s.faults, f)
	s.pending = f
	s.mu.Unlock()
	fmt.Fprintf(s.w, "\nfault: SIGKILL %s (%s)\n", id, what)
	s.restarts.Add(1)
	go func() {
		defer s.restarts.Done()
		time.Sleep(5 * time.Second)
		if err := d.Start(); err == nil {
			fmt.Fprintf(s.w, "\nrestarted %s with the same command line\n", id)
		}
	}()
}

// slot0 is the node serving pserver slot 0 of the job.
func (s *Schedule) slot0(ctx context.Context) (string, error) {
	r, err := s.cl.Master.GetJob(ctx, &pb.GetJobRequest{Name: s.job})
	if err != nil {
		return "", err
	}
	for _, p := range r.Status.Pservers {
		if p.Index == 0 {
			return p.Node, nil
		}
	}
	return "", errors.New("slot 0 not served")
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
