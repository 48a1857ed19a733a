package bench

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"time"

	pb "github.com/raftps/raftps/api/raftpspb"
	"github.com/raftps/raftps/raftstore/client"
)

// eventLog collects a job's events across node failures (reconnecting
// through any running node), like integration's jobEvents. Each event's
// UnixNano is replaced by its arrival time here (see follow).
type eventLog struct {
	mu     sync.Mutex
	cond   *sync.Cond
	events []*pb.JobEvent
}

func newEventLog() *eventLog {
	l := &eventLog{}
	l.cond = sync.NewCond(&l.mu)
	return l
}

func (l *eventLog) follow(ctx context.Context, c *raftpsCluster, job string) {
	next := int64(1)
	for ctx.Err() == nil {
		for i, p := range c.procs {
			if !p.running() {
				continue
			}
			cl, err := client.New([]string{c.grpc[i]})
			if err != nil {
				continue
			}
			st, err := cl.Master.WatchJob(ctx, &pb.WatchJobRequest{Name: job, FromSeq: next})
			for err == nil {
				var ev *pb.JobEvent
				if ev, err = st.Recv(); err == nil {
					// Time events by their arrival here: their own time is
					// the cluster's replicated clock, which falls behind the
					// wall clock by every leaderless period (a leader kill),
					// so comparing it with a kill's wall time counted the
					// recovery's events as before the kill.
					ev.UnixNano = time.Now().UnixNano()
					l.mu.Lock()
					l.events = append(l.events, ev)
					l.cond.Broadcast()
					l.mu.Unlock()
					next = ev.Seq + 1
				}
			}
			cl.Close()
			break
		}
		select {
		case <-ctx.Done():
		case <-time.After(100 * time.Millisecond):
		}
	}
	l.mu.Lock()
	l.cond.Broadcast()
	l.mu.Unlock()
}

// wait returns the first event matching pred, waiting up to timeout.
func (l *eventLog) wait(ctx context.Context, timeout time.Duration, pred func(*pb.JobEvent) bool) *pb.JobEvent {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	stop := context.AfterFunc(ctx, func() {
		l.mu.Lock()
		l.cond.Broadcast()
		l.mu.Unlock()
	})
	defer stop()
	l.mu.Lock()
	defer l.mu.Unlock()
	seen := 0
	for {
		for ; seen < len(l.events); seen++ {
			if pred(l.events[seen]) {
				return l.events[seen]
			}
		}
		if ctx.Err() != nil {
			return nil
		}
		l.cond.Wait()
	}
}

// recoveryScenario is one kind of fault in a running job.
type recoveryScenario struct {
	name, metric string
	// victim picks the node to kill (index) given the leader and the job.
	victim func(leader int, st *pb.JobStatus, c *raftpsCluster) (int, string)
	// done matches the event that ends the recovery of victim id, dead (its
	// process gone) at t0: events stamped earlier never match.
	done func(e *pb.JobEvent, id string, t0 time.Time) bool
	// clean reports whether killing the victim now is this fault alone
	// (the trainer serves no slot, slot 0 is not on the leader, the
	// leader serves no slot).
	clean func(leader int, st *pb.JobStatus, c *raftpsCluster) bool
}

func after(e *pb.JobEvent, t0 time.Time) bool { return e.UnixNano >= t0.UnixNano() }

func pserverNodes(st *pb.JobStatus) map[string]bool {
	m := map[string]bool{}
	for _, s := range st.GetPservers() {
		m[s.Node] = true
	}
	return m
}

