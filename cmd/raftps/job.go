package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"google.golang.org/protobuf/encoding/protojson"
	"gopkg.in/yaml.v3"

	pb "github.com/raftps/raftps/api/raftpspb"
	"github.com/raftps/raftps/raftstore/client"
)

// specFlags are the job spec fields settable from flags.
type specFlags struct {
	file          string
	name          string
	model         string
	hidden        []int
	dataset       string
	recordsPerTsk int64
	records       int64
	passes        int32
	batch         int32
	optimizer     string
	lr            float64
	momentum      float64
	pservers      int32
	mode          string
	staleness     int32
	ckptSteps     int64
	ckptSeconds   int64
	keepMax       int32
	replicas      int32
	slotReplicas  int32
	seed          int64
	target        float64
}

func (s *specFlags) register(c *cobra.Command) {
	f := c.Flags()
	f.StringVarP(&s.file, "file", "f", "", "job spec file (YAML or JSON, field names as in api/job.proto); flags override it")
	f.StringVar(&s.name, "name", "", "job name")
	f.StringVar(&s.model, "model", "mlp", "model: softmax, mlp, hashed_lr, or external (a model of your own, e.g. a PyTorch trainer's: --file lists its params)")
	f.IntSliceVar(&s.hidden, "hidden", []int{128}, "hidden layer widths of the mlp")
	f.StringVar(&s.dataset, "dataset", defaultDatasetDir(), "Fashion-MNIST directory on every trainer node")
	f.Int64Var(&s.recordsPerTsk, "records-per-task", 1000, "records per task")
	f.Int64Var(&s.records, "records", 60000, "training records")
	f.Int32Var(&s.passes, "passes", 3, "passes over the dataset")
	f.Int32Var(&s.batch, "batch-size", 64, "mini-batch size")
	f.StringVar(&s.optimizer, "optimizer", "momentum", "optimizer: sgd, momentum, adam, adagrad")
	f.Float64Var(&s.lr, "lr", 0.05, "learning rate")
	f.Float64Var(&s.momentum, "momentum", 0.9, "momentum coefficient")
	f.Int32Var(&s.pservers, "pservers", 2, "number of parameter-server slots")
	f.StringVar(&s.mode, "mode", "sync", "update mode: sync or async")
	f.Int32Var(&s.staleness, "staleness", 0, "async staleness bound (0: unbounded)")
	f.Int64Var(&s.ckptSteps, "checkpoint-steps", 200, "checkpoint every N steps (0: off)")
	f.Int64Var(&s.ckptSeconds, "checkpoint-seconds", 0, "checkpoint every T seconds (0: off)")
	f.Int32Var(&s.keepMax, "keep-max", 3, "checkpoint versions kept (0: all)")
	f.Int32Var(&s.replicas, "replicas", 2, "nodes holding each checkpoint blob")
	f.Int32Var(&s.slotReplicas, "slot-replicas", 0, "nodes holding each pserver slot, its primary included: 2 or 3 survive a pserver node's death without a restore (0: the master's default, 2 when the live pserver nodes have the capacity, else 1)")
	f.Int64Var(&s.seed, "seed", 1, "seed of initializers and shuffling")
	f.Float64Var(&s.target, "target-accuracy", 0.85, "test accuracy the job is expected to reach")
}

// defaultDatasetDir is the shipped Fashion-MNIST, found next to the binary's
// repository or the working directory.
func defaultDatasetDir() string {
	cands := []string{"datasets/fashion-mnist"}
	if exe, err := os.Executable(); err == nil {
		cands = append(cands, filepath.Join(filepath.Dir(exe), "..", "datasets", "fashion-mnist"))
	}
	for _, c := range cands {
		if _, err := os.Stat(filepath.Join(c, "train-labels-idx1-ubyte.gz")); err == nil {
			abs, _ := filepath.Abs(c)
			return abs
		}
	}
	return "datasets/fashion-mnist"
}

