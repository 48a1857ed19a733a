package integration

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	pb "github.com/raftps/raftps/api/raftpspb"
)

// TestReplicatedSlotSecondFailover (issue 34, re-replication) runs a sync
// job with replicas 2 on three TLS nodes and kills a slot's primary
// twice: first the node serving it (not the Raft leader), which is
// restarted once its backup was promoted; then, once the promoted
// primary built a new backup from its snapshot (a PSERVER_REREPLICATED
// event for the slot) and two more tasks were done, the promoted node
// itself. The rebuilt backup is
// promoted in turn: the job loses no step to either fault (no
// PSERVER_RESTORED, restore or rollback, after the first kill), succeeds,
// and every slot's final checkpoint is at the same step. Before
// re-replication, the promoted primary ran with no backup and the second
// kill restored the slot from its checkpoint and rolled the job back.
func TestReplicatedSlotSecondFailover(t *testing.T) {
	c := NewCluster(t, binPath, 3)
	c.StartAll()
	mustLeader(t, c, 20*time.Second)
	const job = "e2e-rereplicated"
	var ev *jobEvents
	defer logJobOnFailure(t, c, job, &ev, 16, 8)
	mustCLI(t, c, c.Procs[0], "job", "submit", "--name", job, "--model", "mlp", "--hidden", "64",
		"--dataset", datasetDir(t), "--records", "18000", "--records-per-task", "300", "--passes", "3",
		"--pservers", "2", "--slot-replicas", "2", "--mode", "sync", "--lr", "0.05", "--checkpoint-steps", "1000", "--keep-max", "3")

	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	var followDone chan struct{}
	ev, followDone = followJob(ctx, c, job)
	waitFor(t, 2*time.Minute, "10 tasks done", func() bool { return ev.count(pb.JobEvent_TASK_DONE, nil) >= 10 })

	_, victim, slot := slotOffLeader(t, c, job)
	ofSlot := func(after int64, typ pb.JobEvent_Type) *pb.JobEvent {
		for _, e := range ev.snapshot() {
			if e.Type == typ && e.Seq > after && strings.HasPrefix(e.Message, fmt.Sprintf("slot %d", slot)) {
				return e
			}
		}
		return nil
	}
	// kill SIGKILLs p and waits for the slot's backup to be promoted; it
	// returns the promoted node and the seq of the last event before
	// the kill.
	kill := func(p *Proc, what string) (*Proc, int64) {
		seq := ev.lastSeq()
		killedAt := time.Now()
		c.Kill(p)
		var e *pb.JobEvent
		waitFor(t, 60*time.Second, "the slot's backup promoted after the "+what, func() bool {
			e = ofSlot(seq, pb.JobEvent_PSERVER_PROMOTED)
			return e != nil
		})
		var node string
		if _, err := fmt.Sscanf(strings.TrimPrefix(e.Message, fmt.Sprintf("slot %d on ", slot)), "%s", &node); err != nil {
			t.Fatalf("promotion event %q: %v", e.Message, err)
		}
		node = strings.TrimSuffix(node, ":")
		t.Logf("%s: SIGKILLed %s; slot %d promoted on %s within %v: %s", what, p.ID, slot, node,
			time.Since(killedAt).Round(time.Millisecond), e.Message)
		return c.Proc(node), seq
	}
	promoted, firstKill := kill(victim, "first kill")
	if promoted == nil {
		t.Fatal("the promotion names no node of the cluster")
	}
	c.Start(victim) // back in Raft and gossip: a candidate for the new backup
	var re *pb.JobEvent
	waitFor(t, 90*time.Second, "a new backup built for the slot", func() bool {
		re = ofSlot(firstKill, pb.JobEvent_PSERVER_REREPLICATED)
		return re != nil
	})
	t.Logf("re-replicated: %s", re.Message)
	// Training goes on with the new backup in the ISR before the second kill.
	tasks := ev.count(pb.JobEvent_TASK_DONE, nil)
	waitFor(t, 60*time.Second, "2 more tasks done", func() bool { return ev.count(pb.JobEvent_TASK_DONE, nil) >= tasks+2 })
	if ev.count(pb.JobEvent_JOB_ENDED, nil) > 0 {
		t.Fatal("the job ended before the second kill: make it longer")
	}
	second, _ := kill(promoted, "second kill")
	if second == nil || second == promoted {
		t.Fatalf("second promotion to %v", second)
	}
	c.Start(promoted)
	waitFor(t, 5*time.Minute, "the job to end", func() bool { return ev.count(pb.JobEvent_JOB_ENDED, nil) > 0 })
	<-followDone
	for _, e := range ev.snapshot() {
		if e.Type == pb.JobEvent_PSERVER_RESTORED && e.Seq > firstKill {
			t.Errorf("a restore or rollback after the first kill (steps lost; replicated slots fail over without one): %d %s", e.Seq, e.Message)
		}
	}
	final := jobStatusOf(t, c, mustLeader(t, c, 30*time.Second), job)
	if final.State != pb.JobState_JOB_SUCCEEDED {
		t.Fatalf("job ended %v: %s", final.State, final.Message)
	}
	var steps []int64
	waitFor(t, 60*time.Second, "every slot's final checkpoint at one step", func() bool {
		steps = steps[:0]
		for _, cp := range jobStatusOf(t, c, mustLeader(t, c, 30*time.Second), job).Checkpoints {
			steps = append(steps, cp.GetStep())
		}
		if len(steps) == 2 && steps[0] > 0 && steps[0] == steps[1] {
			return true
		}
		time.Sleep(time.Second)
		return false
	})
	t.Logf("job succeeded after two kills of slot %d's primary, 0 steps lost: final steps per slot %v", slot, steps)
}
