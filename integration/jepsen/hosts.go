package jepsen

import (
	"bytes"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"google.golang.org/grpc"

	"github.com/raftps/raftps/internal/testing/localcluster"
	"github.com/raftps/raftps/security"
)

// ErrNotRoot is returned by NewHosts when the process cannot create network
// namespaces.
var ErrNotRoot = errors.New("jepsen: needs root to create network namespaces")

// HostsConfig shapes a set of hosts.
type HostsConfig struct {
	// Nodes is the number of namespaces (3 or 5).
	Nodes int
	// Prefix names every namespace, link and table (default "rps-<pid>").
	// Stale objects of dead processes with the "rps-" prefix are swept by
	// SweepStale.
	Prefix string
	// Subnet is the first three octets of the test /24 (default
	// "10.77.<pid%200+20>"): the bridge is .1, node i (1-based) is .10+i.
	Subnet string
	// LogDir receives one <node>.log per node (stdout and stderr, appended
	// across restarts). Default: a temp dir.
	LogDir string
	// Insecure runs the nodes plaintext (--insecure). By default NewHosts
	// makes a PKI (localcluster.NewPKI in a temp dir removed by Close):
	// each node a certificate for its IP and its own copy of the gossip
	// keyring, and the admin's certificate for the clients (DialOptions).
	Insecure bool
	// LogStore, if set, is every node's --raft-log-store (boltdb or wal);
	// NodeArgs adds it.
	LogStore string
}

// Host is one node's network namespace and, once started, its process.
type Host struct {
	Name string // "n1", "n2", ...
	// Env is added to the environment of processes started with Start.
	Env []string
	NS  string // network namespace name
	IP  string
	// TLSArgs are the node's --tls-* and --gossip-keyring-file flags
	// (none with HostsConfig.Insecure); NodeArgs adds them.
	TLSArgs []string
	veth    string // host side of the veth pair

	mu      sync.Mutex
	cmd     *exec.Cmd
	args    []string // argv of the last Start
	exited  chan struct{}
	paused  bool
	logPath string
}

// Hosts is a Linux bridge in the root namespace with one network namespace
// per node, joined by veth pairs. The bridge has an IP in the subnet so that
// clients in the root namespace reach every node. All methods are safe for
// concurrent use; Close removes everything and is safe to call twice.
type Hosts struct {
	Prefix   string
	Bridge   string
	BridgeIP string
	Nodes    []*Host
	LogDir   string
	// PKI is the cluster's CA, admin certificate and gossip keyring (nil
	// with HostsConfig.Insecure).
	PKI *localcluster.PKI
	// LogStore is HostsConfig.LogStore.
	LogStore string

	pkiDir    string
	closeOnce sync.Once
	closeErr  error
	unreg     func()
}