// build returns the job spec: the file (if any), then the flags that were set
// (all flags when there is no file), then the model's parameters.
func (s *specFlags) build(c *cobra.Command) (*pb.JobSpec, error) {
	spec := &pb.JobSpec{}
	if s.file != "" {
		if err := s.readFile(spec); err != nil {
			return nil, err
		}
	}
	set := func(name string) bool { return s.file == "" || c.Flags().Changed(name) }
	if set("name") && s.name != "" {
		spec.Name = s.name
	}
	if spec.Name == "" {
		spec.Name = fmt.Sprintf("job-%d", time.Now().Unix())
	}
	s.buildModel(spec, set)
	s.buildData(spec, set)
	s.buildOptimizer(spec, set)
	if set("pservers") {
		spec.NumPservers = s.pservers
	}
	if set("slot-replicas") {
		spec.Replicas = s.slotReplicas
	}
	if set("mode") {
		switch s.mode {
		case "sync":
			spec.Mode = pb.UpdateMode_UPDATE_MODE_SYNC
		case "async":
			spec.Mode = pb.UpdateMode_UPDATE_MODE_ASYNC
		default:
			return nil, fmt.Errorf("--mode %q: want sync or async", s.mode)
		}
	}
	if set("staleness") {
		spec.Staleness = s.staleness
	}
	s.buildCheckpoint(spec, set)
	if set("seed") {
		spec.Seed = s.seed
	}
	if set("target-accuracy") {
		spec.TargetAccuracy = s.target
	}
	if s.file == "" {
		spec.EvalEachPass = true
	}
	if err := fillParams(spec); err != nil {
		return nil, err
	}
	return spec, nil
}

// readFile reads --file (YAML or JSON, protojson field names) into spec.
func (s *specFlags) readFile(spec *pb.JobSpec) error {
	b, err := os.ReadFile(s.file)
	if err != nil {
		return err
	}
	var v any
	if err := yaml.Unmarshal(b, &v); err != nil {
		return fmt.Errorf("spec %s: %w", s.file, err)
	}
	j, err := json.Marshal(v)
	if err != nil {
		return fmt.Errorf("spec %s: %w", s.file, err)
	}
	if err := protojson.Unmarshal(j, spec); err != nil {
		return fmt.Errorf("spec %s: %w", s.file, err)
	}
	return nil
}

// buildModel sets spec's model from the flags set (set reports which),
// with hashed_lr's defaults.
func (s *specFlags) buildModel(spec *pb.JobSpec, set func(string) bool) {
	if spec.Model == nil {
		spec.Model = &pb.ModelSpec{}
	}
	if set("model") {
		spec.Model.Name = s.model
	}
	if set("hidden") {
		spec.Model.Hidden = nil
		for _, h := range s.hidden {
			spec.Model.Hidden = append(spec.Model.Hidden, int32(h))
		}
	}
	if spec.Model.Name == "hashed_lr" {
		if spec.Model.EmbeddingDim == 0 {
			spec.Model.EmbeddingDim = 16
		}
		if spec.Model.HashBuckets == 0 {
			spec.Model.HashBuckets = 1 << 16
		}
	}
}

// buildData sets spec's dataset, records per task, passes and batch size
// from the flags set.
func (s *specFlags) buildData(spec *pb.JobSpec, set func(string) bool) {
	if spec.Dataset == nil {
		spec.Dataset = &pb.DatasetSpec{Format: "fashion-mnist"}
	}
	if set("dataset") {
		abs, _ := filepath.Abs(s.dataset)
		spec.Dataset.Path = abs
	}
	if set("records") {
		spec.Dataset.Records = s.records
	}
	if set("records-per-task") {
		spec.RecordsPerTask = s.recordsPerTsk
	}
	if set("passes") {
		spec.Passes = s.passes
	}
	if set("batch-size") {
		spec.BatchSize = s.batch
	}
}

// buildOptimizer sets spec's optimizer from the flags set, with Adam's
// defaults.
func (s *specFlags) buildOptimizer(spec *pb.JobSpec, set func(string) bool) {
	if spec.Optimizer == nil {
		spec.Optimizer = &pb.OptimizerSpec{}
	}
	if set("optimizer") {
		spec.Optimizer.Name = s.optimizer
	}
	if set("lr") {
		spec.Optimizer.LearningRate = s.lr
	}
	if set("momentum") {
		spec.Optimizer.Momentum = s.momentum
	}
	if spec.Optimizer.Name == "adam" {
		if spec.Optimizer.Beta1 == 0 {
			spec.Optimizer.Beta1 = 0.9
		}
		if spec.Optimizer.Beta2 == 0 {
			spec.Optimizer.Beta2 = 0.999
		}
		if spec.Optimizer.Epsilon == 0 {
			spec.Optimizer.Epsilon = 1e-8
		}
	}
}

// buildCheckpoint sets spec's checkpoint policy from the flags set.
func (s *specFlags) buildCheckpoint(spec *pb.JobSpec, set func(string) bool) {
	if spec.Checkpoint == nil {
		spec.Checkpoint = &pb.CheckpointPolicy{}
	}
	if set("checkpoint-steps") {
		spec.Checkpoint.EverySteps = s.ckptSteps
	}
	if set("checkpoint-seconds") {
		spec.Checkpoint.EverySeconds = s.ckptSeconds
	}
	if set("keep-max") {
		spec.Checkpoint.KeepMax = s.keepMax
	}
	if set("replicas") {
		spec.Checkpoint.Replicas = s.replicas
	}
}

