package jepsen

import (
	"bufio"
	"bytes"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/raftps/raftps/security"
)

// The test binary doubles as a tiny TCP service for the host tests: run with
// RPS_JEPSEN_HELPER=listen it answers "pong" on RPS_JEPSEN_ADDR; with
// RPS_JEPSEN_HELPER=dial it exits 0 iff it gets "pong" from RPS_JEPSEN_ADDR
// within a second.
func TestMain(m *testing.M) {
	switch os.Getenv("RPS_JEPSEN_HELPER") {
	case "listen":
		helperListen(os.Getenv("RPS_JEPSEN_ADDR"))
		return
	case "dial":
		if err := ping(os.Getenv("RPS_JEPSEN_ADDR"), time.Second); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	code := m.Run()
	if built.dir != "" {
		_ = os.RemoveAll(built.dir)
	}
	os.Exit(code)
}

func helperListen(addr string) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	fmt.Println("listening on", addr)
	for {
		c, err := ln.Accept()
		if err != nil {
			continue
		}
		go func() {
			defer c.Close()
			fmt.Fprintln(c, "pong")
		}()
	}
}

func ping(addr string, timeout time.Duration) error {
	c, err := net.DialTimeout("tcp", addr, timeout)
	if err != nil {
		return err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(timeout))
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil {
		return err
	}
	if strings.TrimSpace(line) != "pong" {
		return fmt.Errorf("got %q", line)
	}
	return nil
}

func mustHosts(t *testing.T, n int) *Hosts {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Fatal("jepsen: needs root to create network namespaces (CI runs as root; run the suite as root, or with -short to leave it out)")
	}
	if removed := SweepStale(); len(removed) > 0 {
		t.Logf("swept stale objects: %v", removed)
	}
	hs, err := NewHosts(HostsConfig{Nodes: n, LogDir: filepath.Join(t.TempDir(), "logs")})
	if err != nil {
		t.Fatalf("hosts: %v", err)
	}
	t.Cleanup(func() {
		if err := hs.Close(); err != nil {
			t.Errorf("close hosts: %v", err)
		}
		if left := ListOurs(hs.Prefix); len(left) > 0 {
			t.Errorf("cleanup left %v behind", left)
		}
	})
	return hs
}

// dialFrom runs the dial helper inside from's namespace (nil: the root
// namespace) and reports whether it got its pong.
func dialFrom(t *testing.T, from *Host, addr string) bool {
	t.Helper()
	if from == nil {
		return ping(addr, time.Second) == nil
	}
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := from.Command(exe)
	cmd.Env = append(os.Environ(), "RPS_JEPSEN_HELPER=dial", "RPS_JEPSEN_ADDR="+addr)
	out, err := cmd.CombinedOutput()
	if err != nil && !strings.Contains(err.Error(), "exit status") {
		t.Fatalf("dial helper: %v: %s", err, out)
	}
	return err == nil
}

func TestHosts(t *testing.T) {
	hs := mustHosts(t, 3)
	n1, n2, n3 := hs.Nodes[0], hs.Nodes[1], hs.Nodes[2]
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	addr := n1.IP + ":9999"
	n1.Env = []string{"RPS_JEPSEN_HELPER=listen", "RPS_JEPSEN_ADDR=" + addr}
	if err := n1.Start(exe); err != nil {
		t.Fatal(err)
	}
	// `ip netns exec` must exec in place: the handle is the helper itself,
	// so SIGSTOP/SIGKILL reach it.
	if link, err := os.Readlink(fmt.Sprintf("/proc/%d/exe", n1.Pid())); err != nil || !strings.HasPrefix(link, exe) {
		// ip may not have exec'd yet; give it a moment.
		time.Sleep(200 * time.Millisecond)
		if link, _ = os.Readlink(fmt.Sprintf("/proc/%d/exe", n1.Pid())); !strings.HasPrefix(link, exe) {
			t.Fatalf("process handle is %q, not the helper %q", link, exe)
		}
	}
	expect := func(what string, from *Host, want bool) {
		t.Helper()
		name := "root"
		if from != nil {
			name = from.Name
		}
		var got bool
		for i := 0; i < 20; i++ { // the listener may still be starting
			if got = dialFrom(t, from, addr); got == want || !want {
				break
			}
			time.Sleep(100 * time.Millisecond)
		}
		if got != want {
			t.Fatalf("%s: %s -> n1 reachable=%v, want %v\n%s\n%s", what, name, got, want, n1.Rules(), hs.Nodes[1].Rules())
		}
		t.Logf("%s: %s -> n1 reachable=%v", what, name, got)
	}
	expect("healthy", nil, true)
	expect("healthy", n2, true)
	expect("healthy", n3, true)

	if err := hs.Partition([]*Host{n1}, []*Host{n2, n3}); err != nil {
		t.Fatal(err)
	}
	expect("n1 isolated", n2, false)
	expect("n1 isolated", n3, false)
	expect("n1 isolated (clients unaffected)", nil, true)
	if err := hs.Heal(); err != nil {
		t.Fatal(err)
	}
	expect("healed", n2, true)

	if err := hs.Block(n2, n1); err != nil { // one way: n2's packets to n1 dropped
		t.Fatal(err)
	}
	expect("one-way n2->n1", n2, false)
	expect("one-way n2->n1", n3, true)
	if err := hs.Heal(); err != nil {
		t.Fatal(err)
	}
	if err := hs.Loss(n1, 100); err != nil {
		t.Fatal(err)
	}
	expect("100% loss on n1", n3, false)
	if err := hs.Heal(); err != nil {
		t.Fatal(err)
	}
	expect("healed", n3, true)

	if err := n1.Pause(); err != nil {
		t.Fatal(err)
	}
	expect("n1 paused", n2, false)
	if err := n1.Resume(); err != nil {
		t.Fatal(err)
	}
	expect("n1 resumed", n2, true)
	n1.Kill()
	expect("n1 killed", n2, false)
	if err := n1.Restart(); err != nil {
		t.Fatal(err)
	}
	expect("n1 restarted", n2, true)
	logb, _ := os.ReadFile(n1.LogPath())
	if !strings.Contains(string(logb), "listening on") {
		t.Errorf("n1's log lacks its output: %q", logb)
	}
}

