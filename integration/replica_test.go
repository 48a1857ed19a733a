package integration

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	pb "github.com/raftps/raftps/api/raftpspb"
)

// maxReportedFailover bounds TestReplicatedSlotFailover's stall: from the
// SIGKILL to the promoted backup's PSERVER_PROMOTED event.
const maxReportedFailover = 1200 * time.Millisecond

// TestReplicatedSlotFailover (issue 34) runs a sync job with replicas 2
// (each pserver slot has a primary and a backup on another node) on three
// TLS nodes, SIGKILLs the node serving a slot's primary (not the Raft
// leader), and checks that `raftps job status` shows each slot's backups
// and replica epoch, and that the slot fails over without a restore: a
// PSERVER_PROMOTED event for it, no PSERVER_RESTORED (restore or
// rollback) after the kill, and the job succeeds with every slot's final
// checkpoint at the same step (a sync job's slots are one model). It logs
// how long after the kill the promoted node served the slot (gossip's
// detection, the master's promotion Txn, the claim) and the final steps,
// and requires it within maxReportedFailover: the trainers' failed calls
// and the backup's broken stream report the primary, whose probe fails
// (issue 34, fast detection), sooner than gossip detects the node.
//
// The equal final steps once did not hold, with or without the kill and
// with --slot-replicas 1 too (75/76, 99/98, 51/52): trainer membership
// reached the two slots at different times, one slot released a step
// with fewer trainers, and since each trainer pushed each slot at that
// slot's own version the slots stayed one step apart to the end. A sync
// push now names one step on every slot (psclient; pserver's
// TestSyncSlotsStayInStep). The failover's own exactness (the promoted
// slot holds every acknowledged update, answers a retried push id without
// applying it again, applies a refused one once) is pserver/agent's
// TestReplicatedSlotFailover.
func TestReplicatedSlotFailover(t *testing.T) {
	c := NewCluster(t, binPath, 3)
	c.StartAll()
	mustLeader(t, c, 20*time.Second)
	const job = "e2e-replicated"
	var ev *jobEvents
	defer logJobOnFailure(t, c, job, &ev, 12, 8)
	submitReplicated(t, c, job, 1)

	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	var followDone chan struct{}
	ev, followDone = followJob(ctx, c, job)
	// Past the trainers' start, when each slot's membership changes.
	waitFor(t, 2*time.Minute, "10 tasks done", func() bool { return ev.count(pb.JobEvent_TASK_DONE, nil) >= 10 })

	leader, victim, slot := slotOffLeader(t, c, job)
	// `raftps job status` shows the replication: the job's replicas and
	// each slot's backups and replica epoch.
	if out := mustCLI(t, c, leader, "job", "status", job); !strings.Contains(out, "replicas: 2 per pserver slot") ||
		strings.Count(out, "replica epoch") != 2 {
		t.Errorf("job status does not show 2 replicated slots:\n%s", out)
	}
	killSeq := ev.lastSeq()
	killedAt := time.Now()
	c.Kill(victim)
	t.Logf("SIGKILLed %s, primary of slot %d, with %d tasks done", victim.ID, slot, ev.count(pb.JobEvent_TASK_DONE, nil))
	promotedOf := func(e *pb.JobEvent) bool {
		return e.Seq > killSeq && strings.HasPrefix(e.Message, fmt.Sprintf("slot %d on ", slot))
	}
	waitFor(t, 60*time.Second, "the slot's backup promoted", func() bool {
		return ev.count(pb.JobEvent_PSERVER_PROMOTED, promotedOf) > 0
	})
	stall := time.Since(killedAt)
	for _, e := range ev.snapshot() {
		if e.Type == pb.JobEvent_PSERVER_PROMOTED && promotedOf(e) {
			t.Logf("slot %d served again by its promoted backup %v after the SIGKILL (event seen; upper bound of the stall): %s",
				slot, stall.Round(time.Millisecond), e.Message)
		}
	}
	// Fast detection: the trainers' failed calls and the backup's broken
	// stream report the primary, which fails its probe; gossip's
	// detection alone took 1.55-2.10 s. Measured 0.33-0.64 s over 9 runs
	// on the loaded 2-core machine (2026-11-28); the bound leaves about
	// twice that.
	if stall > maxReportedFailover {
		t.Errorf("slot %d served again %v after the SIGKILL, want <= %v (reported and probed, not waiting for gossip)", slot, stall.Round(time.Millisecond), maxReportedFailover)
	}
	waitFor(t, 3*time.Minute, "the job to end", func() bool { return ev.count(pb.JobEvent_JOB_ENDED, nil) > 0 })
	<-followDone
	for _, e := range ev.snapshot() {
		if e.Type == pb.JobEvent_PSERVER_RESTORED && e.Seq > killSeq {
			t.Errorf("a restore or rollback after the kill (replicated slots fail over without one): %d %s", e.Seq, e.Message)
		}
	}
	last, acc := succeededInStep(t, c, job)
	t.Logf("job succeeded: final steps per slot %v, test accuracy %.2f%%, stall after the kill <= %v",
		last, 100*acc, stall.Round(time.Millisecond))
}

