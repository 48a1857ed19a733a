package integration

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc"

	pb "github.com/raftps/raftps/api/raftpspb"
	"github.com/raftps/raftps/internal/testing/localcluster"
	"github.com/raftps/raftps/internal/testing/testutil"
	"github.com/raftps/raftps/raftstore/client"
	"github.com/raftps/raftps/security"
)

// BuildBinary builds cmd/raftps into dir and returns its path.
func BuildBinary(dir string) (string, error) {
	root, err := testutil.ModuleRoot()
	if err != nil {
		return "", err
	}
	bin := filepath.Join(dir, "raftps")
	cmd := exec.Command("go", "build", "-o", bin, "./cmd/raftps")
	cmd.Dir = root
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build ./cmd/raftps: %v\n%s", err, out)
	}
	return bin, nil
}

// Proc is one `raftps node` process.
type Proc = localcluster.Node

// Cluster is a set of raftps processes on loopback, for tests: failures
// to start are fatal, and a failed test prints every node's log tail.
type Cluster struct {
	T     testing.TB
	Bin   string
	Dir   string
	Procs []*Proc
	Extra []string // flags for every node
}

// NewCluster prepares (but does not start) n nodes with --join to all
// others' gossip addresses and --bootstrap-expect n, on mutual TLS with
// encrypted gossip (localcluster.New's PKI in <Dir>/pki) unless extra
// holds --insecure. Client, CLI and Leader use the admin's certificate.
func NewCluster(t testing.TB, bin string, n int, extra ...string) *Cluster {
	t.Helper()
	c := &Cluster{T: t, Bin: bin, Dir: t.TempDir(), Extra: extra}
	procs, err := localcluster.New(bin, c.Dir, n, extra...)
	if err != nil {
		t.Fatal(err)
	}
	c.Procs = procs
	t.Cleanup(c.KillAll)
	return c
}

// AddProc adds a node (not started) that joins the existing ones.
func (c *Cluster) AddProc() *Proc {
	p, err := localcluster.Add(c.Bin, c.Dir, c.Procs, c.Extra...)
	if err != nil {
		c.T.Fatalf("add node: %v", err)
	}
	c.Procs = append(c.Procs, p)
	return p
}

// Start starts p with its command line (the same on restart).
func (c *Cluster) Start(p *Proc) {
	c.T.Helper()
	if err := p.Start(); err != nil {
		c.T.Fatal(err)
	}
}

// StartAll starts every node.
func (c *Cluster) StartAll() {
	for _, p := range c.Procs {
		c.Start(p)
	}
}

// Kill sends SIGKILL to p and waits for it to exit.
func (c *Cluster) Kill(p *Proc) { p.Kill() }

// Stop sends SIGTERM to p and waits up to 20 s for a graceful exit.
func (c *Cluster) Stop(p *Proc) error { return p.Stop(20 * time.Second) }

// Pause freezes p (SIGSTOP); Resume thaws it (SIGCONT).
func (c *Cluster) Pause(p *Proc)  { p.Signal(syscall.SIGSTOP) }
func (c *Cluster) Resume(p *Proc) { p.Signal(syscall.SIGCONT) }

// KillAll kills every running node. On a failed test it first asks each
// running node for its goroutines (SIGQUIT: the Go runtime prints every
// goroutine's stack and exits), then prints each node's log tail without
// Raft's per-peer retry lines (a leader repeats them every few hundred
// milliseconds for a dead peer and would fill the tail), and the stacks of
// the node's trainer and pserver goroutines: where they wait is what a
// stalled job needs explained.
func (c *Cluster) KillAll() {
	failed := c.T.Failed()
	for _, p := range c.Procs {
		if failed && p.Running() {
			p.Signal(syscall.SIGQUIT)
		}
	}
	for _, p := range c.Procs {
		if failed {
			for end := time.Now().Add(5 * time.Second); p.Running() && time.Now().Before(end); {
				time.Sleep(50 * time.Millisecond)
			}
		}
		if p.Running() {
			p.Kill()
		}
	}
	if !failed {
		return
	}
	for _, p := range c.Procs {
		b, _ := os.ReadFile(p.LogPath)
		logPart, dump := string(b), ""
		if i := strings.LastIndex(logPart, "SIGQUIT: quit"); i >= 0 {
			logPart, dump = logPart[:i], logPart[i:]
		}
		c.T.Logf("---- log of %s (tail) ----\n%s", p.ID, lastBytes(dropRaftRetries(logPart), 8000))
		if dump != "" {
			c.T.Logf("---- %s: trainer and pserver goroutines ----\n%s", p.ID, firstBytes(goroutinesIn(dump, "/trainer", "/pserver"), 12000))
		}
	}
}

// routineWarnings are warnings a healthy cluster under faults logs often
// (a follower catching up, a checkpoint writer skipping a version, gossip
// refuting a suspicion): Warnings leaves them out.
var routineWarnings = []string{
	`msg="failed to get previous log"`,
	`msg="appendEntries rejected, sending older logs"`,
	`msg="checkpoint writer lags: skipping a version"`,
	`msg="Refuting a suspect message`,
}