func TestHostsCleanupAfterSweep(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Fatal("jepsen: needs root to create network namespaces (CI runs as root; run the suite as root, or with -short to leave it out)")
	}
	// A namespace of a dead run (pid 999999999 is never a live process).
	ns := "rps-999999999-n1"
	if out, err := exec.Command("ip", "netns", "add", ns).CombinedOutput(); err != nil {
		t.Fatalf("ip netns add: %v: %s", err, out)
	}
	removed := SweepStale()
	if left := ListOurs("rps-999999999-"); len(left) > 0 {
		_ = exec.Command("ip", "netns", "del", ns).Run()
		t.Fatalf("sweep left %v (removed %v)", left, removed)
	}
	t.Logf("swept %v", removed)
}

// TestHostsPKI: by default every host's node runs mutual TLS with a
// certificate for its own IP and its own copy of the gossip keyring (the
// flags NodeArgs passes), and the clients' credentials are the admin's;
// the PKI's directory goes with Close. Insecure hosts get --insecure and
// no PKI.
func TestHostsPKI(t *testing.T) {
	hs := mustHosts(t, 3)
	if hs.PKI == nil {
		t.Fatal("no PKI by default")
	}
	for _, h := range hs.Nodes {
		args := NodeArgs(hs, h, t.TempDir(), "info")
		flag := func(name string) string {
			for i, a := range args {
				if a == name && i+1 < len(args) {
					return args[i+1]
				}
			}
			return ""
		}
		if slices.Contains(args, "--insecure") || flag("--gossip-keyring-file") == "" {
			t.Fatalf("%s: %v", h.Name, args)
		}
		m, err := security.Load(security.Files{CA: flag("--tls-ca-file"), Cert: flag("--tls-cert-file"), Key: flag("--tls-key-file")}, nil)
		if err != nil {
			t.Fatalf("%s's TLS files: %v", h.Name, err)
		}
		if err := m.Leaf().VerifyHostname(h.IP); err != nil || security.RoleOf(m.Leaf()) != security.RoleNode {
			t.Fatalf("%s's certificate: %v, role %q", h.Name, err, security.RoleOf(m.Leaf()))
		}
		keys, err := security.LoadKeyringFile(flag("--gossip-keyring-file"))
		if err != nil || len(keys) != 1 || !bytes.Equal(keys[0], hs.PKI.Gossip[0]) {
			t.Fatalf("%s's keyring: %d keys, %v", h.Name, len(keys), err)
		}
	}
	if opts, err := hs.DialOptions(); err != nil || len(opts) != 1 || !hs.Admin().Enabled() {
		t.Fatalf("admin dial options: %v", err)
	}
	dir := hs.PKI.Dir
	if err := hs.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Fatalf("PKI dir %s after Close: %v", dir, err)
	}

	plain, err := NewHosts(HostsConfig{Nodes: 1, LogDir: filepath.Join(t.TempDir(), "logs"), Insecure: true})
	if err != nil {
		t.Fatal(err)
	}
	defer plain.Close()
	if args := NodeArgs(plain, plain.Nodes[0], t.TempDir(), "info"); plain.PKI != nil || !slices.Contains(args, "--insecure") || slices.Contains(args, "--tls-ca-file") {
		t.Fatalf("insecure hosts: %v", args)
	}
}

// NodeArgs passes HostsConfig.LogStore (-jepsen.logstore) to every node,
// and nothing when it is unset (the node's default).
func TestNodeArgsLogStore(t *testing.T) {
	h := &Host{Name: "n1", IP: "10.0.0.11"}
	for _, tc := range []struct{ store, want string }{{"wal", "--raft-log-store wal"}, {"boltdb", "--raft-log-store boltdb"}, {"", ""}} {
		args := strings.Join(NodeArgs(&Hosts{Nodes: []*Host{h}, LogStore: tc.store}, h, "/d", "info"), " ")
		if got := strings.Contains(args, "--raft-log-store"); got != (tc.want != "") || !strings.Contains(args, tc.want) {
			t.Fatalf("LogStore %q: args %q, want %q", tc.store, args, tc.want)
		}
	}
}