// submitReplicated submits the sync job of the replicated-slot tests: 2
// pserver slots with replicas 2, 9000 records in tasks of 300, passes
// passes.
func submitReplicated(t *testing.T, c *Cluster, job string, passes int) {
	mustCLI(t, c, c.Procs[0], "job", "submit", "--name", job, "--model", "mlp", "--hidden", "64",
		"--dataset", datasetDir(t), "--records", "9000", "--records-per-task", "300", "--passes", fmt.Sprint(passes),
		"--pservers", "2", "--slot-replicas", "2", "--mode", "sync", "--lr", "0.05", "--checkpoint-steps", "1000", "--keep-max", "3")
}

// succeededInStep requires that the ended sync job succeeded with every
// slot's final checkpoint at the same step (a sync job's slots are one
// model: no step lost or applied twice on one of them) and returns the
// steps and the last test accuracy.
func succeededInStep(t *testing.T, c *Cluster, job string) (map[int32]int64, float32) {
	t.Helper()
	final := jobStatusOf(t, c, mustLeader(t, c, 30*time.Second), job)
	if final.State != pb.JobState_JOB_SUCCEEDED {
		t.Fatalf("job ended %v: %s", final.State, final.Message)
	}
	// The slots' last checkpoints (written when the job ended): the same
	// step on every slot, read once they stopped changing.
	steps := func() map[int32]int64 {
		m := map[int32]int64{}
		for i, cp := range jobStatusOf(t, c, mustLeader(t, c, 30*time.Second), job).Checkpoints {
			m[int32(i)] = cp.GetStep()
		}
		return m
	}
	var last map[int32]int64
	waitFor(t, 60*time.Second, "every slot's final checkpoint, unchanged for 2 s", func() bool {
		cur := steps()
		stable := len(cur) == 2 && fmt.Sprint(cur) == fmt.Sprint(last)
		last = cur
		if !stable {
			time.Sleep(2 * time.Second)
		}
		return stable
	})
	if last[0] == 0 || last[1] == 0 {
		t.Fatalf("final checkpoint steps per slot %v: a slot did not train", last)
	}
	if last[0] != last[1] {
		t.Errorf("the slots of a sync job ended at different steps %v: the final model mixes two steps", last)
	}
	acc := float32(0)
	if n := len(final.Metrics); n > 0 {
		acc = float32(final.Metrics[n-1].TestAccuracy)
	}
	return last, acc
}

// TestFalseFailoversUnderLoad (issue 34: "measure false failovers under
// CPU load") trains the replicated sync job (4 passes) on three TLS nodes
// beside `stress-ng --cpu 4` (Debian's stress-ng; `make tools` installs
// it), with no fault, and counts the failovers (PSERVER_PROMOTED events)
// and the suspect reports the nodes probed: with nothing failed, every
// one is false. It requires any such failover to be harmless: the job
// succeeds with no restore or rollback and every slot's final checkpoint
// at the same step. It logs the counts (the figure).
func TestFalseFailoversUnderLoad(t *testing.T) {
	stress, err := exec.LookPath("stress-ng")
	if err != nil {
		t.Fatalf("stress-ng is not on PATH (make tools, or apt-get install stress-ng): %v", err)
	}
	c := NewCluster(t, binPath, 3)
	c.StartAll()
	mustLeader(t, c, 20*time.Second)
	const job = "e2e-replicated-load"
	var ev *jobEvents
	defer logJobOnFailure(t, c, job, &ev, 12, 8)
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	hogs := exec.CommandContext(ctx, stress, "--cpu", "4", "--timeout", "480s", "--quiet")
	if err := hogs.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = hogs.Process.Kill(); _ = hogs.Wait() }()
	start := time.Now()
	submitReplicated(t, c, job, 4)
	var followDone chan struct{}
	ev, followDone = followJob(ctx, c, job)
	waitFor(t, 7*time.Minute, "the job to end", func() bool { return ev.count(pb.JobEvent_JOB_ENDED, nil) > 0 })
	<-followDone
	trained := time.Since(start)
	var promoted []string
	training := false // past the first task done: every slot was served
	for _, e := range ev.snapshot() {
		switch e.Type {
		case pb.JobEvent_TASK_DONE:
			training = true
		case pb.JobEvent_PSERVER_PROMOTED:
			promoted = append(promoted, e.Message)
		case pb.JobEvent_PSERVER_RESTORED:
			if training {
				t.Errorf("a restore or rollback while training with no fault: %d %s", e.Seq, e.Message)
			}
		}
	}
	last, acc := succeededInStep(t, c, job)
	var probedHealthy, probedFailed int
	for _, p := range c.Procs {
		raw, _ := os.ReadFile(p.LogPath)
		probedHealthy += strings.Count(string(raw), "suspect primary answered its probe")
		probedFailed += strings.Count(string(raw), "suspect primary failed its probe")
	}
	t.Logf("%v of training beside stress-ng --cpu 4, no fault: %d failovers (all false) %q; reports probed: %d answered, %d failed; final steps %v, test accuracy %.2f%%",
		trained.Round(time.Second), len(promoted), promoted, probedHealthy, probedFailed, last, 100*acc)
}