// newJobCmd is `raftps job submit|list|status|cancel|delete`.
func newJobCmd(g *globals) *cobra.Command {
	c := &cobra.Command{Use: "job", Short: "training job commands"}
	c.AddCommand(newJobSubmitCmd(g), newJobListCmd(g), newJobStatusCmd(g), newJobCancelCmd(g), newJobDeleteCmd(g))
	return c
}

// newJobSubmitCmd is `raftps job submit`.
func newJobSubmitCmd(g *globals) *cobra.Command {
	sf := &specFlags{}
	c := &cobra.Command{
		Use: "submit", Short: "submit a training job (from --file and/or flags)", Args: cobra.NoArgs,
		Long: `Submit sends a job spec to the master: from --file (YAML or JSON, field
names as in api/raftps/v1/job.proto), each flag given overriding it, or from
the flags alone.

The model is one of raftps's own (softmax, mlp, hashed_lr: the CLI fills
the parameters from it) or "external", a model of your own whose trainers
are yours (PyTorch: python/raftps). An external spec lists every parameter:

  model: {name: external}
  params:
    - {name: fc.weight, shape: [10, 784], init: INIT_GLOROT}
    - {name: fc.bias, shape: [10]}`,
		RunE: func(cmd *cobra.Command, _ []string) error {
			spec, err := sf.build(cmd)
			if err != nil {
				return err
			}
			return g.call(cmd.Context(), func(ctx context.Context, cl *client.Client) error {
				resp, err := cl.Master.SubmitJob(ctx, &pb.SubmitJobRequest{Spec: spec})
				if err != nil {
					return rpcError(err)
				}
				return g.printer.Object(resp.Status, func(w io.Writer) {
					fmt.Fprintf(w, "job %s submitted: %d tasks, %d passes\n", spec.Name, resp.Status.TotalTasks, spec.Passes)
				})
			})
		},
	}
	sf.register(c)
	return c
}

// newJobListCmd is `raftps job list`.
func newJobListCmd(g *globals) *cobra.Command {
	c := &cobra.Command{
		Use: "list", Short: "list jobs", Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return g.call(cmd.Context(), func(ctx context.Context, cl *client.Client) error {
				resp, err := cl.Master.ListJobs(ctx, &pb.ListJobsRequest{})
				if err != nil {
					return rpcError(err)
				}
				rows := make([][]string, 0, len(resp.Jobs))
				for _, j := range resp.Jobs {
					rows = append(rows, []string{j.Name, jobState(j.State), fmt.Sprint(j.Pass),
						fmt.Sprintf("%d/%d", j.Done, j.TotalTasks), fmt.Sprint(len(j.Trainers))})
				}
				return g.printer.Table(resp, []string{"NAME", "STATE", "PASS", "DONE/TOTAL", "TRAINERS"}, rows)
			})
		},
	}
	return c
}

// newJobStatusCmd is `raftps job status`.
func newJobStatusCmd(g *globals) *cobra.Command {
	var lastEvents int64
	c := &cobra.Command{
		Use: "status JOB", Short: "show a job's queues, pass, trainers, pservers, checkpoints and latest events", Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return g.call(cmd.Context(), func(ctx context.Context, cl *client.Client) error {
				resp, err := cl.Master.GetJob(ctx, &pb.GetJobRequest{Name: args[0]})
				if err != nil {
					return rpcError(err)
				}
				evs, err := latestEvents(ctx, cl, args[0], resp.Status.GetEventsSeq(), lastEvents)
				if err != nil {
					return rpcError(err)
				}
				return g.printer.Object(resp.Status, func(w io.Writer) {
					printJobStatus(w, resp.Status)
					for _, e := range evs {
						fmt.Fprintf(w, "event %d %s %s: %s\n", e.Seq, time.Unix(0, e.UnixNano).Format(time.TimeOnly), e.Type, e.Message)
					}
				})
			})
		},
	}
	c.Flags().Int64Var(&lastEvents, "events", 10, "show the job's latest N events (text output; 0: none)")
	return c
}

// newJobCancelCmd is `raftps job cancel`.
func newJobCancelCmd(g *globals) *cobra.Command {
	c := &cobra.Command{
		Use: "cancel JOB", Short: "cancel a job", Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return g.call(cmd.Context(), func(ctx context.Context, cl *client.Client) error {
				resp, err := cl.Master.CancelJob(ctx, &pb.CancelJobRequest{Name: args[0]})
				if err != nil {
					return rpcError(err)
				}
				return g.printer.Object(resp, func(w io.Writer) { fmt.Fprintf(w, "job %s cancelled\n", args[0]) })
			})
		},
	}
	return c
}