// run runs a command and returns its combined output.
func run(name string, args ...string) (string, error) {
	cmd := exec.Command(name, args...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	if err != nil {
		return out.String(), fmt.Errorf("%s %s: %w: %s", name, strings.Join(args, " "), err, strings.TrimSpace(out.String()))
	}
	return out.String(), nil
}

func runStdin(stdin string, name string, args ...string) error {
	cmd := exec.Command(name, args...)
	cmd.Stdin = strings.NewReader(stdin)
	out, err := cmd.CombinedOutput()
	if err != nil {
		return fmt.Errorf("%s %s: %w: %s\n%s", name, strings.Join(args, " "), err, strings.TrimSpace(string(out)), stdin)
	}
	return nil
}

// EnsureTools makes sure ip (iproute2) and nft (nftables) are installed,
// installing the Debian packages with apt-get when one is missing (root only).
func EnsureTools() error {
	var missing []string
	for bin, pkg := range map[string]string{"ip": "iproute2", "nft": "nftables"} {
		if _, err := exec.LookPath(bin); err != nil {
			missing = append(missing, pkg)
		}
	}
	if len(missing) == 0 {
		return nil
	}
	if os.Geteuid() != 0 {
		return fmt.Errorf("jepsen: missing %v and not root to install them", missing)
	}
	args := append([]string{"install", "-y", "-q"}, missing...)
	if _, err := run("apt-get", args...); err != nil {
		if _, uerr := run("apt-get", "update", "-q"); uerr != nil {
			return fmt.Errorf("jepsen: apt-get update: %w", uerr)
		}
		if _, err := run("apt-get", args...); err != nil {
			return fmt.Errorf("jepsen: install %v: %w", missing, err)
		}
	}
	return nil
}

// SweepStale removes "rps-<pid>-*" namespaces, links and temp data dirs whose <pid> is no
// longer a live process (a run killed before its cleanup), killing any
// process still inside those namespaces. It returns what it removed.
func SweepStale() []string {
	var removed []string
	stale := func(name string) bool {
		if !strings.HasPrefix(name, "rps-") {
			return false
		}
		f := strings.SplitN(strings.TrimPrefix(name, "rps-"), "-", 2)
		pid, err := strconv.Atoi(f[0])
		if err != nil {
			return false
		}
		if pid == os.Getpid() {
			return false
		}
		return syscall.Kill(pid, 0) == syscall.ESRCH
	}
	out, _ := run("ip", "netns", "list")
	for _, line := range strings.Split(out, "\n") {
		f := strings.Fields(line)
		if len(f) == 0 || !stale(f[0]) {
			continue
		}
		killNetnsPids(f[0])
		if _, err := run("ip", "netns", "del", f[0]); err == nil {
			removed = append(removed, "netns "+f[0])
		}
	}
	out, _ = run("ip", "-o", "link", "show")
	for _, line := range strings.Split(out, "\n") {
		f := strings.Fields(line)
		if len(f) < 2 {
			continue
		}
		name := strings.SplitN(strings.TrimSuffix(f[1], ":"), "@", 2)[0]
		if stale(name) {
			if _, err := run("ip", "link", "del", name); err == nil {
				removed = append(removed, "link "+name)
			}
		}
	}
	// Data dirs of dead runs (RunSuite's rps-<pid>-data-*).
	dirs, _ := filepath.Glob(filepath.Join(os.TempDir(), "rps-*-data-*"))
	for _, d := range dirs {
		if stale(filepath.Base(d)) && os.RemoveAll(d) == nil {
			removed = append(removed, "dir "+d)
		}
	}
	return removed
}

func killNetnsPids(ns string) {
	out, _ := run("ip", "netns", "pids", ns)
	for _, f := range strings.Fields(out) {
		if pid, err := strconv.Atoi(f); err == nil && pid > 1 {
			_ = syscall.Kill(pid, syscall.SIGCONT)
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
	}
}

// ListOurs lists the namespaces and links whose names start with prefix.
func ListOurs(prefix string) []string {
	var found []string
	out, _ := run("ip", "netns", "list")
	for _, line := range strings.Split(out, "\n") {
		if f := strings.Fields(line); len(f) > 0 && strings.HasPrefix(f[0], prefix) {
			found = append(found, "netns "+f[0])
		}
	}
	out, _ = run("ip", "-o", "link", "show")
	for _, line := range strings.Split(out, "\n") {
		if f := strings.Fields(line); len(f) >= 2 {
			name := strings.SplitN(strings.TrimSuffix(f[1], ":"), "@", 2)[0]
			if strings.HasPrefix(name, prefix) {
				found = append(found, "link "+name)
			}
		}
	}
	return found
}

// Signal-safe cleanup: every live Hosts registers its Close; SIGINT/SIGTERM/
// SIGHUP run them all before the process exits.
var (
	cleanupMu   sync.Mutex
	cleanups    = map[int]func(){}
	cleanupSeq  int
	signalsOnce sync.Once
)

func registerCleanup(f func()) (unregister func()) {
	signalsOnce.Do(func() {
		ch := make(chan os.Signal, 1)
		signal.Notify(ch, syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP)
		go func() {
			sig := <-ch
			fmt.Fprintf(os.Stderr, "jepsen: %v: cleaning up namespaces and processes\n", sig)
			cleanupMu.Lock()
			fs := make([]func(), 0, len(cleanups))
			for _, f := range cleanups {
				fs = append(fs, f)
			}
			cleanupMu.Unlock()
			for _, f := range fs {
				f()
			}
			os.Exit(2)
		}()
	})
	cleanupMu.Lock()
	defer cleanupMu.Unlock()
	cleanupSeq++
	id := cleanupSeq
	cleanups[id] = f
	return func() {
		cleanupMu.Lock()
		delete(cleanups, id)
		cleanupMu.Unlock()
	}
}

const nftBase = `table inet rps {
	chain input { type filter hook input priority 0; policy accept; }
	chain output { type filter hook output priority 0; policy accept; }
}
`

// NewHosts creates the bridge, the namespaces and the veth pairs. On error
// it removes what it made. Callers should defer Close (t.Cleanup).
func NewHosts(cfg HostsConfig) (_ *Hosts, err error) {
	if os.Geteuid() != 0 {
		return nil, ErrNotRoot
	}
	if err := EnsureTools(); err != nil {
		return nil, err
	}
	pid := os.Getpid()
	if cfg.Prefix == "" {
		cfg.Prefix = fmt.Sprintf("rps-%d", pid)
	}
	if cfg.Subnet == "" {
		cfg.Subnet = fmt.Sprintf("10.77.%d", pid%200+20)
	}
	if cfg.Nodes <= 0 {
		cfg.Nodes = 3
	}
	if cfg.LogDir == "" {
		d, err := os.MkdirTemp("", "rps-jepsen-logs-")
		if err != nil {
			return nil, err
		}
		cfg.LogDir = d
	}
	if err := os.MkdirAll(cfg.LogDir, 0o755); err != nil {
		return nil, err
	}
	hs := &Hosts{
		Prefix:   cfg.Prefix,
		Bridge:   cfg.Prefix + "-br",
		BridgeIP: cfg.Subnet + ".1",
		LogDir:   cfg.LogDir,
		LogStore: cfg.LogStore,
	}
	if len(hs.Bridge) > 15 {
		return nil, fmt.Errorf("jepsen: prefix %q too long for link names", cfg.Prefix)
	}
	hs.unreg = registerCleanup(func() { _ = hs.Close() })
	defer func() {
		if err != nil {
			_ = hs.Close()
		}
	}()
	steps := [][]string{
		{"link", "add", hs.Bridge, "type", "bridge"},
		{"addr", "add", hs.BridgeIP + "/24", "dev", hs.Bridge},
		{"link", "set", hs.Bridge, "up"},
	}
	for _, s := range steps {
		if _, err := run("ip", s...); err != nil {
			return nil, err
		}
	}
	for i := 1; i <= cfg.Nodes; i++ {
		h := &Host{
			Name:    fmt.Sprintf("n%d", i),
			NS:      fmt.Sprintf("%s-n%d", cfg.Prefix, i),
			IP:      fmt.Sprintf("%s.%d", cfg.Subnet, 10+i),
			veth:    fmt.Sprintf("%s-v%d", cfg.Prefix, i),
			logPath: filepath.Join(cfg.LogDir, fmt.Sprintf("n%d.log", i)),
		}
		hs.Nodes = append(hs.Nodes, h)
		peer := fmt.Sprintf("%s-p%d", cfg.Prefix, i)
		steps := [][]string{
			{"netns", "add", h.NS},
			{"link", "add", h.veth, "type", "veth", "peer", "name", peer},
			{"link", "set", peer, "netns", h.NS},
			{"link", "set", h.veth, "master", hs.Bridge},
			{"link", "set", h.veth, "up"},
			{"-n", h.NS, "link", "set", peer, "name", "eth0"},
			{"-n", h.NS, "addr", "add", h.IP + "/24", "dev", "eth0"},
			{"-n", h.NS, "link", "set", "eth0", "up"},
			{"-n", h.NS, "link", "set", "lo", "up"},
		}
		for _, s := range steps {
			if _, err := run("ip", s...); err != nil {
				return nil, err
			}
		}
		if err := runStdin(nftBase, "ip", "netns", "exec", h.NS, "nft", "-f", "-"); err != nil {
			return nil, err
		}
	}
	if !cfg.Insecure {
		dir, err := os.MkdirTemp("", "rps-jepsen-pki-")
		if err != nil {
			return nil, err
		}
		hs.pkiDir = dir
		if hs.PKI, err = localcluster.NewPKI(dir); err != nil {
			return nil, err
		}
		for _, h := range hs.Nodes {
			if h.TLSArgs, err = hs.PKI.NodeFlags(h.Name, filepath.Join(dir, h.Name+".keyring"), net.ParseIP(h.IP)); err != nil {
				return nil, err
			}
		}
	}
	return hs, nil
}

// Admin is the admin client's files (zero with HostsConfig.Insecure).
func (hs *Hosts) Admin() security.Files {
	if hs.PKI == nil {
		return security.Files{}
	}
	return hs.PKI.Admin
}

// DialOptions are the admin client's gRPC dial options
// (localcluster.DialOptions: mutual TLS, or plaintext with
// HostsConfig.Insecure) for Dial, DialBalanced and StartServeProbes.
func (hs *Hosts) DialOptions() ([]grpc.DialOption, error) {
	return localcluster.DialOptions(hs.Admin())
}

// Close kills every process, then removes the namespaces, veths and bridge.
func (hs *Hosts) Close() error {
	hs.closeOnce.Do(func() {
		var errs []error
		for _, h := range hs.Nodes {
			h.Kill()
			killNetnsPids(h.NS)
		}
		for _, h := range hs.Nodes {
			if _, err := run("ip", "netns", "del", h.NS); err != nil && !strings.Contains(err.Error(), "No such file") {
				errs = append(errs, err)
			}
			_, _ = run("ip", "link", "del", h.veth) // usually gone with the namespace
		}
		if _, err := run("ip", "link", "del", hs.Bridge); err != nil && !strings.Contains(err.Error(), "Cannot find") {
			errs = append(errs, err)
		}
		if hs.pkiDir != "" {
			errs = append(errs, os.RemoveAll(hs.pkiDir))
		}
		hs.closeErr = errors.Join(errs...)
		if hs.unreg != nil {
			hs.unreg()
		}
	})
	return hs.closeErr
}

// Host returns the host named name ("n1"), or nil.
func (hs *Hosts) Host(name string) *Host {
	for _, h := range hs.Nodes {
		if h.Name == name {
			return h
		}
	}
	return nil
}

// Command returns an unstarted command that runs argv inside h's namespace.
func (h *Host) Command(argv ...string) *exec.Cmd {
	cmd := exec.Command("ip", append([]string{"netns", "exec", h.NS}, argv...)...)
	// Kill the node if the test process dies without cleaning up.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL, Setpgid: true}
	return cmd
}

// Start starts argv inside the namespace as the host's process, appending its
// stdout and stderr to the host's log file. `ip netns exec` execs in place,
// so the process handle is the node's own.
func (h *Host) Start(argv ...string) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.cmd != nil {
		return fmt.Errorf("jepsen: %s already running", h.Name)
	}
	f, err := os.OpenFile(h.logPath, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		return err
	}
	fmt.Fprintf(f, "\n==== jepsen: start %s at %s: %s\n", h.Name, time.Now().UTC().Format(time.RFC3339Nano), strings.Join(argv, " "))
	cmd := h.Command(argv...)
	cmd.Stdout, cmd.Stderr = f, f
	if len(h.Env) > 0 {
		cmd.Env = append(os.Environ(), h.Env...)
	}
	if err := cmd.Start(); err != nil {
		f.Close()
		return fmt.Errorf("jepsen: start %s: %w", h.Name, err)
	}
	exited := make(chan struct{})
	go func() {
		err := cmd.Wait()
		fmt.Fprintf(f, "==== jepsen: %s exited at %s: %v\n", h.Name, time.Now().UTC().Format(time.RFC3339Nano), err)
		f.Close()
		close(exited)
	}()
	h.cmd, h.args, h.exited, h.paused = cmd, argv, exited, false
	return nil
}

// Pid is the host's process id, 0 if not running.
func (h *Host) Pid() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.cmd == nil || h.cmd.Process == nil {
		return 0
	}
	return h.cmd.Process.Pid
}

