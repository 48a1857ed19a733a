package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/spf13/cobra"

	pb "github.com/raftps/raftps/api/raftpspb"
	"github.com/raftps/raftps/internal/testing/localcluster"
	"github.com/raftps/raftps/raftstore/client"
	"github.com/raftps/raftps/schema"
	"github.com/raftps/raftps/security"
)

// demoCluster is the local cluster of child processes of `raftps demo`
// and `raftps dev`, with mutual TLS: its own CA and certificates in
// <dir>/pki.
type demoCluster struct {
	nodes []*localcluster.Node
	admin security.Files // the demo's client certificate (role admin)
}

func newDemoCluster(exe, dir string, n int, nodeFlags ...string) (*demoCluster, error) {
	// Secure by default: localcluster.New makes the CA, the nodes' and
	// the admin's certificates and the gossip keyring in dir/pki.
	nodes, err := localcluster.New(exe, dir, n, nodeFlags...)
	if err != nil {
		return nil, err
	}
	return &demoCluster{nodes: nodes, admin: nodes[0].Admin}, nil
}

// stopAll stops every node gracefully (SIGTERM, then SIGKILL after 15 s).
func (c *demoCluster) stopAll() {
	for _, d := range c.nodes {
		if d.Running() {
			_ = d.Stop(15 * time.Second)
		}
	}
}

func (c *demoCluster) node(id string) *localcluster.Node {
	for _, d := range c.nodes {
		if d.ID == id {
			return d
		}
	}
	return nil
}

// httpAddrs lists the nodes' HTTP addresses (each serves the dashboard).
func (c *demoCluster) httpAddrs() string {
	var a []string
	for _, d := range c.nodes {
		a = append(a, d.HTTP)
	}
	return strings.Join(a, ", ")
}

func (c *demoCluster) endpoints() []string {
	var eps []string
	for _, d := range c.nodes {
		eps = append(eps, d.GRPC)
	}
	return eps
}

// start starts every node and waits up to wait for a leader; it returns
// a client of every node holding the admin's certificate (the caller
// closes it) and the leader's id. The demo and `raftps dev` start their
// clusters with it.
func (c *demoCluster) start(ctx context.Context, wait time.Duration) (*client.Client, string, error) {
	for _, d := range c.nodes {
		if err := d.Start(); err != nil {
			return nil, "", err
		}
	}
	opts, err := localcluster.DialOptions(c.admin)
	if err != nil {
		return nil, "", err
	}
	cl, err := client.New(c.endpoints(), opts...)
	if err != nil {
		return nil, "", err
	}
	lctx, cancel := context.WithTimeout(ctx, wait)
	leader, err := waitLeader(lctx, cl)
	cancel()
	if err != nil {
		cl.Close()
		return nil, "", err
	}
	return cl, leader, nil
}