// newJobDeleteCmd is `raftps job delete`.
func newJobDeleteCmd(g *globals) *cobra.Command {
	c := &cobra.Command{
		Use: "delete JOB", Short: "delete a job that is not running, with its tasks, events and keys (slots, trainers, checkpoint pointers)",
		Long: `Delete removes a finished (succeeded, failed or cancelled) job from the
queue, with its tasks and events, and then its keys. A running job is
refused with FailedPrecondition: cancel it first. Deleting a job that is
gone already deletes any keys left behind and reports NotFound.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return g.call(cmd.Context(), func(ctx context.Context, cl *client.Client) error {
				resp, err := cl.Master.DeleteJob(ctx, &pb.DeleteJobRequest{Name: args[0]})
				if err != nil {
					return rpcError(err)
				}
				return g.printer.Object(resp.Status, func(w io.Writer) {
					fmt.Fprintf(w, "job %s deleted (was %s)\n", args[0], jobState(resp.Status.GetState()))
				})
			})
		},
	}
	return c
}

// latestEvents returns the events of job with seq in (last-n, last], read
// with WatchJob (which streams from a sequence number; the stream is
// closed once seq last has arrived).
func latestEvents(ctx context.Context, cl *client.Client, job string, last, n int64) ([]*pb.JobEvent, error) {
	if n <= 0 || last <= 0 {
		return nil, nil
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stream, err := cl.Master.WatchJob(ctx, &pb.WatchJobRequest{Name: job, FromSeq: max(1, last-n+1)})
	if err != nil {
		return nil, err
	}
	var evs []*pb.JobEvent
	for {
		ev, err := stream.Recv()
		if err == io.EOF {
			return evs, nil // the job ended with its last event
		}
		if err != nil {
			return evs, err
		}
		evs = append(evs, ev)
		if ev.Seq >= last {
			return evs, nil
		}
	}
}

func jobState(s pb.JobState) string {
	return strings.ToLower(strings.TrimPrefix(s.String(), "JOB_"))
}

// replicasDefault is " (default: <reason>)" when the master chose the
// job's replicas (JobSpec.replicas_default), else "".
func replicasDefault(s *pb.JobSpec) string {
	if d := s.GetReplicasDefault(); d != "" {
		return " (default: " + d + ")"
	}
	return ""
}

func printJobStatus(w io.Writer, j *pb.JobStatus) {
	fmt.Fprintf(w, "job %s: %s, pass %d\n", j.Name, jobState(j.State), j.Pass)
	fmt.Fprintf(w, "tasks: todo %d, pending %d, done %d, failed %d (total %d; requeued %d, timeouts %d)\n",
		j.Todo, j.Pending, j.Done, j.Failed, j.TotalTasks, j.Requeued, j.Timeouts)
	fmt.Fprintf(w, "trainers: %s\n", strings.Join(j.Trainers, ", "))
	if r := j.GetSpec().GetReplicas(); r > 0 {
		fmt.Fprintf(w, "replicas: %d per pserver slot%s\n", r, replicasDefault(j.GetSpec()))
	}
	for _, p := range j.Pservers {
		fmt.Fprintf(w, "pserver slot %d: node %s at %s (incarnation %d)", p.Index, p.Node, p.Addr, p.Incarnation)
		if p.ReplicaEpoch > 0 {
			fmt.Fprintf(w, ", backups [%s], replica epoch %d", strings.Join(p.Backups, ","), p.ReplicaEpoch)
		}
		fmt.Fprintln(w)
	}
	for i, c := range j.Checkpoints {
		fmt.Fprintf(w, "checkpoint slot %d: version %s, step %d, md5 %s, replicas %s\n", i, fmtVersion(c.Version), c.Step, c.Md5, strings.Join(c.Replicas, ","))
	}
	for _, r := range j.Restores {
		fmt.Fprintf(w, "restore slot %d at %s: version %s md5 %s from %s: %s\n", r.Slot,
			time.Unix(0, r.UnixNano).Format(time.TimeOnly), fmtVersion(r.Version), r.Md5, r.Source, r.Reason)
	}
	for _, m := range j.Metrics {
		fmt.Fprintf(w, "pass %d: train loss %.4f, test loss %.4f, test accuracy %.2f%%\n", m.Pass, m.TrainLoss, m.TestLoss, 100*m.TestAccuracy)
	}
	if j.Message != "" {
		fmt.Fprintf(w, "message: %s\n", j.Message)
	}
}