// Running reports whether the host's process is started and has not exited.
func (h *Host) Running() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.cmd == nil {
		return false
	}
	select {
	case <-h.exited:
		return false
	default:
		return true
	}
}

// Kill sends SIGKILL to the host's process and waits for it to exit.
func (h *Host) Kill() {
	h.mu.Lock()
	cmd, exited := h.cmd, h.exited
	h.cmd, h.paused = nil, false
	h.mu.Unlock()
	if cmd == nil {
		return
	}
	_ = cmd.Process.Signal(syscall.SIGCONT)
	_ = cmd.Process.Kill()
	select {
	case <-exited:
	case <-time.After(10 * time.Second):
	}
}

// Stop sends SIGTERM and waits up to grace for a clean exit, then kills.
func (h *Host) Stop(grace time.Duration) {
	h.mu.Lock()
	cmd, exited := h.cmd, h.exited
	h.mu.Unlock()
	if cmd == nil {
		return
	}
	_ = cmd.Process.Signal(syscall.SIGCONT)
	_ = cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-exited:
		h.mu.Lock()
		h.cmd = nil
		h.mu.Unlock()
	case <-time.After(grace):
		h.Kill()
	}
}

// Restart starts the host's last argv again (after Kill).
func (h *Host) Restart() error {
	h.mu.Lock()
	argv := h.args
	h.mu.Unlock()
	if argv == nil {
		return fmt.Errorf("jepsen: %s was never started", h.Name)
	}
	return h.Start(argv...)
}

