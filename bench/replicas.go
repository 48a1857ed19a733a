package bench

import (
	"context"
	"fmt"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/procfs"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	pb "github.com/raftps/raftps/api/raftpspb"
	"github.com/raftps/raftps/raftstore/client"
)

// Replicas section sizes: the memory job's one slot of ReplicaMemParams
// float32, and the throughput jobs' PushPullTensors tensors of
// ReplicaPushPullSize float32 over 2 slots.
const (
	ReplicaMemParams    = 1 << 24
	ReplicaPushPullSize = 1 << 18
)

// replicasSection (issue 34) measures replicated pserver slots on a fresh
// 3-node raftps cluster (plaintext, as the training section's):
//
//   - memory per replica: the RSS growth of the backup's node process, per
//     parameter, when a 1-slot job of ReplicaMemParams params with
//     replicas 2 is served and pushed twice, beside the primary's;
//   - push+pull throughput with replicas 2 against replicas 1, two jobs
//     up at once driven by one psclient.Client each (a trainer's data
//     path, back to back), interleaved in Pairs pairs, and the same per
//     CPU-second of the three node processes (utime+stime from /proc);
//   - real trainers' throughput with replicas 2 against replicas 1, short
//     sync jobs in Pairs pairs (replicaTraining), and per CPU-second;
//   - slot 0's node SIGKILLed under a training job with replicas 2,
//     timed to the PSERVER_PROMOTED of slot 0 (training resumes: the
//     slot serves again with no restore), a fresh job per trial, the
//     recovery section's method (recoveryTrial); its R = 1 row is the
//     training section's PSERVER_RESTORED one.
func (r *runner) replicasSection(ctx context.Context, tmp string) {
	dir := filepath.Join(tmp, "replicas")
	c, err := r.startRaftps(ctx, dir, "")
	if c != nil {
		defer c.Close()
	}
	if err != nil {
		r.note(fmt.Sprintf("replicas: cluster did not start: %v (logs in %s)", err, dir))
		return
	}
	admin, err := client.New(c.Endpoints())
	if err != nil {
		r.note(fmt.Sprintf("replicas: %v", err))
		return
	}
	defer admin.Close()
	r.replicaMemory(ctx, c, admin)
	r.replicaThroughput(ctx, c, admin)
	r.replicaTraining(ctx, c, admin)
	r.replicaFailover(ctx, c, admin)
}

var plaintext = []grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}

// pid is the process's id, 0 when it is not running.
func (p *proc) pid() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd == nil || p.cmd.Process == nil {
		return 0
	}
	return p.cmd.Process.Pid
}

// procStats are the RSS (bytes) and CPU time (s) of each of c's running
// node processes, by node id.
func procStats(c *raftpsCluster) (rss map[string]float64, cpu float64, err error) {
	rss = map[string]float64{}
	for _, p := range c.procs {
		pid := p.pid()
		if pid == 0 {
			continue
		}
		pr, err := procfs.NewProc(pid)
		if err != nil {
			return nil, 0, err
		}
		st, err := pr.Stat()
		if err != nil {
			return nil, 0, err
		}
		rss[p.ID] = float64(st.ResidentMemory())
		cpu += st.CPUTime()
	}
	return rss, cpu, nil
}

// endJob cancels and deletes job (errors ignored: a bench clean-up).
func endJob(ctx context.Context, admin *client.Client, job string) {
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	_, _ = admin.Master.CancelJob(cctx, &pb.CancelJobRequest{Name: job})
	_, _ = admin.Master.DeleteJob(cctx, &pb.DeleteJobRequest{Name: job})
}