var recoveryScenarios = []recoveryScenario{
	{
		name: "trainer", metric: "trainer SIGKILL -> TASK_REQUEUED",
		// A non-leader node, preferably one serving no pserver slot.
		victim: func(leader int, st *pb.JobStatus, c *raftpsCluster) (int, string) {
			ps := pserverNodes(st)
			pick, note := -1, ""
			for i, p := range c.procs {
				if i == leader {
					continue
				}
				if !ps[p.ID] {
					return i, ""
				}
				if pick < 0 {
					pick, note = i, "victim also served a pserver slot"
				}
			}
			return pick, note
		},
		done: func(e *pb.JobEvent, id string, t0 time.Time) bool {
			return e.Type == pb.JobEvent_TASK_REQUEUED && isTrainerOf(e.Trainer, id) && after(e, t0)
		},
		clean: func(leader int, st *pb.JobStatus, c *raftpsCluster) bool {
			ps := pserverNodes(st)
			for i, p := range c.procs {
				if i != leader && !ps[p.ID] {
					return true
				}
			}
			return false
		},
	},
	{
		name: "pserver", metric: "pserver slot 0 node SIGKILL -> PSERVER_RESTORED",
		victim: func(leader int, st *pb.JobStatus, c *raftpsCluster) (int, string) {
			for _, s := range st.GetPservers() {
				if s.Index == 0 {
					for i, p := range c.procs {
						if p.ID == s.Node {
							if i == leader {
								return i, "slot 0 was on the leader"
							}
							return i, ""
						}
					}
				}
			}
			return -1, ""
		},
		done: func(e *pb.JobEvent, _ string, t0 time.Time) bool {
			return e.Type == pb.JobEvent_PSERVER_RESTORED && strings.HasPrefix(e.Message, "slot 0 on ") && !strings.Contains(e.Message, "rolled back") && after(e, t0)
		},
		clean: func(leader int, st *pb.JobStatus, c *raftpsCluster) bool {
			for _, s := range st.GetPservers() {
				if s.Index == 0 {
					return s.Node != c.procs[leader].ID
				}
			}
			return false
		},
	},
	{
		name: "leader", metric: "leader SIGKILL -> next TASK_DONE",
		victim: func(leader int, st *pb.JobStatus, c *raftpsCluster) (int, string) {
			if ps := pserverNodes(st); ps[c.procs[leader].ID] {
				return leader, "leader also served a pserver slot"
			}
			return leader, ""
		},
		done: func(e *pb.JobEvent, _ string, t0 time.Time) bool {
			return e.Type == pb.JobEvent_TASK_DONE && after(e, t0)
		},
		clean: func(leader int, st *pb.JobStatus, c *raftpsCluster) bool {
			return !pserverNodes(st)[c.procs[leader].ID]
		},
	},
}