// TestSpuriousFailoverHarmless (issue 34: "a false suspicion costs a
// spurious failover, never a split brain") SIGSTOPs the primary of a
// replicated slot (not the Raft leader), reports it suspect
// (Master.ReportSuspect, as an admin: a trainer's failed call does the
// same), and resumes it as soon as the report is answered: the stopped
// primary cannot answer its probe, so its backup is promoted while the
// old primary is alive. The old primary then finds its claim gone and
// fences the slot; the job must go on and succeed with no restore or
// rollback after the report and every slot's final checkpoint at the same
// step (no step lost or applied twice).
func TestSpuriousFailoverHarmless(t *testing.T) {
	c := NewCluster(t, binPath, 3)
	c.StartAll()
	mustLeader(t, c, 20*time.Second)
	const job = "e2e-replicated-spurious"
	var ev *jobEvents
	defer logJobOnFailure(t, c, job, &ev, 12, 8)
	submitReplicated(t, c, job, 2)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	var followDone chan struct{}
	ev, followDone = followJob(ctx, c, job)
	waitFor(t, 2*time.Minute, "10 tasks done", func() bool { return ev.count(pb.JobEvent_TASK_DONE, nil) >= 10 })

	leader, victim, slot := slotOffLeader(t, c, job)
	reportSeq := ev.lastSeq()
	cl := c.Client(leader)
	c.Pause(victim)
	rctx, rcancel := context.WithTimeout(ctx, 30*time.Second)
	out, err := cl.Master.ReportSuspect(rctx, &pb.ReportSuspectRequest{Job: job, Slot: slot, Reason: "test: a false suspicion"})
	rcancel()
	c.Resume(victim)
	if err != nil {
		t.Fatalf("report of slot %d's stopped primary %s: %v", slot, victim.ID, err)
	}
	if out.Verdict != "promoted" || out.Primary == victim.ID {
		t.Fatalf("report of slot %d's stopped primary %s: %+v, want its backup promoted", slot, victim.ID, out)
	}
	t.Logf("slot %d: primary %s stopped, reported and resumed: %+v", slot, victim.ID, out)
	waitFor(t, 4*time.Minute, "the job to end", func() bool { return ev.count(pb.JobEvent_JOB_ENDED, nil) > 0 })
	<-followDone
	promoted := 0
	for _, e := range ev.snapshot() {
		if e.Seq <= reportSeq {
			continue
		}
		switch e.Type {
		case pb.JobEvent_PSERVER_RESTORED:
			t.Errorf("a restore or rollback after the spurious failover: %d %s", e.Seq, e.Message)
		case pb.JobEvent_PSERVER_PROMOTED:
			promoted++
			t.Logf("after the report: %s", e.Message)
		}
	}
	if promoted == 0 {
		t.Errorf("no PSERVER_PROMOTED event after the report: the promoted backup never served slot %d", slot)
	}
	if !victim.Running() {
		t.Errorf("the falsely suspected node %s is not running", victim.ID)
	}
	last, acc := succeededInStep(t, c, job)
	t.Logf("job succeeded after a spurious failover: final steps per slot %v, test accuracy %.2f%%", last, 100*acc)
}

// slotOffLeader returns the Raft leader and a node other than it that
// serves a slot of job, with that slot; it fails t if every slot is on
// the leader.
func slotOffLeader(t *testing.T, c *Cluster, job string) (leader, victim *Proc, slot int32) {
	t.Helper()
	leader = mustLeader(t, c, 10*time.Second)
	for _, ps := range jobStatusOf(t, c, leader, job).Pservers {
		if p := c.Proc(ps.Node); p != nil && p != leader {
			return leader, p, ps.Index
		}
	}
	t.Fatalf("no slot served by a node other than the leader %s: %s", leader.ID, jobSummary(c, job))
	return nil, nil, 0
}
