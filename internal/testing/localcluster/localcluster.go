package localcluster

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/raftps/raftps/security"
)

// FreePorts returns n distinct ports on 127.0.0.1 that are free for TCP
// and UDP (gossip uses both), for nodes to bind a moment later. Between
// this check and the node's bind another process can take a port, and
// the node then fails (address already in use). Two measures keep that
// from happening:
//   - the ports are taken at random below the kernel's ephemeral range
//     (ip_local_port_range) where there is one: the kernel never hands
//     those out as the source port of an outgoing connection;
//   - each port is reserved (reserve) across the processes on this
//     machine that call FreePorts, so two test processes starting
//     clusters at once (go test runs packages in parallel) never hand
//     out the same port, each having found it free in turn. With four
//     processes starting clusters at once that happened once in 40 runs
//     of TestTrainingUnderFaults before the reservation.
func FreePorts(n int) ([]int, error) {
	var ports []int
	var held []net.Listener
	defer func() {
		for _, l := range held {
			l.Close()
		}
	}()
	lo, hi := belowEphemeral()
	for len(ports) < n {
		var l net.Listener
		for try := 0; l == nil && hi > lo && try < 64; try++ {
			l, _ = net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", lo+rand.IntN(hi-lo)))
		}
		if l == nil { // no such range here, or all tries taken: the kernel's choice
			var err error
			if l, err = net.Listen("tcp", "127.0.0.1:0"); err != nil {
				return nil, err
			}
		}
		held = append(held, l) // held until the end: not tried twice
		p := l.Addr().(*net.TCPAddr).Port
		if !reserve(p) {
			continue
		}
		if u, err := net.ListenPacket("udp", fmt.Sprintf("127.0.0.1:%d", p)); err == nil {
			u.Close()
			ports = append(ports, p)
		}
	}
	return ports, nil
}

// portDir holds FreePorts' reservations, an empty file per port.
var portDir = filepath.Join(os.TempDir(), "raftps-ports")

// portHold is how long a reservation keeps other processes off a port:
// far longer than a node takes to bind its ports after FreePorts.
const portHold = 10 * time.Minute

// reserve claims port p for this process: false if another process (or
// this one) reserved it less than portHold ago. A reservation older than
// that is stale and taken over. If reservations cannot be made at all
// (portDir not writable), every port counts as reserved.
func reserve(p int) bool {
	if err := os.MkdirAll(portDir, 0o777); err != nil {
		return true
	}
	f := filepath.Join(portDir, strconv.Itoa(p))
	if st, err := os.Lstat(f); err == nil && time.Since(st.ModTime()) > portHold {
		_ = os.Remove(f)
	}
	fd, err := os.OpenFile(f, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o666)
	if errors.Is(err, fs.ErrExist) {
		return false
	}
	if err == nil {
		fd.Close()
	}
	return true
}

// minPort is the lowest port FreePorts takes (below it are the ports
// services commonly listen on).
const minPort = 10000

// belowEphemeral returns [minPort, the first port of the kernel's
// ephemeral range), or an empty range if that cannot be read or leaves
// fewer than 1000 ports.
func belowEphemeral() (lo, hi int) {
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err != nil {
		return 0, 0
	}
	f := strings.Fields(string(b))
	if len(f) != 2 {
		return 0, 0
	}
	first, err := strconv.Atoi(f[0])
	if err != nil || first-minPort < 1000 {
		return 0, 0
	}
	return minPort, first
}

// Node is one `raftps node` child process.
type Node struct {
	ID, DataDir, LogPath     string
	GRPC, Raft, Gossip, HTTP string // host:port
	// Peer and PServer are the node-to-node and pserver ports (--peer-addr,
	// --pserver-addr), chosen here too: left to the node they would be
	// ephemeral, and the kernel could hand one out that is already chosen
	// for a node not started yet (its bind then fails: address in use).
	Peer, PServer string
	Bin           string
	// Args is the command line after the binary (the same on every start).
	Args []string
	// TLS is the node's own files (--tls-*) and Admin the admin client's
	// files of its cluster; both zero when the node runs --insecure.
	TLS, Admin security.Files
	// Keyring is the node's gossip keyring file ("" when gossip is in
	// the clear).
	Keyring string

	mu      sync.Mutex
	cmd     *exec.Cmd
	done    chan struct{}
	exitErr error
}

// freePorts is FreePorts (a test replaces it).
var freePorts = FreePorts

// portsPerNode is how many ports a node listens on (Node.Addrs).
const portsPerNode = 6

