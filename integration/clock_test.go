package integration

import (
	"context"
	"testing"
	"time"

	pb "github.com/raftps/raftps/api/raftpspb"
	"github.com/raftps/raftps/raftstore/client"
)

// TestShownTimesAfterLeaderlessPeriod (issue 37): after 10 s without a
// quorum (the leader's two followers stopped with SIGSTOP: the leader
// steps down, and the next leader's term re-bases the cluster clock), a
// job's submit and finish times and its events' times are within 2 s of
// the wall clock. They were cluster time, which skips every leaderless
// period: 10 s and more behind here. (Were the leader stopped instead, it
// could lead on in its term after SIGCONT, pre-vote keeping the lone
// follower from an election, and the cluster clock would not lag.)
func TestShownTimesAfterLeaderlessPeriod(t *testing.T) {
	c := NewCluster(t, binPath, 3, "--roles", "server")
	c.StartAll()
	mustLeader(t, c, 30*time.Second)
	cl := c.Client()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	retry := func(fn func(ctx context.Context) error) {
		t.Helper()
		if err := client.Retry(ctx, func(ctx context.Context) error {
			cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			defer cancel()
			return fn(cctx)
		}); err != nil {
			t.Fatal(err)
		}
	}
	retry(func(ctx context.Context) error {
		_, err := cl.Master.SubmitJob(ctx, &pb.SubmitJobRequest{Spec: validSpec(t, "before")})
		return err
	})

	leader := mustLeader(t, c, 30*time.Second)
	var paused []*Proc
	for _, p := range c.Procs {
		if p != leader {
			c.Pause(p)
			paused = append(paused, p)
		}
	}
	time.Sleep(10 * time.Second)
	for _, p := range paused {
		c.Resume(p)
	}
	mustLeader(t, c, time.Minute)

	within := func(what string, got int64, lo, hi time.Time) {
		t.Helper()
		g := time.Unix(0, got)
		if g.Before(lo.Add(-2*time.Second)) || g.After(hi.Add(2*time.Second)) {
			t.Errorf("%s shown as %s, wall clock %s to %s: %v off", what, g.Format(time.StampMilli),
				lo.Format(time.StampMilli), hi.Format(time.StampMilli), lo.Sub(g).Round(time.Millisecond))
		}
	}
	var sub *pb.SubmitJobResponse
	lo := time.Now()
	retry(func(ctx context.Context) (err error) {
		sub, err = cl.Master.SubmitJob(ctx, &pb.SubmitJobRequest{Spec: validSpec(t, "after")})
		return err
	})
	hi := time.Now()
	within("submitted_unix_nano", sub.Status.SubmittedUnixNano, lo, hi)
	var can *pb.CancelJobResponse
	lo2 := time.Now()
	retry(func(ctx context.Context) (err error) {
		can, err = cl.Master.CancelJob(ctx, &pb.CancelJobRequest{Name: "after"})
		return err
	})
	hi2 := time.Now()
	within("finished_unix_nano", can.Status.FinishedUnixNano, lo2, hi2)

	w, err := cl.Master.WatchJob(ctx, &pb.WatchJobRequest{Name: "after", FromSeq: 1})
	if err != nil {
		t.Fatal(err)
	}
	seen := map[pb.JobEvent_Type]bool{}
	for !seen[pb.JobEvent_JOB_ENDED] {
		ev, err := w.Recv()
		if err != nil {
			t.Fatalf("watch after %v: %v", seen, err)
		}
		seen[ev.Type] = true
		switch ev.Type {
		case pb.JobEvent_JOB_SUBMITTED:
			within("the JOB_SUBMITTED event", ev.UnixNano, lo, hi)
		case pb.JobEvent_JOB_ENDED:
			within("the JOB_ENDED event", ev.UnixNano, lo2, hi2)
		}
	}
}