func (r *runner) replicaMemory(ctx context.Context, c *raftpsCluster, admin *client.Client) {
	row := Row{Section: "replicas", Metric: fmt.Sprintf("memory per backup replica (1 slot of %d params, sgd)", ReplicaMemParams),
		Unit: "B/param", BaseName: "primary", Ours: NA, Base: NA}
	defer func() { r.add(row) }()
	before, _, err := procStats(c)
	if err != nil {
		r.note(fmt.Sprintf("replicas memory: %v", err))
		return
	}
	const job = "bench-replica-mem"
	spec := pushPullSpec(job, r.cfg.Dataset, 1, ReplicaMemParams, 2)
	spec.NumPservers = 1
	octx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	j, st, err := openPushPullJob(octx, admin, spec, "bench-replica-mem", plaintext...)
	defer endJob(ctx, admin, job)
	if err != nil {
		r.note(fmt.Sprintf("replicas memory: %v", err))
		return
	}
	defer j.close()
	slot := st.GetPservers()[0]
	primary, backup := slot.GetNode(), slot.GetBackups()[0]
	if _, err := j.rounds(ctx, 4); err != nil {
		r.note(fmt.Sprintf("replicas memory: push+pull: %v", err))
		return
	}
	after, _, err := procStats(c)
	if err != nil {
		r.note(fmt.Sprintf("replicas memory: %v", err))
		return
	}
	row.Ours = (after[backup] - before[backup]) / ReplicaMemParams
	row.Base = (after[primary] - before[primary]) / ReplicaMemParams
	row.Note = fmt.Sprintf("RSS growth of the backup's node process (%s) and the primary's (%s) from before the submit to after 4 push+pull rounds (Go heap: includes the received 4 B/param gradient messages and garbage not yet collected, up to GOGC's 2x of the live heap; the primary's, the client's pull responses); the float32 values alone are 4 B/param",
		backup, primary)
	r.logf("replicas memory: backup %s %+.0f MB, primary %s %+.0f MB", backup, (after[backup]-before[backup])/1e6, primary, (after[primary]-before[primary])/1e6)
}

func (r *runner) replicaThroughput(ctx context.Context, c *raftpsCluster, admin *client.Client) {
	rounds := 10
	if r.cfg.Quick {
		rounds = 4
	}
	var mbs, perCPU [2][]float64 // 0: replicas 2 (ours), 1: replicas 1 (base)
	defer func() {
		r.raw["replicas/pushpull"] = mbs
		r.raw["replicas/pushpull_per_cpu"] = perCPU
		note := fmt.Sprintf("one psclient.Client per job (a trainer's data path), %d x %d float32 over 2 slots, async sgd, %d rounds per side, %d pairs", PushPullTensors, ReplicaPushPullSize, rounds, Pairs)
		r.add(pairRow(Row{Section: "replicas", Metric: "push+pull throughput R=2 vs R=1", Unit: "MB/s", BaseName: "R=1", Note: note}, mbs[0], mbs[1]))
		r.add(pairRow(Row{Section: "replicas", Metric: "push+pull per CPU-second of the node processes R=2 vs R=1", Unit: "MB/CPU-s", BaseName: "R=1",
			Note: "CPU: utime+stime of the 3 node processes over each side's rounds (/proc)"}, perCPU[0], perCPU[1]))
	}()
	var jobs [2]*pushPullJob
	for i, rep := range []int32{2, 1} {
		job := fmt.Sprintf("bench-replica-r%d", rep)
		octx, cancel := context.WithTimeout(ctx, 2*time.Minute)
		j, _, err := openPushPullJob(octx, admin, pushPullSpec(job, r.cfg.Dataset, PushPullTensors, ReplicaPushPullSize, rep), job, plaintext...)
		cancel()
		defer endJob(ctx, admin, job)
		if err != nil {
			r.note(fmt.Sprintf("replicas throughput: %v", err))
			return
		}
		defer j.close()
		jobs[i] = j
		_, _ = j.rounds(ctx, 1) // warm-up: connections, the slots' pages
	}
	for p := 0; p < Pairs; p++ {
		for i, j := range jobs {
			tp, eff := NA, NA
			_, cpu0, err := procStats(c)
			start := time.Now()
			if err == nil {
				tp, err = j.rounds(ctx, rounds)
			}
			wall := time.Since(start).Seconds()
			var cpu1 float64
			if err == nil {
				_, cpu1, err = procStats(c)
			}
			if err != nil {
				r.logf("replicas push+pull %s pair %d: %v", []string{"R=2", "R=1"}[i], p+1, err)
				tp = NA
			} else if cpu1 > cpu0 {
				eff = tp * wall / (cpu1 - cpu0)
			}
			r.logf("replicas push+pull %s pair %d %8.1f MB/s %8.1f MB/CPU-s", []string{"R=2", "R=1"}[i], p+1, tp, eff)
			mbs[i] = append(mbs[i], tp)
			perCPU[i] = append(perCPU[i], eff)
		}
	}
}

