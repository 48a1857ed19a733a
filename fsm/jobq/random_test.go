package jobq

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/raftps/raftps/api/errs"
	pb "github.com/raftps/raftps/api/raftpspb"
)

const (
	randomSeeds = 20
	randomSteps = 3000
)

type handout struct {
	job       string
	id, epoch int64
}

// scenario drives two jobs with a seeded random interleaving of every
// command, checking the invariants after each step. With restore, some steps
// replace the queue by a MarshalBinary → UnmarshalBinary copy (a leader
// change); without, those steps do nothing, so both runs must end in the
// same bytes. Returns the final snapshot and the queue.
func scenario(t *testing.T, seed uint64, restore bool) ([]byte, *Queue) {
	t.Helper()
	rng := rand.New(rand.NewPCG(seed, 42))
	q := New()
	jobs := []string{"a", "b"}
	for _, name := range jobs {
		s := testSpec(name, 1+rng.Int64N(40), 1+rng.Int64N(5))
		s.Passes = 1 + rng.Int32N(3)
		s.EvalEachPass = rng.IntN(2) == 0
		s.MaxTaskTimeouts = 1 + rng.Int32N(3)
		s.TaskTimeoutFloorMs = 500 + rng.Int64N(1500)
		if rng.IntN(3) == 0 {
			s.MaxSteps = 20 + rng.Int64N(200) // the step counter below counts finishes of both jobs
		}
		mustSubmit(t, q, t0, s)
	}
	trainers := []string{"t0", "t1", "t2", "t3", "t4"}
	var held []handout
	now, step := t0, int64(0)
	pick := func() (handout, int) {
		i := rng.IntN(len(held))
		return held[i], i
	}
	drop := func(i int) { held = append(held[:i], held[i+1:]...) }
	for range randomSteps {
		now += rng.Int64N(300 * msNs)
		job := jobs[rng.IntN(len(jobs))]
		trainer := trainers[rng.IntN(len(trainers))]
		switch op := rng.IntN(100); {
		case op < 35:
			if r := mustGet(t, q, now, job, trainer); r.Result == pb.GetTaskResponse_TASK {
				held = append(held, handout{job, r.Task.Id, r.Task.Epoch})
			}
		case op < 60 && len(held) > 0:
			h, i := pick()
			step++
			mustFinish(t, q, now, h.job, h.id, h.epoch, &pb.TaskMetrics{Loss: rng.Float64(), Examples: 1 + rng.Int64N(5), Step: step, Accuracy: rng.Float64()})
			if rng.IntN(10) < 7 {
				drop(i) // else keep it for a later duplicate (stale) finish
			}
		case op < 65:
			mustFinish(t, q, now, job, rng.Int64N(45)-2, rng.Int64N(q.jobs[job].epoch+2), &pb.TaskMetrics{Loss: 1})
		case op < 72 && len(held) > 0:
			h, i := pick()
			mustFail(t, q, now, h.job, h.id, h.epoch)
			drop(i)
		case op < 82:
			now += rng.Int64N(5 * sec)
			if rng.IntN(2) == 0 {
				job = ""
			}
			mustExpire(t, q, now, job)
		case op < 86:
			if rng.IntN(3) == 0 {
				job = ""
			}
			if _, err := q.RequeueTrainer(now, &pb.RequeueTrainerRequest{Job: job, Trainer: trainer, Reason: "gossip"}); err != nil {
				t.Fatal(err)
			}
			mustCheck(t, q)
		case op < 90:
			if restore {
				b := mustMarshal(t, q)
				q2 := New()
				if err := q2.UnmarshalBinary(b); err != nil {
					t.Fatalf("seed %d: restore: %v", seed, err)
				}
				mustCheck(t, q2)
				if !bytes.Equal(b, mustMarshal(t, q2)) {
					t.Fatalf("seed %d: the restored copy marshals differently", seed)
				}
				q = q2
			}
		case op < 92:
			if _, err := q.RecordEvent(now, &pb.JobEvent{Job: job, Type: pb.JobEvent_CHECKPOINT_COMMITTED, Version: step}); err != nil {
				t.Fatal(err)
			}
		case op < 93 && rng.IntN(20) == 0:
			if _, err := q.Cancel(now, &pb.CancelJobRequest{Name: job}); err != nil && !errors.Is(err, errs.ErrFailedPrecondition) {
				t.Fatal(err)
			}
			mustCheck(t, q)
		default:
			if _, err := q.Cancel(now, &pb.CancelJobRequest{Name: "nope"}); err == nil {
				t.Fatal("cancel of an unknown job succeeded")
			}
		}
	}
	// Drain: well-behaved trainers finish everything they get.
	for round := 0; ; round++ {
		if round > 100000 {
			t.Fatalf("seed %d: jobs did not end", seed)
		}
		running := false
		for _, job := range jobs {
			for _, trainer := range trainers {
				r := mustGet(t, q, now, job, trainer)
				switch r.Result {
				case pb.GetTaskResponse_TASK:
					step++
					mustFinish(t, q, now+sec/10, job, r.Task.Id, r.Task.Epoch, &pb.TaskMetrics{Loss: 0.5, Examples: 1, Step: step})
					running = true
				case pb.GetTaskResponse_JOB_OVER:
				default:
					running = true
				}
			}
		}
		if !running {
			break
		}
		now += sec
		if round%50 == 49 {
			now += 3600 * sec // outwait blacklists and old deadlines
		}
		mustExpire(t, q, now, "")
	}
	return mustMarshal(t, q), q
}