// Addrs returns every address the node listens on.
func (n *Node) Addrs() []string {
	return []string{n.GRPC, n.Raft, n.Gossip, n.HTTP, n.Peer, n.PServer}
}

// nodePorts returns n nodes' portsPerNode ports each, all distinct and none
// in use by taken: one FreePorts call for them all (ports from separate
// calls can repeat, since each call releases its own before the next, and
// a node whose gossip port is another's Raft port cannot start), retried
// while it returns one of taken.
func nodePorts(n int, taken []*Node) ([][]int, error) {
	used := map[string]bool{}
	for _, t := range taken {
		for _, a := range t.Addrs() {
			used[a] = true
		}
	}
	for attempt := 0; ; attempt++ {
		ports, err := freePorts(portsPerNode * n)
		if err != nil {
			return nil, err
		}
		if !slices.ContainsFunc(ports, func(p int) bool { return used[fmt.Sprintf("127.0.0.1:%d", p)] }) {
			out := make([][]int, n)
			for i := range out {
				out[i] = ports[portsPerNode*i : portsPerNode*(i+1)]
			}
			return out, nil
		}
		if attempt == 20 {
			return nil, fmt.Errorf("localcluster: no free ports apart from the cluster's after %d tries", attempt+1)
		}
	}
}

func newNode(bin, dir, id string, ports []int) *Node {
	a := func(p int) string { return fmt.Sprintf("127.0.0.1:%d", p) }
	return &Node{ID: id, Bin: bin, DataDir: filepath.Join(dir, id), LogPath: filepath.Join(dir, id+".log"),
		GRPC: a(ports[0]), Raft: a(ports[1]), Gossip: a(ports[2]), HTTP: a(ports[3]), Peer: a(ports[4]), PServer: a(ports[5])}
}

func (n *Node) setArgs(others []*Node, expect int, extra []string, pki *PKI) error {
	var join []string
	for _, o := range others {
		if o != n {
			join = append(join, o.Gossip)
		}
	}
	n.Args = []string{"node", "--id", n.ID, "--data-dir", n.DataDir, "--grpc-addr", n.GRPC, "--raft-addr", n.Raft,
		"--gossip-addr", n.Gossip, "--http-addr", n.HTTP, "--peer-addr", n.Peer, "--pserver-addr", n.PServer}
	if len(join) > 0 {
		n.Args = append(n.Args, "--join", strings.Join(join, ","))
	}
	if expect > 0 {
		n.Args = append(n.Args, "--bootstrap-expect", fmt.Sprint(expect))
	}
	if root := DatasetRoot(); root != "" {
		n.Args = append(n.Args, "--dataset-root", root) // jobs name datasets/fashion-mnist
	}
	if pki != nil {
		keyring := filepath.Join(filepath.Dir(n.DataDir), n.ID+".keyring")
		files, err := pki.IssueNode(n.ID)
		if err != nil {
			return err
		}
		if err := security.SaveKeyringFile(keyring, pki.Gossip); err != nil {
			return err
		}
		n.Args = append(n.Args, tlsFlags(files)...)
		n.Args = append(n.Args, "--gossip-keyring-file", keyring)
		n.TLS, n.Admin, n.Keyring = files, pki.Admin, keyring
	}
	n.Args = append(n.Args, extra...)
	return nil
}

// plaintext reports whether extra asks for a plaintext cluster.
func plaintext(extra []string) bool { return slices.Contains(extra, "--insecure") }

// New prepares (does not start) n nodes n1..nN in dir that join each other
// with --bootstrap-expect n; extra flags go to every node. Unless extra
// holds --insecure, it makes a PKI in <dir>/pki (NewPKI) and gives every
// node mutual TLS and an encrypted gossip keyring (see the package doc).
func New(bin, dir string, n int, extra ...string) ([]*Node, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	var pki *PKI
	if !plaintext(extra) {
		var err error
		if pki, err = NewPKI(filepath.Join(dir, "pki")); err != nil {
			return nil, err
		}
	}
	ports, err := nodePorts(n, nil)
	if err != nil {
		return nil, err
	}
	nodes := make([]*Node, n)
	for i := range nodes {
		nodes[i] = newNode(bin, dir, fmt.Sprintf("n%d", i+1), ports[i])
	}
	for _, nd := range nodes {
		if err := nd.setArgs(nodes, n, extra, pki); err != nil {
			return nil, err
		}
	}
	return nodes, nil
}

