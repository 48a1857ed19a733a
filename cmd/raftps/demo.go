package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	pb "github.com/raftps/raftps/api/raftpspb"
	"github.com/raftps/raftps/raftstore/client"
)

func init() { extraCommands = append(extraCommands, newDemoCmd) }

// demoNode is one child `raftps node` process of the demo.
type demoNode struct {
	id, dir, grpc, log string
	args               []string
	cmd                *exec.Cmd
	done               chan struct{}
}

// demoCluster is a local 3-node cluster of child processes on loopback.
type demoCluster struct {
	exe   string
	nodes []*demoNode
	mu    sync.Mutex
}

func freeLoopbackPorts(n int) ([]int, error) {
	var ports []int
	var ls []net.Listener
	defer func() {
		for _, l := range ls {
			l.Close()
		}
	}()
	for len(ports) < n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		p := l.Addr().(*net.TCPAddr).Port
		if u, err := net.ListenPacket("udp", fmt.Sprintf("127.0.0.1:%d", p)); err == nil {
			u.Close()
			ports = append(ports, p)
		}
		ls = append(ls, l)
	}
	return ports, nil
}

func newDemoCluster(exe, dir string, n int) (*demoCluster, error) {
	ports, err := freeLoopbackPorts(4 * n)
	if err != nil {
		return nil, err
	}
	a := func(p int) string { return fmt.Sprintf("127.0.0.1:%d", p) }
	c := &demoCluster{exe: exe}
	var gossipAddrs []string
	for i := 0; i < n; i++ {
		gossipAddrs = append(gossipAddrs, a(ports[4*i+2]))
	}
	for i := 0; i < n; i++ {
		id := fmt.Sprintf("n%d", i+1)
		var join []string
		for j, g := range gossipAddrs {
			if j != i {
				join = append(join, g)
			}
		}
		d := &demoNode{id: id, dir: filepath.Join(dir, id), grpc: a(ports[4*i]), log: filepath.Join(dir, id+".log")}
		d.args = []string{"node", "--id", id, "--data-dir", d.dir, "--grpc-addr", d.grpc, "--raft-addr", a(ports[4*i+1]),
			"--gossip-addr", gossipAddrs[i], "--http-addr", a(ports[4*i+3]), "--join", strings.Join(join, ","),
			"--bootstrap-expect", fmt.Sprint(n)}
		c.nodes = append(c.nodes, d)
	}
	return c, nil
}

func (c *demoCluster) start(d *demoNode) error {
	f, err := os.OpenFile(d.log, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	cmd := exec.Command(c.exe, d.args...)
	cmd.Stdout, cmd.Stderr = f, f
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		f.Close()
		return fmt.Errorf("start %s: %w", d.id, err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); f.Close(); close(done) }()
	c.mu.Lock()
	d.cmd, d.done = cmd, done
	c.mu.Unlock()
	return nil
}

func (c *demoCluster) kill(d *demoNode) {
	c.mu.Lock()
	cmd, done := d.cmd, d.done
	c.mu.Unlock()
	if cmd == nil {
		return
	}
	_ = cmd.Process.Kill()
	<-done
}

func (c *demoCluster) stopAll() {
	for _, d := range c.nodes {
		c.mu.Lock()
		cmd, done := d.cmd, d.done
		c.mu.Unlock()
		if cmd == nil {
			continue
		}
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-done:
		case <-time.After(15 * time.Second):
			_ = cmd.Process.Kill()
			<-done
		}
	}
}

func (c *demoCluster) node(id string) *demoNode {
	for _, d := range c.nodes {
		if d.id == id {
			return d
		}
	}
	return nil
}

func (c *demoCluster) endpoints() []string {
	var eps []string
	for _, d := range c.nodes {
		eps = append(eps, d.grpc)
	}
	return eps
}

// leader waits for a leader and returns its id.
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
	// the kill (the kill itself counts as the start of the first gap).
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
			return runDemo(cmd.Context(), g, spec, dataDir, keep, noFaults)
		},
	}
	sf.register(c)
	c.Flags().StringVar(&dataDir, "data-dir", "", "where the nodes keep their data (default: a temporary directory, removed at the end)")
	c.Flags().BoolVar(&keep, "keep", false, "keep the data and logs of the nodes")
	c.Flags().BoolVar(&noFaults, "no-faults", false, "train without killing nodes (the baseline run)")
	return c
}

func runDemo(ctx context.Context, g *globals, spec *pb.JobSpec, dataDir string, keep, noFaults bool) error {
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
	if err := os.MkdirAll(dataDir, 0o755); err != nil {
		return err
	}
	cluster, err := newDemoCluster(exe, dataDir, 3)
	if err != nil {
		return err
	}
	defer cluster.stopAll()
	for _, d := range cluster.nodes {
		if err := cluster.start(d); err != nil {
			return err
		}
	}
	fmt.Fprintf(w, "started 3 nodes (logs in %s)\n", dataDir)
	cl, err := client.New(cluster.endpoints())
	if err != nil {
		return err
	}
	defer cl.Close()
	lctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	leader, err := waitLeader(lctx, cl)
	cancel()
	if err != nil {
		return err
	}
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
		cluster.kill(d)
		mu.Lock()
		faults = append(faults, f)
		pending = f
		mu.Unlock()
		fmt.Fprintf(w, "\nfault: SIGKILL %s (%s)\n", id, what)
		restarts.Add(1)
		go func() {
			defer restarts.Done()
			time.Sleep(5 * time.Second)
			if err := cluster.start(d); err == nil {
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
			for _, f := range faults {
				if now.Sub(f.at) > 20*time.Second {
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
	if !noFaults && len(faults) < 2 {
		return &exitError{code: 4, err: fmt.Errorf("only %d of 2 faults were injected", len(faults))}
	}
	for _, f := range faults {
		if f.stall == 0 {
			return &exitError{code: 4, err: fmt.Errorf("training did not resume after %s", f.what)}
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
	fmt.Fprintf(w, "last checkpoint:  version %d, md5 %s\n", v, strings.Join(md5s, ","))
}