// checkExactlyOnce verifies, from the events alone, that in every pass of
// the job every task was counted done at most once, and in every pass that
// ended, exactly once unless it had failed (in that pass or before) or the
// pass was cut short by max_steps.
func checkExactlyOnce(t *testing.T, q *Queue, job string) {
	t.Helper()
	st := mustStatus(t, q, job)
	n := st.TotalTasks
	evs := mustEvents(t, q, job)
	done := map[int32]map[int64]int{}
	failedIn := map[int64]int32{} // task -> pass it failed in
	ended := map[int32]bool{}
	cut := map[int32]bool{}
	for _, e := range evs {
		switch e.Type {
		case pb.JobEvent_TASK_DONE:
			if done[e.Pass] == nil {
				done[e.Pass] = map[int64]int{}
			}
			done[e.Pass][e.TaskId]++
			if p, ok := failedIn[e.TaskId]; ok && p <= e.Pass {
				t.Errorf("job %s: task %d done in pass %d after it failed in pass %d", job, e.TaskId, e.Pass, p)
			}
		case pb.JobEvent_TASK_FAILED:
			if e.TaskId >= 0 {
				if _, ok := failedIn[e.TaskId]; ok {
					t.Errorf("job %s: task %d failed twice", job, e.TaskId)
				}
				failedIn[e.TaskId] = e.Pass
			}
		case pb.JobEvent_PASS_ENDED:
			if ended[e.Pass] {
				t.Errorf("job %s: pass %d ended twice", job, e.Pass)
			}
			ended[e.Pass] = true
			cut[e.Pass] = strings.Contains(e.Message, "max_steps")
		}
	}
	for pass, ids := range done {
		for id, c := range ids {
			if c != 1 {
				t.Errorf("job %s pass %d: task %d done %d times", job, pass, id, c)
			}
		}
	}
	for pass := range ended {
		if cut[pass] {
			continue
		}
		for id := range n {
			p, failed := failedIn[id]
			failed = failed && p <= pass
			if got := done[pass][id]; failed == (got == 1) {
				t.Errorf("job %s pass %d: task %d done %d times, failed %v", job, pass, id, got, failed)
			}
		}
	}
	switch st.State {
	case pb.JobState_JOB_SUCCEEDED:
		if strings.Contains(st.Message, "max_steps") {
			if !cut[st.Pass] || len(ended) != int(st.Pass)+1 || len(st.Metrics) != len(ended) {
				t.Errorf("job %s: max_steps end in pass %d after %d passes (%d metrics)", job, st.Pass, len(ended), len(st.Metrics))
			}
			break
		}
		if len(ended) != int(st.Spec.Passes) || len(st.Metrics) != int(st.Spec.Passes) {
			t.Errorf("job %s succeeded after %d passes (%d metrics), want %d", job, len(ended), len(st.Metrics), st.Spec.Passes)
		}
	case pb.JobState_JOB_FAILED:
		if int64(len(failedIn)) != n {
			t.Errorf("job %s failed with %d of %d tasks failed", job, len(failedIn), n)
		}
	case pb.JobState_JOB_CANCELLED:
	default:
		t.Errorf("job %s ended in %v", job, st.State)
	}
}

func TestRandomized(t *testing.T) {
	for seed := range uint64(randomSeeds) {
		t.Run(fmt.Sprint("seed", seed), func(t *testing.T) {
			withRestore, q := scenario(t, seed, true)
			for _, job := range []string{"a", "b"} {
				checkExactlyOnce(t, q, job)
				st := mustStatus(t, q, job)
				evs := mustEvents(t, q, job)
				t.Logf("job %s: %v (%s) pass %d/%d tasks %d failed %d timeouts %d requeued %d events %d (done %d, eval %d)",
					job, st.State, st.Message, st.Pass, st.Spec.Passes, st.TotalTasks, st.Failed, st.Timeouts, st.Requeued, len(evs),
					countEvents(evs, pb.JobEvent_TASK_DONE), countEvents(evs, pb.JobEvent_EVAL_REPORTED))
			}
			// Determinism: the same commands without the restores give the
			// same bytes (restores are invisible), and so does a second run.
			without, _ := scenario(t, seed, false)
			if !bytes.Equal(withRestore, without) {
				t.Fatalf("seed %d: run with snapshot/restore differs from the run without (%d vs %d bytes)", seed, len(withRestore), len(without))
			}
			again, _ := scenario(t, seed, true)
			if !bytes.Equal(withRestore, again) {
				t.Fatalf("seed %d: two identical runs differ", seed)
			}
		})
	}
}