// trainingSection runs a real job on a fresh 3-node raftps cluster and
// times its recovery from SIGKILLs of a trainer, of pserver slot 0's node
// and of the leader, in rounds, restarting the victim after each trial.
func (r *runner) trainingSection(ctx context.Context, tmp string) {
	trials, budget := 5, 9*time.Minute
	if r.cfg.Quick {
		trials, budget = 3, 4*time.Minute
	}
	results := make([][]float64, len(recoveryScenarios))
	notes := make([]map[string]int, len(recoveryScenarios))
	for i := range notes {
		notes[i] = map[string]int{}
	}
	defer func() {
		r.raw["training"] = results
		for i, s := range recoveryScenarios {
			note := fmt.Sprintf("median of %d (wanted %d) %s", len(results[i]), trials, fmtSeconds(results[i]))
			for n, k := range notes[i] {
				note += fmt.Sprintf("; %s in %d", n, k)
			}
			r.add(Row{Section: "recovery in training", Metric: s.metric, Unit: "s", Ours: Median(results[i]), Base: NA, Note: note})
		}
	}()
	if _, err := os.Stat(r.cfg.Dataset); err != nil {
		r.note(fmt.Sprintf("training: dataset %s: %v", r.cfg.Dataset, err))
		return
	}
	dir := filepath.Join(tmp, "training")
	c, err := r.startRaftps(ctx, dir, "")
	if c != nil {
		defer c.Close()
	}
	if err != nil {
		r.note(fmt.Sprintf("training: cluster did not start: %v (logs in %s)", err, dir))
		return
	}
	fctx, fcancel := context.WithCancel(ctx)
	var fwg sync.WaitGroup
	defer func() { fcancel(); fwg.Wait() }()

	jobs := &recoveryJobs{r: r, c: c, ctx: ctx, fctx: fctx, fwg: &fwg}
	if err := jobs.submit(); err != nil {
		r.note(fmt.Sprintf("training: %v (logs in %s)", err, dir))
		return
	}
	r.logf("training job %s running", jobs.job)
	deadline := time.Now().Add(budget)
	failures := make([]int, len(recoveryScenarios))
	for time.Now().Before(deadline) && ctx.Err() == nil {
		if err := jobs.fresh(); err != nil {
			r.note(fmt.Sprintf("training: new job: %v", err))
			return
		}
		leader, st, err := observe(ctx, c, jobs.job)
		if err != nil {
			r.logf("training: %v", err)
			continue
		}
		si, forced := pickScenario(results, failures, trials, leader, st, c)
		if si < 0 {
			break // all done
		}
		s := recoveryScenarios[si]
		d, note, err := r.recoveryTrial(ctx, c, jobs.events, s, leader, st)
		if forced && note == "" {
			note = "not isolated"
		}
		if err != nil {
			r.logf("training %s trial: %v", s.name, err)
			notes[si]["failed: "+trimErr(err)]++
			failures[si]++
			continue
		}
		r.logf("training %s trial %d: %.3f s %s", s.name, len(results[si])+1, d, note)
		results[si] = append(results[si], d)
		if note != "" {
			notes[si][note]++
		}
	}
	for i := range recoveryScenarios {
		if len(results[i]) < trials {
			r.note(fmt.Sprintf("recovery in training: %s: %d of %d trials succeeded (%d failed; budget %v)", recoveryScenarios[i].name, len(results[i]), trials, failures[i], budget))
		}
	}
}

// pickScenario is the next recovery trial's scenario: the one still short
// of trials that is clean now (recoveryScenario.clean), the one with
// fewest trials first; else the neediest one, forced (noted unclean). -1
// when every scenario has its trials.
func pickScenario(results [][]float64, failures []int, trials, leader int, st *pb.JobStatus, c *raftpsCluster) (si int, forced bool) {
	si, forced = -1, false
	for i, s := range recoveryScenarios {
		if len(results[i])+failures[i] < trials && s.clean(leader, st, c) && (si < 0 || len(results[i]) < len(results[si])) {
			si = i
		}
	}
	if si < 0 {
		for i := range recoveryScenarios {
			if len(results[i])+failures[i] < trials && (si < 0 || len(results[i]) < len(results[si])) {
				si, forced = i, true
			}
		}
	}
	return si, forced
}

// recoveryJobs is the job the recovery trials hit, replaced by a new one
// (bench-recovery-N) when it nears its end.
type recoveryJobs struct {
	r      *runner
	c      *raftpsCluster
	ctx    context.Context // the section's
	fctx   context.Context // the event followers' (cancelled at the end)
	fwg    *sync.WaitGroup // the event followers
	n      int
	job    string
	events *eventLog // job's events
	// slotReplicas is the jobs' JobSpec.replicas (0: 1, the restore path
	// the pserver scenario times; replicas.go sets 2).
	slotReplicas int32
}