// promotedScenario is the pserver recovery scenario with replicas 2: the
// same victim (slot 0's node), done at slot 0's PSERVER_PROMOTED.
func promotedScenario() recoveryScenario {
	var s recoveryScenario
	for _, x := range recoveryScenarios {
		if x.name == "pserver" {
			s = x
		}
	}
	s.name, s.metric = "pserver-r2", "pserver slot 0 node SIGKILL -> PSERVER_PROMOTED (R=2)"
	s.done = func(e *pb.JobEvent, _ string, t0 time.Time) bool {
		return e.Type == pb.JobEvent_PSERVER_PROMOTED && strings.HasPrefix(e.Message, "slot 0 on ") && after(e, t0)
	}
	return s
}

func (r *runner) replicaFailover(ctx context.Context, c *raftpsCluster, admin *client.Client) {
	trials, budget := 5, 8*time.Minute
	if r.cfg.Quick {
		trials, budget = 3, 4*time.Minute
	}
	s := promotedScenario()
	// res[0]: slot 0's node not the leader (the promotion alone); res[1]:
	// it was the leader too (an election first).
	var res [2][]float64
	notes := map[string]int{}
	defer func() {
		r.raw["replicas/failover"] = res
		for i, m := range []string{s.metric, strings.Replace(s.metric, "(R=2)", "(R=2, slot 0's node the leader)", 1)} {
			note := fmt.Sprintf("median of %d %s", len(res[i]), fmtSeconds(res[i]))
			if len(res[i]) > 0 {
				note += fmt.Sprintf(", spread %s-%s s", FormatValue(slices.Min(res[i])), FormatValue(slices.Max(res[i])))
			}
			if i == 0 {
				note += fmt.Sprintf(" (wanted %d); a fresh job per trial (a promotion leaves the slot no backup until re-replication)", trials)
				for n, k := range notes {
					note += fmt.Sprintf("; %s in %d", n, k)
				}
			}
			r.add(Row{Section: "recovery in training", Metric: m, Unit: "s", Ours: Median(res[i]), Base: NA, Note: note})
		}
	}()
	fctx, fcancel := context.WithCancel(ctx)
	jobs := &recoveryJobs{r: r, c: c, ctx: ctx, fctx: fctx, fwg: new(sync.WaitGroup), slotReplicas: 2}
	defer func() { fcancel(); jobs.fwg.Wait() }()
	deadline := time.Now().Add(budget)
	for attempt := 0; len(res[0]) < trials && attempt < 6*trials && time.Now().Before(deadline) && ctx.Err() == nil; attempt++ {
		if jobs.job != "" {
			endJob(ctx, admin, jobs.job)
		}
		if err := jobs.submit(); err != nil {
			notes["failed: "+trimErr(err)]++
			continue
		}
		leader, st, err := observe(ctx, c, jobs.job)
		if err != nil {
			notes["failed: "+trimErr(err)]++
			continue
		}
		if ps := st.GetPservers(); len(ps) == 0 || ps[0].GetIndex() != 0 || len(ps[0].GetBackups()) == 0 {
			notes["slot 0 had no backup yet, no kill"]++
			continue
		}
		onLeader := 0
		if !s.clean(leader, st, c) {
			onLeader = 1
			if len(res[1]) >= trials {
				continue // enough of those: a new job, no kill
			}
		}
		d, _, err := r.recoveryTrial(ctx, c, jobs.events, s, leader, st)
		if err != nil {
			r.logf("replicas failover trial: %v", err)
			notes["failed: "+trimErr(err)]++
			continue
		}
		r.logf("replicas failover trial %d (slot 0 on the leader: %v): %.3f s", attempt+1, onLeader == 1, d)
		res[onLeader] = append(res[onLeader], d)
	}
}

// ReplicaTrainRecords is the size of each job of the training throughput
// pairs (one pass, tasks of 300 records, 2 slots, sync).
const ReplicaTrainRecords = 60000