// Add prepares a node n<len(existing)+1> that joins the existing ones
// (without --bootstrap-expect: the leader adds it). Unless extra holds
// --insecure, its certificate is issued by the PKI New made in <dir>/pki,
// and its keyring is a copy of the first existing node's current one
// (keys rotated with `raftps keyring` included).
func Add(bin, dir string, existing []*Node, extra ...string) (*Node, error) {
	ports, err := nodePorts(1, existing)
	if err != nil {
		return nil, err
	}
	nd := newNode(bin, dir, fmt.Sprintf("n%d", len(existing)+1), ports[0])
	var pki *PKI
	if !plaintext(extra) {
		if pki, err = LoadPKI(filepath.Join(dir, "pki")); err != nil {
			return nil, fmt.Errorf("localcluster: add to a cluster without a PKI (add --insecure to a plaintext one): %w", err)
		}
		if len(existing) > 0 && existing[0].Keyring != "" {
			if pki.Gossip, err = security.LoadKeyringFile(existing[0].Keyring); err != nil {
				return nil, err
			}
		}
	}
	if err := nd.setArgs(existing, 0, extra, pki); err != nil {
		return nil, err
	}
	return nd, nil
}

// Start starts the process with its command line, logging to LogPath.
func (n *Node) Start() error {
	n.mu.Lock()
	defer n.mu.Unlock()
	logf, err := os.OpenFile(n.LogPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	cmd := exec.Command(n.Bin, n.Args...)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		logf.Close()
		return fmt.Errorf("start %s: %w", n.ID, err)
	}
	done := make(chan struct{})
	n.cmd, n.done, n.exitErr = cmd, done, nil
	go func() {
		err := cmd.Wait()
		logf.Close()
		n.mu.Lock()
		n.exitErr = err
		n.mu.Unlock()
		close(done)
	}()
	return nil
}

// Signal sends sig to the process (if started).
func (n *Node) Signal(sig syscall.Signal) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.cmd != nil && n.cmd.Process != nil {
		_ = n.cmd.Process.Signal(sig)
	}
}

// Kill sends SIGKILL and waits for the exit.
func (n *Node) Kill() { n.stop(syscall.SIGKILL, 10*time.Second) }

// Stop sends SIGTERM, waits up to wait for a graceful exit (then kills),
// and returns the process's exit error.
func (n *Node) Stop(wait time.Duration) error {
	n.stop(syscall.SIGTERM, wait)
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.exitErr
}

func (n *Node) stop(sig syscall.Signal, wait time.Duration) {
	n.mu.Lock()
	cmd, done := n.cmd, n.done
	n.mu.Unlock()
	if cmd == nil {
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

// Pid is the current process's id (0 before Start).
func (n *Node) Pid() int {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.cmd == nil || n.cmd.Process == nil {
		return 0
	}
	return n.cmd.Process.Pid
}

// ExitErr is the exit error of the last process that exited (nil for a
// clean exit or while it runs).
func (n *Node) ExitErr() error {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.exitErr
}

// Running reports whether the process is alive.
func (n *Node) Running() bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.done == nil {
		return false
	}
	select {
	case <-n.done:
		return false
	default:
		return true
	}
}

// Exited is closed when the current process exits (nil before Start).
func (n *Node) Exited() <-chan struct{} {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.done
}

// stateFile is where Save keeps a cluster's nodes, in the cluster's dir.
const stateFile = "cluster.json"

// Save writes nodes' identities, addresses, command lines and security
// files to <dir>/cluster.json, for Load to start the same cluster again
// (`raftps dev --dir`): a restarted node must keep its addresses, since
// the Raft configuration names them.
func Save(dir string, nodes []*Node) error {
	b, err := json.MarshalIndent(nodes, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, stateFile), b, 0o600)
}

// Load reads the nodes Save wrote in dir, to run with bin: the same ids,
// ports, data dirs, certificates and command lines. It returns an error
// wrapping fs.ErrNotExist when dir holds no saved cluster.
func Load(bin, dir string) ([]*Node, error) {
	b, err := os.ReadFile(filepath.Join(dir, stateFile))
	if err != nil {
		return nil, err
	}
	var nodes []*Node
	if err := json.Unmarshal(b, &nodes); err != nil {
		return nil, fmt.Errorf("localcluster: %s: %w", filepath.Join(dir, stateFile), err)
	}
	if len(nodes) == 0 {
		return nil, fmt.Errorf("localcluster: %s names no node", filepath.Join(dir, stateFile))
	}
	for _, n := range nodes {
		n.Bin = bin
	}
	return nodes, nil
}
