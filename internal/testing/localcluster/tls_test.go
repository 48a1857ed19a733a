package localcluster

import (
	"bytes"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/raftps/raftps/security"
)

func count(args []string, flag string) int {
	n := 0
	for _, a := range args {
		if a == flag {
			n++
		}
	}
	return n
}

// TestNewSecureByDefault: New gives every node mutual TLS files of one
// CA and its own 0600 copy of one gossip keyring, never --insecure; the
// admin's files load as client material; Add issues from the same CA and
// copies the first node's current keyring (after a rotation too).
func TestNewSecureByDefault(t *testing.T) {
	dir := t.TempDir()
	nodes, err := New("/bin/true", dir, 3)
	if err != nil {
		t.Fatal(err)
	}
	pki, err := LoadPKI(filepath.Join(dir, "pki"))
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range nodes {
		if slices.Contains(n.Args, "--insecure") || count(n.Args, "--tls-cert-file") != 1 || count(n.Args, "--gossip-keyring-file") != 1 {
			t.Fatalf("%s: %v", n.ID, n.Args)
		}
		m, err := security.Load(n.TLS, nil)
		if err != nil {
			t.Fatalf("%s's files: %v", n.ID, err)
		}
		if r := security.RoleOf(m.Leaf()); r != security.RoleNode {
			t.Fatalf("%s's role %q", n.ID, r)
		}
		fi, err := os.Stat(n.Keyring)
		if err != nil || fi.Mode().Perm() != 0o600 {
			t.Fatalf("%s's keyring %s: %v %v", n.ID, n.Keyring, fi, err)
		}
		keys, err := security.LoadKeyringFile(n.Keyring)
		if err != nil || len(keys) != 1 || !bytes.Equal(keys[0], pki.Gossip[0]) {
			t.Fatalf("%s's keyring: %d keys, %v", n.ID, len(keys), err)
		}
		if n.Admin != pki.Admin {
			t.Fatalf("%s's admin %v, want %v", n.ID, n.Admin, pki.Admin)
		}
	}
	m, err := security.Load(nodes[0].Admin, nil)
	if err != nil || security.RoleOf(m.Leaf()) != security.RoleAdmin {
		t.Fatalf("admin files: %v", err)
	}
	if opts, err := DialOptions(nodes[0].Admin); err != nil || len(opts) != 1 {
		t.Fatalf("DialOptions: %d, %v", len(opts), err)
	}
	if cfg, err := ClientTLS(nodes[0].Admin); err != nil || cfg == nil || len(cfg.Certificates) != 1 || cfg.RootCAs == nil {
		t.Fatalf("ClientTLS: %v", err)
	}
	if f := CLIFlags(nodes[0].Admin); len(f) != 6 || f[0] != "--cacert" {
		t.Fatalf("CLIFlags: %v", f)
	}

	// A rotated keyring reaches a node added later.
	rotated := [][]byte{bytes.Repeat([]byte{7}, 32), pki.Gossip[0]}
	if err := security.SaveKeyringFile(nodes[0].Keyring, rotated); err != nil {
		t.Fatal(err)
	}
	n4, err := Add("/bin/true", dir, nodes)
	if err != nil {
		t.Fatal(err)
	}
	keys, err := security.LoadKeyringFile(n4.Keyring)
	if err != nil || len(keys) != 2 || !bytes.Equal(keys[0], rotated[0]) {
		t.Fatalf("n4's keyring: %d keys, %v", len(keys), err)
	}
	if _, err := security.Load(n4.TLS, nil); err != nil {
		t.Fatalf("n4's files: %v", err)
	}

	if err := SetKeyring(n4, nil); err != nil || count(n4.Args, "--gossip-keyring-file") != 0 || n4.Keyring != "" || count(n4.Args, "--insecure-gossip") != 1 {
		t.Fatalf("SetKeyring(nil): %v %v", err, n4.Args)
	}
}

// TestNewInsecure: --insecure in the extra flags is the one way to a
// plaintext cluster: no PKI, no --tls-* or keyring, a zero Admin, plaintext
// dial options and no CLI flags.
func TestNewInsecure(t *testing.T) {
	dir := t.TempDir()
	nodes, err := New("/bin/true", dir, 2, "--insecure")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, "pki")); !os.IsNotExist(err) {
		t.Fatalf("a PKI for an --insecure cluster: %v", err)
	}
	for _, n := range nodes {
		if count(n.Args, "--insecure") != 1 || count(n.Args, "--tls-ca-file") != 0 || count(n.Args, "--gossip-keyring-file") != 0 || n.Admin.Enabled() {
			t.Fatalf("%s: %v", n.ID, n.Args)
		}
	}
	if _, err := Add("/bin/true", dir, nodes); err == nil {
		t.Fatal("Add with TLS to a cluster without a PKI succeeded")
	}
	if n3, err := Add("/bin/true", dir, nodes, "--insecure"); err != nil || n3.Admin.Enabled() {
		t.Fatalf("Add --insecure: %v", err)
	}
	if opts, err := DialOptions(security.Files{}); err != nil || len(opts) != 1 {
		t.Fatalf("plaintext DialOptions: %v", err)
	}
	if cfg, err := ClientTLS(security.Files{}); err != nil || cfg != nil {
		t.Fatalf("plaintext ClientTLS: %v %v", cfg, err)
	}
	if f := CLIFlags(security.Files{}); f != nil {
		t.Fatalf("plaintext CLIFlags: %v", f)
	}
}

// TestPortsDistinct: every port of a cluster is distinct, also for a
// node added later, even when the allocator hands out again ports it
// released (as the kernel does for FreePorts' :0 listeners once closed).
// Before, each node asked FreePorts on its own and n2's gossip port could
// be n1's Raft port: n2 failed to start ("bind: address already in use")
// and the cluster never had a leader. The node-to-node and pserver ports
// are chosen the same way: left ephemeral, n1's peer port was once the
// Raft port chosen for n2, with the same outcome.
func TestPortsDistinct(t *testing.T) {
	next := 20000
	freePorts = func(n int) ([]int, error) { // each call overlaps the previous one
		out := make([]int, n)
		for i := range out {
			out[i] = next + i
		}
		next += 2
		return out, nil
	}
	t.Cleanup(func() { freePorts = FreePorts })
	dir := t.TempDir()
	nodes, err := New("/bin/true", dir, 3, "--insecure")
	if err != nil {
		t.Fatal(err)
	}
	n4, err := Add("/bin/true", dir, nodes, "--insecure")
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]string{}
	for _, n := range append(nodes, n4) {
		for _, a := range n.Addrs() {
			if other, ok := seen[a]; ok {
				t.Fatalf("%s of %s is also %s's", a, n.ID, other)
			}
			seen[a] = n.ID
		}
		for _, f := range []string{"--peer-addr", "--pserver-addr"} {
			if i := slices.Index(n.Args, f); i < 0 || i+1 >= len(n.Args) || n.Args[i+1] == "" {
				t.Fatalf("%s starts without %s: %v", n.ID, f, n.Args)
			}
		}
	}
}
