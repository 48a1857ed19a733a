package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/schollz/progressbar/v3"
	"github.com/spf13/cobra"

	pb "github.com/raftps/raftps/api/raftpspb"
	"github.com/raftps/raftps/raftstore/client"
)

func newTrainCmd(g *globals) *cobra.Command {
	sf := &specFlags{}
	c := &cobra.Command{
		Use:   "train",
		Short: "submit a training job and follow it to the end",
		Long: `Submit a training job to a running cluster (--endpoints) and follow it with a
progress bar. Exits 0 when the job succeeds, printing the final test accuracy
and the checkpoint version. Ctrl-C detaches and leaves the job running.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			spec, err := sf.build(cmd)
			if err != nil {
				return err
			}
			cl, err := g.client()
			if err != nil {
				return err
			}
			defer cl.Close()
			ctx := cmd.Context()
			sctx, cancel := g.ctx(ctx)
			resp, err := cl.Master.SubmitJob(sctx, &pb.SubmitJobRequest{Spec: spec})
			cancel()
			if err != nil {
				return rpcError(err)
			}
			fmt.Fprintf(g.err, "job %s submitted: %d tasks x %d passes, model %s, %d pservers, %s\n",
				spec.Name, resp.Status.TotalTasks, spec.Passes, spec.Model.Name, spec.NumPservers, spec.Mode)
			res, err := follow(ctx, cl, spec.Name, g.err, nil)
			if errors.Is(err, context.Canceled) {
				fmt.Fprintf(g.err, "\ndetached; job %s keeps running (raftps job status %s)\n", spec.Name, spec.Name)
				return nil
			}
			if err != nil {
				return err
			}
			return printTrainResult(g, res, spec.TargetAccuracy) // train_json.go
		},
	}
	sf.register(c)
	return c
}

// followResult is what follow saw of a job.
type followResult struct {
	Status   *pb.JobStatus
	Events   []*pb.JobEvent
	Examples int64
	Elapsed  time.Duration
}

// FinalAccuracy is the test accuracy of the last evaluated pass.
func (r *followResult) FinalAccuracy() (float64, bool) {
	if r.Status == nil || len(r.Status.Metrics) == 0 {
		return 0, false
	}
	return r.Status.Metrics[len(r.Status.Metrics)-1].TestAccuracy, true
}

// LastCheckpoint is the newest committed checkpoint version and its md5s.
func (r *followResult) LastCheckpoint() (int64, []string) {
	var v int64
	var md5s []string
	for _, c := range r.Status.GetCheckpoints() {
		if c.Version > v {
			v = c.Version
		}
	}
	for _, c := range r.Status.GetCheckpoints() {
		if c.Version == v {
			md5s = append(md5s, c.Md5)
		}
	}
	return v, md5s
}

// follow streams a job's events from its first one with a progress bar on
// w, resuming the stream after a node failure, until the job ends or ctx
// is cancelled. onEvent, if set, sees every event.
func follow(ctx context.Context, cl *client.Client, job string, w io.Writer, onEvent func(*pb.JobEvent)) (*followResult, error) {
	res := &followResult{}
	start := time.Now()
	var st *pb.JobStatus
	if err := client.Retry(ctx, func(ctx context.Context) error {
		cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		resp, err := cl.Master.GetJob(cctx, &pb.GetJobRequest{Name: job})
		if err == nil {
			st = resp.Status
		}
		return err
	}); err != nil {
		return nil, rpcError(err)
	}
	total := st.TotalTasks * int64(max(st.GetSpec().GetPasses(), 1))
	bar := progressbar.NewOptions64(total, progressbar.OptionSetWriter(w), progressbar.OptionShowCount(),
		progressbar.OptionSetWidth(30), progressbar.OptionThrottle(200*time.Millisecond),
		progressbar.OptionSetDescription("pass 0"), progressbar.OptionSetPredictTime(true))
	var next int64 = 1
	var lossSum float64
	var lossN int64
	for {
		stream, err := cl.Master.WatchJob(ctx, &pb.WatchJobRequest{Name: job, FromSeq: next})
		if err == nil {
			for {
				ev, rerr := stream.Recv()
				if rerr != nil {
					err = rerr
					break
				}
				next = ev.Seq + 1
				res.Events = append(res.Events, ev)
				if onEvent != nil {
					onEvent(ev)
				}
				switch ev.Type {
				case pb.JobEvent_TASK_DONE:
					res.Examples += ev.Examples
					lossSum += ev.Loss
					lossN++
					eps := float64(res.Examples) / time.Since(start).Seconds()
					bar.Describe(fmt.Sprintf("pass %d loss %.3f %5.0f ex/s", ev.Pass, lossSum/float64(lossN), eps))
					_ = bar.Add64(1)
				case pb.JobEvent_PASS_ENDED:
					lossSum, lossN = 0, 0
				case pb.JobEvent_EVAL_REPORTED:
					bar.Clear()
					fmt.Fprintf(w, "\rpass %d: test accuracy %.2f%%, test loss %.4f\n", ev.Pass, 100*ev.Accuracy, ev.Loss)
				}
			}
		}
		if ctx.Err() != nil {
			return res, ctx.Err()
		}
		if err == io.EOF {
			break // JOB_ENDED closes the stream
		}
		if !client.Retryable(err) {
			return res, rpcError(err)
		}
		select {
		case <-ctx.Done():
			return res, ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
	_ = bar.Finish()
	fmt.Fprintln(w)
	res.Elapsed = time.Since(start)
	if err := client.Retry(ctx, func(ctx context.Context) error {
		cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		resp, err := cl.Master.GetJob(cctx, &pb.GetJobRequest{Name: job})
		if err == nil {
			res.Status = resp.Status
		}
		return err
	}); err != nil {
		return res, rpcError(err)
	}
	return res, nil
}

// reportResult prints the end of a job and turns failure into an exit code.
func reportResult(w io.Writer, res *followResult, target float64) error {
	st := res.Status
	acc, ok := res.FinalAccuracy()
	v, md5s := res.LastCheckpoint()
	fmt.Fprintf(w, "job %s %s after %v: %d examples (%.0f examples/s)\n", st.Name, jobState(st.State),
		res.Elapsed.Round(time.Second), res.Examples, float64(res.Examples)/res.Elapsed.Seconds())
	if ok {
		fmt.Fprintf(w, "final test accuracy: %.2f%%\n", 100*acc)
	}
	fmt.Fprintf(w, "checkpoint version: %d (md5 %v)\n", v, md5s)
	if st.State != pb.JobState_JOB_SUCCEEDED {
		return &exitError{code: codeJobFailed, err: fmt.Errorf("job %s ended %s: %s", st.Name, jobState(st.State), st.Message)}
	}
	if target > 0 && (!ok || acc < target) {
		return &exitError{code: codeBelowTarget, err: fmt.Errorf("final test accuracy %.2f%% is below the target %.2f%%", 100*acc, 100*target)}
	}
	return nil
}
