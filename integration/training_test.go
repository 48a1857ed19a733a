package integration

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	pb "github.com/raftps/raftps/api/raftpspb"
)

// datasetDir is the shipped Fashion-MNIST.
func datasetDir(testing.TB) string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "datasets", "fashion-mnist")
}

// jobEvents collects a job's event stream across node failures.
type jobEvents struct {
	mu     sync.Mutex
	events []*pb.JobEvent
}

func (j *jobEvents) snapshot() []*pb.JobEvent {
	j.mu.Lock()
	defer j.mu.Unlock()
	return append([]*pb.JobEvent(nil), j.events...)
}

// follow streams the job's events into j until ctx ends or the job ends,
// reconnecting through any running node.
func (j *jobEvents) follow(ctx context.Context, c *Cluster, job string) {
	next := int64(1)
	for ctx.Err() == nil {
		var p *Proc
		for _, q := range c.Procs {
			if q.Running() {
				p = q
				break
			}
		}
		if p == nil {
			time.Sleep(200 * time.Millisecond)
			continue
		}
		cl := c.Client(p)
		stream, err := cl.Master.WatchJob(ctx, &pb.WatchJobRequest{Name: job, FromSeq: next})
		if err == nil {
			for {
				ev, err := stream.Recv()
				if err != nil {
					break
				}
				j.mu.Lock()
				j.events = append(j.events, ev)
				j.mu.Unlock()
				next = ev.Seq + 1
				if ev.Type == pb.JobEvent_JOB_ENDED {
					return
				}
			}
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// followJob follows job's events into a new jobEvents until ctx ends;
// done closes when following ends.
func followJob(ctx context.Context, c *Cluster, job string) (ev *jobEvents, done chan struct{}) {
	ev, done = &jobEvents{}, make(chan struct{})
	go func() { defer close(done); ev.follow(ctx, c, job) }()
	return ev, done
}

// lastSeq is the highest seq among the events seen so far (0: none).
func (j *jobEvents) lastSeq() (seq int64) {
	for _, e := range j.snapshot() {
		seq = max(seq, e.Seq)
	}
	return seq
}

func (j *jobEvents) count(typ pb.JobEvent_Type, pred func(*pb.JobEvent) bool) int {
	n := 0
	for _, ev := range j.snapshot() {
		if ev.Type == typ && (pred == nil || pred(ev)) {
			n++
		}
	}
	return n
}

// TestTrainingUnderFaults runs a real job on three real nodes and:
// SIGKILLs a trainer mid-task (its task is requeued and done by another),
// adds a fourth node mid-job (it takes tasks), kills every node and
// restarts them (the job resumes from the queues and the pservers'
// checkpoints), and checks that every task was done exactly once per pass
// and the model learned.
func TestTrainingUnderFaults(t *testing.T) {
	c := NewCluster(t, binPath, 3)
	c.StartAll()
	mustLeader(t, c, 20*time.Second)
	const job = "e2e-train"
	var ev *jobEvents
	defer logJobOnFailure(t, c, job, &ev, 8, 5)
	mustCLI(t, c, c.Procs[0], "job", "submit", "--name", job, "--model", "mlp", "--hidden", "64",
		"--dataset", datasetDir(t), "--records", "18000", "--records-per-task", "300", "--passes", "3",
		"--pservers", "2", "--mode", "sync", "--lr", "0.05", "--checkpoint-steps", "20", "--keep-max", "3")

	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	ev = &jobEvents{}
	followDone := make(chan struct{})
	go func() { defer close(followDone); ev.follow(ctx, c, job) }()
	done := func() int { return ev.count(pb.JobEvent_TASK_DONE, nil) }
	waitFor(t, 2*time.Minute, "8 tasks done", func() bool { return done() >= 8 })

	// 1. A trainer SIGKILLed mid-task. A candidate (not the leader) is
	// frozen first (SIGSTOP), so what it holds cannot change; it is killed
	// only if it holds a pending task, else thawed and another round tried.
	leader := mustLeader(t, c, 10*time.Second)
	var victim *Proc
	var victimTask int64 = -1
	waitFor(t, 60*time.Second, "a frozen non-leader trainer holding a task", func() bool {
		for _, p := range c.Procs {
			if p == leader || !p.Running() {
				continue
			}
			c.Pause(p)
			// A call the trainer sent just before the freeze (a
			// TaskFinished already forwarded to the leader) can still
			// land: a task counts only if it is still held a moment later
			// (well within gossip's failure detection, ~1 s).
			held := func() map[int64]bool {
				m := map[int64]bool{}
				for _, pt := range jobStatusOf(t, c, leader, job).PendingTasks {
					if trainerOf(pt.Trainer, p) {
						m[pt.Id] = true
					}
				}
				return m
			}
			if first := held(); len(first) > 0 {
				time.Sleep(300 * time.Millisecond)
				for id := range held() {
					if first[id] {
						victim, victimTask = p, id
						return true
					}
				}
			}
			c.Resume(p)
		}
		time.Sleep(100 * time.Millisecond)
		return false
	})
	// "After the kill" is by event sequence: event times are the cluster's
	// replicated clock (fsm), which runs behind the wall clock after a
	// leaderless period, so they are not compared with time.Now().
	var killSeq int64
	for _, e := range ev.snapshot() {
		killSeq = max(killSeq, e.Seq)
	}
	// If the victim also serves a pserver slot, the others wait for that
	// slot too, and a slot another node held is served again no earlier
	// than one lease TTL (5 s) after its new claim (pserver/agent: the
	// handover waits out the previous holder's fence, so a slot is never
	// served from two places).
	goOnBound := 2 * time.Second
	for _, ps := range jobStatusOf(t, c, leader, job).Pservers {
		if ps.Node == victim.ID {
			goOnBound = 2*time.Second + 5*time.Second
		}
	}
	killedAt := time.Now()
	c.Kill(victim)
	t.Logf("SIGKILLed %s (a trainer) with %d tasks done", victim.ID, done())
	afterKill := func(e *pb.JobEvent) bool { return trainerOf(e.Trainer, victim) && e.Seq > killSeq }
	waitFor(t, 30*time.Second, "the dead trainer's task requeued", func() bool {
		return ev.count(pb.JobEvent_TASK_REQUEUED, func(e *pb.JobEvent) bool { return afterKill(e) && e.TaskId == victimTask }) > 0
	})
	requeued := false
	for _, e := range ev.snapshot() {
		if e.Type == pb.JobEvent_TASK_REQUEUED && afterKill(e) && e.TaskId == victimTask {
			requeued = true
			t.Logf("task %d of %s requeued (seen %v after the kill)", e.TaskId, victim.ID, time.Since(killedAt).Round(time.Millisecond))
		}
	}
	if !requeued {
		t.Fatalf("task %d held by %s was not requeued", victimTask, victim.ID)
	}
	// The others go on: the first task finished by another trainer after
	// the death was detected (the requeue).
	var detected int64
	for _, e := range ev.snapshot() {
		if e.Type == pb.JobEvent_TASK_REQUEUED && afterKill(e) {
			detected = e.UnixNano
			break
		}
	}
	waitFor(t, 30*time.Second, "a task finished by another trainer after the death was detected", func() bool {
		return ev.count(pb.JobEvent_TASK_DONE, func(e *pb.JobEvent) bool { return e.UnixNano > detected && !trainerOf(e.Trainer, victim) }) > 0
	})
	for _, e := range ev.snapshot() {
		if e.Type == pb.JobEvent_TASK_DONE && e.UnixNano > detected && !trainerOf(e.Trainer, victim) {
			goOn := time.Duration(e.UnixNano - detected)
			t.Logf("death detected (tasks requeued); the next task finished %v later in cluster time (trainer %s)",
				goOn.Round(time.Millisecond), e.Trainer)
			if goOn > goOnBound {
				t.Errorf("the other trainers went on %v after the death was detected, want < %v", goOn, goOnBound)
			}
			break
		}
	}
	{
		waitFor(t, 60*time.Second, "the requeued task done by another trainer", func() bool {
			return ev.count(pb.JobEvent_TASK_DONE, func(e *pb.JobEvent) bool { return e.TaskId == victimTask && !trainerOf(e.Trainer, victim) }) > 0
		})
	}
	c.Start(victim)

	// 2. A fourth node added mid-job takes tasks.
	n4 := c.AddProc()
	c.Start(n4)
	defer func() {
		if t.Failed() {
			b, _ := os.ReadFile(n4.LogPath)
			t.Logf("n4 log: %d bytes, running %v", len(b), n4.Running())
		}
	}()
	waitFor(t, 90*time.Second, "n4's trainer to finish a task", func() bool {
		return ev.count(pb.JobEvent_TASK_DONE, func(e *pb.JobEvent) bool { return trainerOf(e.Trainer, n4) }) > 0
	})
	t.Logf("n4 joined mid-job and finished tasks; %d tasks done", done())

	// 3. Every node killed, then restarted with the same command lines.
	before := done()
	for _, p := range c.Procs {
		c.Kill(p)
	}
	t.Logf("all nodes SIGKILLed with %d tasks done", before)
	for _, p := range c.Procs {
		c.Start(p)
	}
	mustLeader(t, c, 30*time.Second)
	waitFor(t, 2*time.Minute, "the job to end", func() bool {
		return ev.count(pb.JobEvent_JOB_ENDED, nil) > 0
	})
	<-followDone
	final := jobStatusOf(t, c, mustLeader(t, c, 30*time.Second), job)
	if final.State != pb.JobState_JOB_SUCCEEDED {
		t.Fatalf("job ended %v: %s", final.State, final.Message)
	}

	// Every task done exactly once per pass, from the event stream.
	seen := map[string]int{}
	for _, e := range ev.snapshot() {
		if e.Type == pb.JobEvent_TASK_DONE {
			seen[fmt.Sprintf("%d/%d", e.Pass, e.TaskId)]++
		}
	}
	tasksPerPass := int(final.TotalTasks)
	for pass := 0; pass < 3; pass++ {
		for id := 0; id < tasksPerPass; id++ {
			if n := seen[fmt.Sprintf("%d/%d", pass, id)]; n != 1 {
				t.Errorf("pass %d task %d done %d times", pass, id, n)
			}
		}
	}
	var seqs []int64
	for _, e := range ev.snapshot() {
		seqs = append(seqs, e.Seq)
	}
	for i := 1; i < len(seqs); i++ {
		if seqs[i] != seqs[i-1]+1 {
			t.Fatalf("event stream has a gap or duplicate: %d then %d", seqs[i-1], seqs[i])
		}
	}
	if len(final.Metrics) == 0 {
		t.Fatal("no evaluation recorded")
	}
	acc := final.Metrics[len(final.Metrics)-1].TestAccuracy
	t.Logf("job succeeded: %d tasks/pass, requeued %d, final test accuracy %.2f%%", tasksPerPass, final.Requeued, 100*acc)
	if acc < 0.75 {
		t.Fatalf("final test accuracy %.2f%% < 75%%: the model did not survive the faults", 100*acc)
	}
}

// logJobOnFailure, deferred by a test, logs on its failure (before the
// harness's long log tails) the job as the cluster sees it, the last
// events of *ev (once the test follows them) and every node's warnings.
func logJobOnFailure(t *testing.T, c *Cluster, job string, ev **jobEvents, events, warnings int) {
	if !t.Failed() {
		return
	}
	t.Logf("job at the failure: %s", jobSummary(c, job))
	if *ev != nil {
		t.Logf("last events:\n%s", lastEvents((*ev).snapshot(), events))
	}
	t.Logf("warnings and errors of every node:\n%s", c.Warnings(warnings))
}

// jobSummary describes job as a running node's master reports it: state,
// task counts, trainers, pserver slots and pending tasks.
func jobSummary(c *Cluster, job string) string {
	for _, p := range c.Procs {
		if !p.Running() {
			continue
		}
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		resp, err := c.Client(p).Master.GetJob(ctx, &pb.GetJobRequest{Name: job})
		cancel()
		if err != nil {
			continue
		}
		st := resp.Status
		var b strings.Builder
		fmt.Fprintf(&b, "%v pass %d: todo %d pending %d done %d failed %d requeued %d timeouts %d; trainers %v",
			st.State, st.Pass, st.Todo, st.Pending, st.Done, st.Failed, st.Requeued, st.Timeouts, st.Trainers)
		for _, ps := range st.Pservers {
			fmt.Fprintf(&b, "; slot %d on %s", ps.Index, ps.Node)
		}
		for _, pt := range st.PendingTasks {
			fmt.Fprintf(&b, "; task %d held by %s", pt.Id, pt.Trainer)
		}
		return b.String()
	}
	return "(no running node answered)"
}

// lastEvents formats the last n events, one per line.
func lastEvents(evs []*pb.JobEvent, n int) string {
	var b strings.Builder
	for _, e := range evs[max(0, len(evs)-n):] {
		fmt.Fprintf(&b, "%d %v pass %d task %d trainer %s %s\n", e.Seq, e.Type, e.Pass, e.TaskId, e.Trainer, e.Message)
	}
	return b.String()
}

// trainerOf reports whether trainer id belongs to node p (ids are
// <node>-<incarnation>[-k]).
func trainerOf(id string, p *Proc) bool { return strings.HasPrefix(id, p.ID+"-") }

func jobStatusOf(t *testing.T, c *Cluster, p *Proc, job string) *pb.JobStatus {
	t.Helper()
	var st *pb.JobStatus
	waitFor(t, 30*time.Second, "job status", func() bool {
		cl := c.Client(p)
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		defer cancel()
		resp, err := cl.Master.GetJob(ctx, &pb.GetJobRequest{Name: job})
		if err != nil {
			return false
		}
		st = resp.Status
		return true
	})
	return st
}