// Warnings returns, for every node, its last n log lines at level WARN or
// ERROR, cut to 300 bytes (Raft's per-peer retry lines and routineWarnings
// left out): a compact account of what went wrong, which a failing test
// prints before the long log tails (CI shows the head and the tail of a
// long output).
func (c *Cluster) Warnings(n int) string {
	var b strings.Builder
	for _, p := range c.Procs {
		raw, _ := os.ReadFile(p.LogPath)
		var lines []string
		for _, line := range strings.Split(dropRaftRetries(string(raw)), "\n") {
			if !strings.Contains(line, "level=WARN") && !strings.Contains(line, "level=ERROR") {
				continue
			}
			if !slices.ContainsFunc(routineWarnings, func(r string) bool { return strings.Contains(line, r) }) {
				lines = append(lines, line)
			}
		}
		fmt.Fprintf(&b, "-- %s (running %v): %d warnings/errors, the last %d:\n", p.ID, p.Running(), len(lines), min(n, len(lines)))
		for _, line := range lines[max(0, len(lines)-n):] {
			b.WriteString(firstBytes(line, 300))
			b.WriteString("\n")
		}
	}
	return b.String()
}

// dropRaftRetries drops hashicorp/raft's per-peer retry errors from a log
// and says how many there were.
func dropRaftRetries(log string) string {
	var keep []string
	dropped := 0
	for _, line := range strings.Split(log, "\n") {
		if strings.Contains(line, `msg="failed to heartbeat to"`) || strings.Contains(line, `msg="failed to appendEntries to"`) {
			dropped++
			continue
		}
		keep = append(keep, line)
	}
	if dropped > 0 {
		keep = append(keep, fmt.Sprintf("(%d raft heartbeat/appendEntries retry lines left out)", dropped))
	}
	return strings.Join(keep, "\n")
}

// goroutinesIn returns the goroutine stacks of a Go traceback that
// mention the first of the given substrings, then those that mention the
// second, and so on.
func goroutinesIn(dump string, subs ...string) string {
	gs := strings.Split(dump, "\n\n")
	var keep []string
	taken := make([]bool, len(gs))
	for _, s := range subs {
		for i, g := range gs {
			if !taken[i] && strings.Contains(g, "github.com/raftps/raftps"+s) {
				taken[i] = true
				keep = append(keep, g)
			}
		}
	}
	return strings.Join(keep, "\n\n")
}

// firstBytes is the first n bytes of s.
func firstBytes(s string, n int) string {
	if len(s) > n {
		return s[:n]
	}
	return s
}

// lastBytes is the last n bytes of s.
func lastBytes(s string, n int) string {
	if len(s) > n {
		return s[len(s)-n:]
	}
	return s
}

// Admin is the admin client's files of the cluster (localcluster's PKI);
// zero on --insecure.
func (c *Cluster) Admin() security.Files { return c.Procs[0].Admin }

// DialOptions are the admin's gRPC dial options (localcluster.DialOptions).
func (c *Cluster) DialOptions() []grpc.DialOption {
	c.T.Helper()
	opts, err := localcluster.DialOptions(c.Admin())
	if err != nil {
		c.T.Fatal(err)
	}
	return opts
}

// Client returns an admin client of the given nodes (all running ones if none).
func (c *Cluster) Client(ps ...*Proc) *client.Client {
	c.T.Helper()
	if len(ps) == 0 {
		for _, p := range c.Procs {
			if p.Running() {
				ps = append(ps, p)
			}
		}
	}
	var eps []string
	for _, p := range ps {
		eps = append(eps, p.GRPC)
	}
	cl, err := client.New(eps, c.DialOptions()...)
	if err != nil {
		c.T.Fatal(err)
	}
	c.T.Cleanup(func() { cl.Close() })
	return cl
}

// CLI runs the raftps binary with args against p's endpoint as the admin
// (--cacert, --cert, --key; none on --insecure); returns stdout and stderr.
func (c *Cluster) CLI(ctx context.Context, p *Proc, args ...string) (string, string, error) {
	all := append(append([]string{"--endpoints", p.GRPC}, localcluster.CLIFlags(c.Admin())...), args...)
	cmd := exec.CommandContext(ctx, c.Bin, all...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	return out.String(), errb.String(), err
}

// Leader waits until the running nodes agree on a leader and returns it.
func (c *Cluster) Leader(ctx context.Context) (*Proc, error) {
	opts := c.DialOptions()
	for {
		leaders := map[string]int{}
		running := 0
		for _, p := range c.Procs {
			if !p.Running() {
				continue
			}
			running++
			cl, err := client.New([]string{p.GRPC}, opts...)
			if err != nil {
				continue
			}
			cctx, cancel := context.WithTimeout(ctx, time.Second)
			st, err := cl.Cluster.Status(cctx, &pb.StatusRequest{})
			cancel()
			cl.Close()
			if err == nil && st.Leader != "" {
				leaders[st.Leader]++
			}
		}
		for id, n := range leaders {
			if n == running {
				for _, p := range c.Procs {
					if p.ID == id && p.Running() {
						return p, nil
					}
				}
			}
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("no agreed leader: %v: %w", leaders, ctx.Err())
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// Proc returns the node with id.
func (c *Cluster) Proc(id string) *Proc {
	for _, p := range c.Procs {
		if p.ID == id {
			return p
		}
	}
	return nil
}