// submit submits a new job, follows its events, and waits (90 s at most)
// until every node's trainer has finished a task.
func (j *recoveryJobs) submit() error {
	j.n++
	j.job = fmt.Sprintf("bench-recovery-%d", j.n)
	if j.slotReplicas > 1 {
		j.job = fmt.Sprintf("bench-recovery-r%d-%d", j.slotReplicas, j.n)
	}
	ctx, c, r, job := j.ctx, j.c, j.r, j.job
	leader, err := c.Leader(ctx)
	if err != nil {
		return err
	}
	sctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	out, err := exec.CommandContext(sctx, r.cfg.Bin, "--endpoints", c.grpc[leader], "job", "submit", "--name", job,
		"--model", "mlp", "--hidden", "64", "--records", "60000", "--records-per-task", "500", "--passes", "10",
		"--pservers", "2", "--slot-replicas", fmt.Sprint(max(j.slotReplicas, 1)), "--mode", "sync", "--checkpoint-steps", "20", "--dataset", r.cfg.Dataset).CombinedOutput()
	if err != nil {
		return fmt.Errorf("job submit: %v: %s", err, out)
	}
	j.events = newEventLog()
	j.fwg.Add(1)
	go func(l *eventLog, job string) { defer j.fwg.Done(); l.follow(j.fctx, c, job) }(j.events, job)
	// In full flow: every trainer has finished a task.
	seen := map[string]bool{}
	if j.events.wait(ctx, 90*time.Second, func(e *pb.JobEvent) bool {
		if e.Type == pb.JobEvent_TASK_DONE {
			node, _, _ := strings.Cut(e.Trainer, "-")
			seen[node] = true
		}
		return len(seen) == len(c.procs)
	}) == nil {
		if len(seen) == 0 {
			return fmt.Errorf("job %s: no task done within 90 s", job)
		}
		r.note(fmt.Sprintf("training: job %s: only trainers %v finished a task within 90 s of the submit", job, keys(seen)))
	}
	return nil
}

// fresh replaces the job with a new one when it has ended or is in its
// last two passes, so that every trial hits a job in full flow.
func (j *recoveryJobs) fresh() error {
	ctx, c, r, job := j.ctx, j.c, j.r, j.job
	cl, err := client.New(c.Endpoints())
	if err != nil {
		return err
	}
	defer cl.Close()
	gctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	resp, err := cl.Master.GetJob(gctx, &pb.GetJobRequest{Name: job})
	if err != nil {
		return nil // a transient error: the trial will tell
	}
	st := resp.Status
	running := st.State == pb.JobState_JOB_RUNNING || st.State == pb.JobState_JOB_PENDING
	if running && st.Pass < 8 {
		return nil
	}
	if running {
		_, _ = cl.Master.CancelJob(gctx, &pb.CancelJobRequest{Name: job})
	}
	if err := j.submit(); err != nil {
		return err
	}
	r.logf("training job %s running", j.job)
	return nil
}

func trimErr(err error) string {
	s := err.Error()
	if len(s) > 60 {
		s = s[:60] + "..."
	}
	return s
}

// observe waits (up to 20 s) until every trainer holds a task (pending
// >= 3) and returns the leader and the job's status.
func observe(ctx context.Context, c *raftpsCluster, job string) (int, *pb.JobStatus, error) {
	lctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	leader, err := c.Leader(lctx)
	cancel()
	if err != nil {
		return -1, nil, err
	}
	st, err := pendingAtLeast(ctx, c, job, 3, 20*time.Second)
	return leader, st, err
}