// waitLeader waits for a leader and returns its id.
func waitLeader(ctx context.Context, cl *client.Client) (string, error) {
	for {
		cctx, cancel := context.WithTimeout(ctx, time.Second)
		st, err := cl.Cluster.Status(cctx, &pb.StatusRequest{})
		cancel()
		if err == nil && st.Leader != "" {
			return st.Leader, nil
		}
		select {
		case <-ctx.Done():
			return "", fmt.Errorf("no leader: %w", ctx.Err())
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// faultRecord is one injected fault and how training took it.
type faultRecord struct {
	what string
	node string
	at   time.Time
	// stall is the longest time without a finished task in the 20 s after
	// the kill or until the next fault, whichever is first (the kill
	// itself counts as the start of the first gap).
	stall    time.Duration
	lastDone time.Time
	restored string
}

func newDemoCmd(g *globals) *cobra.Command {
	sf := &specFlags{}
	var (
		dataDir  string
		keep     bool
		noFaults bool
		leaseTTL time.Duration
	)
	c := &cobra.Command{
		Use:   "demo",
		Short: "train an MLP on Fashion-MNIST on a local 3-node cluster while killing nodes",
		Long: `Start a local 3-node cluster (child processes on loopback), train the MLP on the
shipped Fashion-MNIST with 2 pservers and 3 trainers in sync mode with
checkpoints; midway SIGKILL the node holding pserver slot 0, later the Raft
leader, restart each, and finish. Prints a summary and exits non-zero if the
accuracy misses its target or a fault was not survived.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			spec, err := sf.build(cmd)
			if err != nil {
				return err
			}
			if !cmd.Flags().Changed("name") {
				spec.Name = "demo-fashion-mlp"
			}
			// Demo defaults: frequent checkpoints (a restore loses at most 50
			// steps) and enough passes with a decaying rate for a stable 85%+.
			if !cmd.Flags().Changed("checkpoint-steps") {
				spec.Checkpoint.EverySteps = 50
			}
			if !cmd.Flags().Changed("passes") {
				spec.Passes = 5
			}
			if spec.Optimizer.LrDecay == 0 {
				spec.Optimizer.LrDecay = 0.002
			}
			return runDemo(cmd.Context(), g, spec, dataDir, keep, noFaults, leaseTTL)
		},
	}
	sf.register(c)
	c.Flags().StringVar(&dataDir, "data-dir", "", "where the nodes keep their data (default: a temporary directory, removed at the end)")
	c.Flags().BoolVar(&keep, "keep", false, "leave the cluster running after the summary (Ctrl-C stops it) and keep the data and logs of the nodes")
	c.Flags().BoolVar(&noFaults, "no-faults", false, "train without killing nodes (the baseline run)")
	// 3 s, not the node's default 5 s: on one machine's loopback the
	// keepalives do not need the margin, and a killed slot holder's slots
	// are served again ~2 s sooner (stalls 3.5-4.4 s instead of ~6.4 s).
	c.Flags().DurationVar(&leaseTTL, "pserver-lease-ttl", 3*time.Second, "every node's --pserver-lease-ttl: a killed node's slots are served elsewhere about 2/3 of it after its last keepalive")
	return c
}

func runDemo(ctx context.Context, g *globals, spec *pb.JobSpec, dataDir string, keep, noFaults bool, leaseTTL time.Duration) error {
	exe, err := os.Executable()
	if err != nil {
		return err
	}
	if dataDir == "" {
		if dataDir, err = os.MkdirTemp("", "raftps-demo-"); err != nil {
			return err
		}
		if !keep {
			defer os.RemoveAll(dataDir)
		}
	}
	w := g.err
	if err := os.MkdirAll(dataDir, 0o700); err != nil {
		return err
	}
	cluster, err := newDemoCluster(exe, dataDir, 3, "--pserver-lease-ttl", leaseTTL.String())
	if err != nil {
		return err
	}
	defer cluster.stopAll()
	cl, leader, err := cluster.start(ctx, 30*time.Second)
	if err != nil {
		return err
	}
	defer cl.Close()
	fmt.Fprintf(w, "started 3 nodes (logs in %s)\n", dataDir)
	fmt.Fprintf(w, "dashboard: http://%s/ (every node serves it: %s)\n", cluster.nodes[0].HTTP, cluster.httpAddrs())
	fmt.Fprintf(w, "mutual TLS: CA and certificates in %s (raftps --cacert %s --cert %s --key %s ...)\n",
		filepath.Dir(cluster.admin.CA), cluster.admin.CA, cluster.admin.Cert, cluster.admin.Key)
	fmt.Fprintf(w, "raft leader: %s\n", leader)

	var resp *pb.SubmitJobResponse
	if err := client.Retry(ctx, func(ctx context.Context) error {
		cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		resp, err = cl.Master.SubmitJob(cctx, &pb.SubmitJobRequest{Spec: spec})
		return err
	}); err != nil {
		return rpcError(err)
	}
	total := resp.Status.TotalTasks * int64(spec.Passes)
	fmt.Fprintf(w, "job %s: %s %v, %d pservers, %s, %d tasks x %d passes, checkpoint every %d steps\n",
		spec.Name, spec.Model.Name, spec.Model.Hidden, spec.NumPservers, spec.Mode, resp.Status.TotalTasks, spec.Passes, spec.Checkpoint.EverySteps)

	// Fault schedule: at 35% of the tasks kill the node serving pserver
	// slot 0; at 65% kill the Raft leader. Each is restarted 5 s later.
	var (
		mu       sync.Mutex
		done     int64
		faults   []*faultRecord
		pending  *faultRecord
		restarts sync.WaitGroup
	)
	inject := func(what string, pick func(context.Context) (string, error)) {
		cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		id, err := pick(cctx)
		cancel()
		if err != nil {
			fmt.Fprintf(w, "\nfault %q: %v\n", what, err)
			return
		}
		d := cluster.node(id)
		if d == nil {
			return
		}
		f := &faultRecord{what: what, node: id, at: time.Now()}
		d.Kill()
		mu.Lock()
		faults = append(faults, f)
		pending = f
		mu.Unlock()
		fmt.Fprintf(w, "\nfault: SIGKILL %s (%s)\n", id, what)
		restarts.Add(1)
		go func() {
			defer restarts.Done()
			time.Sleep(5 * time.Second)
			if err := d.Start(); err == nil {
				fmt.Fprintf(w, "\nrestarted %s with the same command line\n", id)
			}
		}()
	}
	slot0 := func(ctx context.Context) (string, error) {
		r, err := cl.Master.GetJob(ctx, &pb.GetJobRequest{Name: spec.Name})
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
	leaderOf := func(ctx context.Context) (string, error) { return waitLeader(ctx, cl) }
	var injected [2]bool
	onEvent := func(ev *pb.JobEvent) {
		mu.Lock()
		if ev.Type == pb.JobEvent_TASK_DONE {
			done++
			now := time.Now()
			for i, f := range faults {
				// A fault's window: 20 s, cut short by the next fault
				// (whose stall is its own).
				if now.Sub(f.at) > 20*time.Second || i+1 < len(faults) && now.After(faults[i+1].at) {
					continue
				}
				if f.lastDone.IsZero() {
					f.lastDone = f.at
				}
				if gap := now.Sub(f.lastDone); gap > f.stall {
					f.stall = gap
				}
				f.lastDone = now
			}
		}
		if ev.Type == pb.JobEvent_PSERVER_RESTORED && pending != nil && pending.restored == "" && time.Since(pending.at) < time.Minute {
			pending.restored = ev.Message
		}
		frac := float64(done) / float64(total)
		mu.Unlock()
		if noFaults {
			return
		}
		if !injected[0] && frac >= 0.35 {
			injected[0] = true
			go inject("node serving pserver slot 0", slot0)
		}
		if !injected[1] && frac >= 0.65 {
			injected[1] = true
			go inject("raft leader", leaderOf)
		}
	}
	res, err := follow(ctx, cl, spec.Name, w, onEvent)
	restarts.Wait()
	if err != nil {
		return err
	}
	printDemoSummary(g.out, res, faults, spec)
	if keep {
		// Leave the cluster up so a person can look at the dashboard.
		fmt.Fprintf(w, "\n--keep: the cluster stays up; dashboard at http://%s/ ; Ctrl-C stops it (data in %s)\n", cluster.nodes[0].HTTP, dataDir)
		<-ctx.Done()
	}
	if !noFaults && len(faults) < 2 {
		return &exitError{code: codeDemoFault, err: fmt.Errorf("only %d of 2 faults were injected", len(faults))}
	}
	for _, f := range faults {
		if f.stall == 0 {
			return &exitError{code: codeDemoFault, err: fmt.Errorf("training did not resume after %s", f.what)}
		}
	}
	return reportResult(io.Discard, res, spec.TargetAccuracy)
}

func printDemoSummary(w io.Writer, res *followResult, faults []*faultRecord, spec *pb.JobSpec) {
	st := res.Status
	fmt.Fprintf(w, "\n==== raftps demo summary ====\n")
	fmt.Fprintf(w, "job:              %s (%s)\n", st.Name, jobState(st.State))
	fmt.Fprintf(w, "model:            %s %v, %s, %d pservers, %d trainers max\n", spec.Model.Name, spec.Model.Hidden, spec.Mode, spec.NumPservers, 3)
	if acc, ok := res.FinalAccuracy(); ok {
		fmt.Fprintf(w, "test accuracy:    %.2f%% (target %.2f%%)\n", 100*acc, 100*spec.TargetAccuracy)
	}
	for _, m := range st.Metrics {
		fmt.Fprintf(w, "  pass %d:         test accuracy %.2f%%, test loss %.4f, train loss %.4f\n", m.Pass, 100*m.TestAccuracy, m.TestLoss, m.TrainLoss)
	}
	fmt.Fprintf(w, "wall time:        %v, %.0f examples/s\n", res.Elapsed.Round(time.Second), float64(res.Examples)/res.Elapsed.Seconds())
	fmt.Fprintf(w, "tasks:            %d done, %d failed, %d requeued, %d timeouts\n", st.Done, st.Failed, st.Requeued, st.Timeouts)
	for _, f := range faults {
		fmt.Fprintf(w, "fault:            SIGKILL %s (%s): training stood still %.2fs (longest gap between finished tasks)\n", f.node, f.what, f.stall.Seconds())
		if f.restored != "" {
			fmt.Fprintf(w, "  restored:       %s\n", f.restored)
		}
	}
	v, md5s := res.LastCheckpoint()
	if len(md5s) == 0 {
		why := ""
		if n := spec.GetCheckpoint().GetEverySteps(); n > 0 {
			why = fmt.Sprintf(" (the job ended before step %d, the first checkpoint)", n)
		}
		fmt.Fprintf(w, "last checkpoint:  none%s\n", why)
		return
	}
	fmt.Fprintf(w, "last checkpoint:  version %d (epoch %d, step %d), md5 %s\n", v, v/schema.EpochStride, v%schema.EpochStride, strings.Join(md5s, ","))
}