// Pause sends SIGSTOP; Resume sends SIGCONT.
func (h *Host) Pause() error  { return h.signal(syscall.SIGSTOP, true) }
func (h *Host) Resume() error { return h.signal(syscall.SIGCONT, false) }

func (h *Host) signal(sig syscall.Signal, paused bool) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.cmd == nil {
		return fmt.Errorf("jepsen: %s not running", h.Name)
	}
	h.paused = paused
	return h.cmd.Process.Signal(sig)
}

// LogPath is the file the host's process logs to.
func (h *Host) LogPath() string { return h.logPath }

// nft runs an nft script inside h's namespace.
func (h *Host) nft(script string) error {
	return runStdin(script, "ip", "netns", "exec", h.NS, "nft", "-f", "-")
}

// Block drops every packet from node from to node to (one way): an output
// rule in from's namespace and an input rule in to's.
func (hs *Hosts) Block(from, to *Host) error {
	if err := from.nft(fmt.Sprintf("add rule inet rps output ip daddr %s drop\n", to.IP)); err != nil {
		return err
	}
	return to.nft(fmt.Sprintf("add rule inet rps input ip saddr %s drop\n", from.IP))
}

// Partition cuts the nodes into the given groups: nodes in different groups
// cannot exchange packets (both ways). Nodes in no group are untouched.
func (hs *Hosts) Partition(groups ...[]*Host) error {
	for i, g := range groups {
		for j, o := range groups {
			if i == j {
				continue
			}
			for _, a := range g {
				for _, b := range o {
					if err := hs.Block(a, b); err != nil {
						return err
					}
				}
			}
		}
	}
	return nil
}

// Loss drops pct percent of h's packets, in and out, at random (nftables
// numgen; tc netem is not available).
func (hs *Hosts) Loss(h *Host, pct int) error {
	match := fmt.Sprintf("numgen random mod 100 < %d ", pct)
	switch {
	case pct <= 0:
		return nil
	case pct >= 100:
		match = ""
	}
	return h.nft(fmt.Sprintf("add rule inet rps input %sdrop\nadd rule inet rps output %sdrop\n", match, match))
}

// Heal removes every drop rule from every namespace.
func (hs *Hosts) Heal() error {
	var errs []error
	for _, h := range hs.Nodes {
		errs = append(errs, h.nft("flush chain inet rps input\nflush chain inet rps output\n"))
	}
	return errors.Join(errs...)
}

// Rules returns the nft ruleset of h's namespace (for logs).
func (h *Host) Rules() string {
	out, _ := run("ip", "netns", "exec", h.NS, "nft", "list", "table", "inet", "rps")
	return out
}