// pendingAtLeast polls the job until n tasks are pending or wait passes;
// it returns the last status.
func pendingAtLeast(ctx context.Context, c *raftpsCluster, job string, n int64, wait time.Duration) (*pb.JobStatus, error) {
	cl, err := client.New(c.Endpoints())
	if err != nil {
		return nil, err
	}
	defer cl.Close()
	var st *pb.JobStatus
	for end := time.Now().Add(wait); ; {
		gctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		resp, err := cl.Master.GetJob(gctx, &pb.GetJobRequest{Name: job})
		cancel()
		if err == nil {
			st = resp.Status
			if st.Pending >= n && len(st.Pservers) > 0 {
				return st, nil
			}
		}
		if time.Now().After(end) || ctx.Err() != nil {
			if st == nil {
				return nil, fmt.Errorf("get job %s: %v", job, err)
			}
			return st, nil
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// recoveryTrial kills s's victim, waits for s's event, restarts the victim
// and waits for tasks to flow again with it back. A trainer that turns out
// to hold no task (no requeue) is a void attempt, tried again up to 3 times.
func (r *runner) recoveryTrial(ctx context.Context, c *raftpsCluster, events *eventLog, s recoveryScenario, leader int, st *pb.JobStatus) (float64, string, error) {
	v, note := s.victim(leader, st, c)
	if v < 0 {
		return 0, "", fmt.Errorf("no victim for %s", s.name)
	}
	id := c.procs[v].ID
	for attempt := 1; ; attempt++ {
		wait := 90 * time.Second
		if s.name == "trainer" {
			// Kill it while it holds a task (JobStatus.pending_tasks).
			if !holdsTask(ctx, c, st.Name, id, 30*time.Second) {
				return 0, note, fmt.Errorf("%s held no task within 30 s", id)
			}
			wait = 8 * time.Second
		}
		t0 := time.Now()
		c.Kill(v) // returns once the process is gone
		// Only events stamped after the death count: a dying leader could
		// still commit a TASK_DONE between t0 and its exit (a run counted
		// three of them, 4-32 ms after t0, as recoveries).
		dead := time.Now()
		ev := events.wait(ctx, wait, func(e *pb.JobEvent) bool { return s.done(e, id, dead) })
		took := time.Since(t0)
		if ev != nil {
			took = time.Unix(0, ev.UnixNano).Sub(t0)
		}
		if err := c.Restart(v); err != nil {
			return 0, note, err
		}
		// Back to normal before the next trial: a leader, and a task done after the restart.
		lctx, cancel := context.WithTimeout(ctx, 60*time.Second)
		_, lerr := c.Leader(lctx)
		cancel()
		ended := func(e *pb.JobEvent) bool { return e.Type == pb.JobEvent_JOB_ENDED }
		if lerr == nil {
			t1 := time.Now()
			events.wait(ctx, 60*time.Second, func(e *pb.JobEvent) bool { return ended(e) || e.Type == pb.JobEvent_TASK_DONE && after(e, t1) })
			if s.name == "trainer" {
				e := events.wait(ctx, 60*time.Second, func(e *pb.JobEvent) bool {
					return ended(e) || e.Type == pb.JobEvent_TASK_DONE && isTrainerOf(e.Trainer, id) && after(e, t1)
				})
				if e == nil {
					r.note(fmt.Sprintf("training: %s, restarted after a trainer kill, finished no task within 60 s (job %s)", id, st.Name))
				}
			}
		}
		if ev == nil && events.wait(ctx, 0, ended) != nil {
			return 0, note, fmt.Errorf("job ended during the trial")
		}
		if ev != nil {
			if attempt > 1 {
				note = strings.TrimPrefix(note+"; ", "; ") + fmt.Sprintf("%d void kills (victim held no task)", attempt-1)
			}
			return took.Seconds(), note, nil
		}
		if s.name != "trainer" || attempt == 3 {
			return 0, note, fmt.Errorf("no %s event within %v of killing %s", s.metric, wait, id)
		}
	}
}

func keys(m map[string]bool) []string {
	var ks []string
	for k := range m {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	return ks
}

// holdsTask polls the job until trainer id holds a pending task, up to wait.
func holdsTask(ctx context.Context, c *raftpsCluster, job, id string, wait time.Duration) bool {
	cl, err := client.New(c.Endpoints())
	if err != nil {
		return false
	}
	defer cl.Close()
	for end := time.Now().Add(wait); time.Now().Before(end) && ctx.Err() == nil; time.Sleep(20 * time.Millisecond) {
		gctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		resp, err := cl.Master.GetJob(gctx, &pb.GetJobRequest{Name: job})
		cancel()
		if err != nil {
			continue
		}
		for _, t := range resp.Status.GetPendingTasks() {
			if isTrainerOf(t.Trainer, id) {
				return true
			}
		}
	}
	return false
}

// isTrainerOf reports whether trainer (a job's trainer ID: the node ID, or
// the node ID and "-" and a per-start suffix) runs on node.
func isTrainerOf(trainer, node string) bool {
	return trainer == node || strings.HasPrefix(trainer, node+"-")
}
