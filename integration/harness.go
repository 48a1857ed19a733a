// Package integration holds the tests that start real `raftps` processes on
// loopback: the cluster end-to-end tests here, and the Jepsen-style fault
// suite in integration/jepsen.
package integration

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	pb "github.com/raftps/raftps/api/raftpspb"
	"github.com/raftps/raftps/raftstore/client"
)

// BuildBinary builds cmd/raftps into dir and returns its path.
func BuildBinary(dir string) (string, error) {
	root, err := moduleRoot()
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

func moduleRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", fmt.Errorf("go.mod not found above %s", dir)
		}
		dir = parent
	}
}

// FreePorts returns n distinct free TCP ports on 127.0.0.1 that are also
// free for UDP (gossip uses both).
func FreePorts(n int) ([]int, error) {
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
		u, err := net.ListenPacket("udp", fmt.Sprintf("127.0.0.1:%d", p))
		if err != nil {
			l.Close()
			continue
		}
		u.Close()
		ls = append(ls, l)
		ports = append(ports, p)
	}
	return ports, nil
}

// Proc is one `raftps node` process.
type Proc struct {
	ID                       string
	DataDir                  string
	GRPC, Raft, Gossip, HTTP string
	Args                     []string
	LogPath                  string
	mu                       sync.Mutex
	cmd                      *exec.Cmd
	done                     chan struct{}
	exitErr                  error
}

// Cluster is a set of raftps processes on loopback.
type Cluster struct {
	T     testing.TB
	Bin   string
	Dir   string
	Procs []*Proc
	// Extra flags for every node.
	Extra []string
}

// NewCluster prepares (but does not start) n nodes with --join to all
// others' gossip addresses and --bootstrap-expect n.
func NewCluster(t testing.TB, bin string, n int, extra ...string) *Cluster {
	t.Helper()
	c := &Cluster{T: t, Bin: bin, Dir: t.TempDir(), Extra: extra}
	for i := 0; i < n; i++ {
		c.AddProc()
	}
	for _, p := range c.Procs {
		p.Args = c.nodeArgs(p, n)
	}
	t.Cleanup(c.KillAll)
	return c
}

// AddProc adds a node (not started) that joins the existing ones.
func (c *Cluster) AddProc() *Proc {
	ports, err := FreePorts(4)
	if err != nil {
		c.T.Fatalf("free ports: %v", err)
	}
	id := fmt.Sprintf("n%d", len(c.Procs)+1)
	a := func(p int) string { return fmt.Sprintf("127.0.0.1:%d", p) }
	p := &Proc{ID: id, DataDir: filepath.Join(c.Dir, id), GRPC: a(ports[0]), Raft: a(ports[1]), Gossip: a(ports[2]), HTTP: a(ports[3]),
		LogPath: filepath.Join(c.Dir, id+".log")}
	c.Procs = append(c.Procs, p)
	p.Args = c.nodeArgs(p, 0)
	return p
}

func (c *Cluster) nodeArgs(p *Proc, expect int) []string {
	var join []string
	for _, o := range c.Procs {
		if o != p {
			join = append(join, o.Gossip)
		}
	}
	args := []string{"node", "--id", p.ID, "--data-dir", p.DataDir, "--grpc-addr", p.GRPC, "--raft-addr", p.Raft,
		"--gossip-addr", p.Gossip, "--http-addr", p.HTTP, "--log-level", "info"}
	if len(join) > 0 {
		args = append(args, "--join", strings.Join(join, ","))
	}
	if expect > 0 {
		args = append(args, "--bootstrap-expect", fmt.Sprint(expect))
	}
	return append(args, c.Extra...)
}

// Start starts p with its command line (the same on restart).
func (c *Cluster) Start(p *Proc) {
	c.T.Helper()
	p.mu.Lock()
	defer p.mu.Unlock()
	logf, err := os.OpenFile(p.LogPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		c.T.Fatal(err)
	}
	cmd := exec.Command(c.Bin, p.Args...)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		c.T.Fatalf("start %s: %v", p.ID, err)
	}
	p.cmd = cmd
	p.done = make(chan struct{})
	done := p.done
	go func() {
		err := cmd.Wait()
		logf.Close()
		p.mu.Lock()
		p.exitErr = err
		p.mu.Unlock()
		close(done)
	}()
}

// StartAll starts every node.
func (c *Cluster) StartAll() {
	for _, p := range c.Procs {
		c.Start(p)
	}
}

// Kill sends SIGKILL to p and waits for it to exit.
func (c *Cluster) Kill(p *Proc) { c.signal(p, syscall.SIGKILL, 10*time.Second) }

// Pause freezes p (SIGSTOP); Resume thaws it (SIGCONT).
func (c *Cluster) Pause(p *Proc)  { c.sig(p, syscall.SIGSTOP) }
func (c *Cluster) Resume(p *Proc) { c.sig(p, syscall.SIGCONT) }

func (c *Cluster) sig(p *Proc, s syscall.Signal) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd != nil && p.cmd.Process != nil {
		_ = p.cmd.Process.Signal(s)
	}
}

// Stop sends SIGTERM to p and waits up to 20 s for a graceful exit.
func (c *Cluster) Stop(p *Proc) error {
	c.signal(p, syscall.SIGTERM, 20*time.Second)
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.exitErr
}

func (c *Cluster) signal(p *Proc, sig syscall.Signal, wait time.Duration) {
	p.mu.Lock()
	cmd, done := p.cmd, p.done
	p.mu.Unlock()
	if cmd == nil || cmd.Process == nil {
		return
	}
	_ = cmd.Process.Signal(sig)
	select {
	case <-done:
	case <-time.After(wait):
		_ = cmd.Process.Kill()
		<-done
	}
}

// Running reports whether p's process is alive.
func (p *Proc) Running() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.done == nil {
		return false
	}
	select {
	case <-p.done:
		return false
	default:
		return true
	}
}

// Exited returns the channel closed when p's process exits.
func (p *Proc) Exited() <-chan struct{} {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.done
}

// KillAll kills every running node; on a failed test it prints the tails of the logs.
func (c *Cluster) KillAll() {
	for _, p := range c.Procs {
		if p.Running() {
			c.Kill(p)
		}
	}
	if c.T.Failed() {
		for _, p := range c.Procs {
			b, _ := os.ReadFile(p.LogPath)
			if len(b) > 6000 {
				b = b[len(b)-6000:]
			}
			c.T.Logf("---- log of %s (tail) ----\n%s", p.ID, b)
		}
	}
}

// Client returns a client of the given nodes (all running ones if none).
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
	cl, err := client.New(eps)
	if err != nil {
		c.T.Fatal(err)
	}
	c.T.Cleanup(func() { cl.Close() })
	return cl
}

// CLI runs the raftps binary with args against p's endpoint; returns stdout.
func (c *Cluster) CLI(ctx context.Context, p *Proc, args ...string) (string, string, error) {
	all := append([]string{"--endpoints", p.GRPC}, args...)
	cmd := exec.CommandContext(ctx, c.Bin, all...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	return out.String(), errb.String(), err
}

// Leader waits until the running nodes agree on a leader and returns it.
func (c *Cluster) Leader(ctx context.Context) (*Proc, error) {
	for {
		leaders := map[string]int{}
		running := 0
		for _, p := range c.Procs {
			if !p.Running() {
				continue
			}
			running++
			cl, err := client.New([]string{p.GRPC})
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