// replicaTraining measures real trainers' throughput with replicas 2
// against replicas 1: Pairs pairs of short sync mlp jobs (one pass of
// ReplicaTrainRecords), the R = 2 job then the R = 1 job, each timed
// from its first TASK_DONE to its last (the examples of the tasks after
// the first, over that time), and per CPU-second of the node processes
// from the first TASK_DONE to JOB_ENDED.
func (r *runner) replicaTraining(ctx context.Context, c *raftpsCluster, admin *client.Client) {
	var eps, perCPU [2][]float64 // 0: replicas 2 (ours), 1: replicas 1 (base)
	defer func() {
		r.raw["replicas/training"] = eps
		r.raw["replicas/training_per_cpu"] = perCPU
		note := fmt.Sprintf("3 trainers (one per node), mlp hidden 64, sync, 2 slots, %d records in tasks of 300, one job per side and pair", ReplicaTrainRecords)
		r.add(pairRow(Row{Section: "replicas", Metric: "trainer throughput R=2 vs R=1", Unit: "examples/s", BaseName: "R=1", Note: note}, eps[0], eps[1]))
		r.add(pairRow(Row{Section: "replicas", Metric: "trainer examples per CPU-second of the node processes R=2 vs R=1", Unit: "examples/CPU-s", BaseName: "R=1",
			Note: "CPU: utime+stime of the 3 node processes (trainers, pservers, Raft) from the first TASK_DONE to JOB_ENDED (/proc)"}, perCPU[0], perCPU[1]))
	}()
	fctx, fcancel := context.WithCancel(ctx)
	var fwg sync.WaitGroup
	defer func() { fcancel(); fwg.Wait() }()
	for p := 0; p < Pairs && ctx.Err() == nil; p++ {
		for i, rep := range []int32{2, 1} {
			tp, eff, err := r.trainingRun(ctx, fctx, &fwg, c, admin, fmt.Sprintf("bench-replica-train-r%d-%d", rep, p+1), rep)
			if err != nil {
				r.logf("replicas training R=%d pair %d: %v", rep, p+1, err)
				tp, eff = NA, NA
			}
			r.logf("replicas training R=%d pair %d %8.1f examples/s %8.1f examples/CPU-s", rep, p+1, tp, eff)
			eps[i] = append(eps[i], tp)
			perCPU[i] = append(perCPU[i], eff)
		}
	}
}

// trainingRun runs one job of replicaTraining to its end and returns its
// examples/s and examples per CPU-second.
func (r *runner) trainingRun(ctx, fctx context.Context, fwg *sync.WaitGroup, c *raftpsCluster, admin *client.Client, job string, replicas int32) (float64, float64, error) {
	defer endJob(ctx, admin, job)
	sctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	out, err := exec.CommandContext(sctx, r.cfg.Bin, "--endpoints", strings.Join(c.Endpoints(), ","), "job", "submit", "--name", job,
		"--model", "mlp", "--hidden", "64", "--records", fmt.Sprint(ReplicaTrainRecords), "--records-per-task", "300", "--passes", "1",
		"--pservers", "2", "--slot-replicas", fmt.Sprint(replicas), "--mode", "sync", "--checkpoint-steps", "1000", "--dataset", r.cfg.Dataset).CombinedOutput()
	cancel()
	if err != nil {
		return NA, NA, fmt.Errorf("job submit: %v: %s", err, out)
	}
	l := newEventLog()
	jctx, jcancel := context.WithCancel(fctx)
	defer jcancel()
	fwg.Add(1)
	go func() { defer fwg.Done(); l.follow(jctx, c, job) }()
	isDone := func(e *pb.JobEvent) bool { return e.Type == pb.JobEvent_TASK_DONE }
	first := l.wait(ctx, 2*time.Minute, isDone)
	if first == nil {
		return NA, NA, fmt.Errorf("job %s: no task done within 2 min", job)
	}
	_, cpu0, err := procStats(c)
	if err != nil {
		return NA, NA, err
	}
	if l.wait(ctx, 5*time.Minute, func(e *pb.JobEvent) bool { return e.Type == pb.JobEvent_JOB_ENDED }) == nil {
		return NA, NA, fmt.Errorf("job %s did not end within 5 min", job)
	}
	_, cpu1, err := procStats(c)
	if err != nil {
		return NA, NA, err
	}
	l.mu.Lock()
	var examples int64
	last := first
	for _, e := range l.events {
		if isDone(e) && e.Seq > first.Seq {
			examples += e.Examples
			last = e
		}
	}
	l.mu.Unlock()
	secs := time.Duration(last.UnixNano - first.UnixNano).Seconds()
	if examples == 0 || secs <= 0 || cpu1 <= cpu0 {
		return NA, NA, fmt.Errorf("job %s: %d examples after the first task in %.3f s", job, examples, secs)
	}
	return float64(examples) / secs, float64(examples) / (cpu1 - cpu0), nil
}
