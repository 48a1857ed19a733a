package main

import (
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/raftps/raftps/node"
	"github.com/raftps/raftps/security"
)

func runOffline(t *testing.T, args ...string) (string, error) {
	t.Helper()
	var out, errb bytes.Buffer
	root := newRootCmd(&out, &errb)
	root.SetArgs(args)
	err := root.ExecuteContext(context.Background())
	return out.String(), err
}

// TestTLSCommands: `tls ca create` and `tls cert create` write 0600 PEM
// files that load as mutual-TLS material with the right role, never
// overwrite, and refuse flag sets that do not describe one certificate;
// `tls ca create` also writes a 0600 gossip keyring of one key.
func TestTLSCommands(t *testing.T) {
	dir := t.TempDir()
	if _, err := runOffline(t, "tls", "ca", "create", "--dir", dir); err != nil {
		t.Fatal(err)
	}
	ca, key := filepath.Join(dir, "ca.pem"), filepath.Join(dir, "ca-key.pem")
	certArgs := func(a ...string) []string {
		return append([]string{"tls", "cert", "create", "--ca", ca, "--ca-key", key, "--dir", dir}, a...)
	}
	for _, a := range [][]string{
		{"--node", "n1", "--ip", "10.0.0.1", "--dns", "n1.example"},
		{"--client", "alice", "--role", "admin"},
		{"--client", "ci", "--role", "trainer", "--job", "mnist"},
		{"--client", "bob", "--role", "reader"},
	} {
		if out, err := runOffline(t, certArgs(a...)...); err != nil {
			t.Fatalf("%v: %v %s", a, err, out)
		}
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) != 11 {
		t.Fatalf("%d files, want 11 (the PEM files and gossip.keyring)", len(entries))
	}
	if keys, err := security.LoadKeyringFile(filepath.Join(dir, GossipKeyringName)); err != nil || len(keys) != 1 || len(keys[0]) != 32 {
		t.Fatalf("gossip keyring: %d keys, %v; want one 32-byte key", len(keys), err)
	}
	for _, e := range entries {
		fi, err := e.Info()
		if err != nil {
			t.Fatal(err)
		}
		if fi.Mode().Perm() != 0o600 {
			t.Errorf("%s: mode %v, want 0600", e.Name(), fi.Mode().Perm())
		}
	}
	for name, role := range map[string]string{"n1": security.RoleNode, "alice": security.RoleAdmin, "ci": security.RoleTrainer, "bob": security.RoleReader} {
		m, err := security.Load(security.Files{CA: ca, Cert: filepath.Join(dir, name+".pem"), Key: filepath.Join(dir, name+"-key.pem")}, nil)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		id := security.IdentityOf(m.Leaf())
		if id.Role != role || id.Name != name {
			t.Errorf("%s: identity %+v, want role %s", name, id, role)
		}
		if name == "n1" && (len(m.Leaf().IPAddresses) != 1 || m.Leaf().DNSNames[0] != "n1.example") {
			t.Errorf("n1 SANs: %v %v", m.Leaf().IPAddresses, m.Leaf().DNSNames)
		}
		if name == "ci" && !id.HasJob("mnist") {
			t.Errorf("trainer jobs %v", id.Jobs)
		}
	}
	before, _ := os.ReadFile(filepath.Join(dir, "alice.pem"))
	if _, err := runOffline(t, certArgs("--client", "alice", "--role", "reader")...); !errors.Is(err, security.ErrExists) {
		t.Fatalf("overwrite: %v, want ErrExists", err)
	}
	if after, _ := os.ReadFile(filepath.Join(dir, "alice.pem")); !bytes.Equal(before, after) {
		t.Fatal("a refused create changed the file")
	}
	if _, err := runOffline(t, "tls", "ca", "create", "--dir", dir); !errors.Is(err, security.ErrExists) {
		t.Fatalf("second CA over the first: %v, want ErrExists", err)
	}
	for _, a := range [][]string{
		{"--client", "x"},                                   // no role
		{"--client", "x", "--role", "root"},                 // unknown role
		{"--client", "x", "--role", "node"},                 // node is not a client role
		{"--node", "n2", "--role", "admin"},                 // a node has no --role
		{"--node", "n2", "--client", "x"},                   // both
		{},                                                  // neither
		{"--node", "n2", "--ip", "not-an-ip"},               // bad IP
		{"--client", "x", "--role", "reader", "--job", "j"}, // jobs for trainers only
	} {
		_, err := runOffline(t, certArgs(a...)...)
		if !errors.Is(err, ErrCertRequest) {
			t.Errorf("%v: %v, want ErrCertRequest", a, err)
		}
		if err != nil && !strings.Contains(err.Error(), "--") {
			t.Errorf("%v: %q names no flag", a, err)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "x.pem")); err == nil {
		t.Fatal("a refused create wrote x.pem")
	}
}

// TestNodeSecureByDefault: `raftps node` without TLS material refuses to
// start unless --insecure is given (CockroachDB's rule), naming the flags
// and the command that makes certificates; --insecure with the files is
// refused too. Neither takes the data dir.
func TestNodeSecureByDefault(t *testing.T) {
	dir := t.TempDir()
	data := filepath.Join(dir, "n1")
	_, err := runOffline(t, "node", "--id", "n1", "--data-dir", data)
	if !errors.Is(err, ErrNoTLS) || !strings.Contains(err.Error(), "--tls-cert-file") || !strings.Contains(err.Error(), "--insecure") ||
		!strings.Contains(err.Error(), "raftps tls cert create --node n1") {
		t.Fatalf("no TLS: %v; want ErrNoTLS naming the flags", err)
	}
	files, _, err := security.Dev(dir, []string{"n1"})
	if err != nil {
		t.Fatal(err)
	}
	f := files["n1"]
	_, err = runOffline(t, "node", "--id", "n1", "--data-dir", data, "--insecure",
		"--tls-ca-file", f.CA, "--tls-cert-file", f.Cert, "--tls-key-file", f.Key)
	if err == nil || !strings.Contains(err.Error(), "--insecure") {
		t.Fatalf("--insecure with TLS files: %v", err)
	}
	if _, err := os.Stat(filepath.Join(data, "LOCK")); err == nil {
		t.Fatal("a refused node took the data dir")
	}
}

// TestNodeTLSNeedsGossipKeyring (issue 32, hole 3): a node with TLS
// material but no --gossip-keyring-file refuses to start, saying how to
// make a keyring and naming the unsafe opt-out; it does not take the data
// dir. --insecure-gossip with a keyring is refused too.
func TestNodeTLSNeedsGossipKeyring(t *testing.T) {
	dir := t.TempDir()
	data := filepath.Join(dir, "n1")
	files, _, err := security.Dev(dir, []string{"n1"})
	if err != nil {
		t.Fatal(err)
	}
	f := files["n1"]
	tlsArgs := []string{"node", "--id", "n1", "--data-dir", data, "--tls-ca-file", f.CA, "--tls-cert-file", f.Cert, "--tls-key-file", f.Key,
		"--grpc-addr", "127.0.0.1:0", "--raft-addr", "127.0.0.1:0", "--gossip-addr", "127.0.0.1:0", "--http-addr", "127.0.0.1:0"}
	// A node that starts runs until the context ends (nil error or the
	// context's): bounded, so a regression fails rather than hangs.
	runNode := func(args ...string) error {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		root := newRootCmd(io.Discard, io.Discard)
		root.SetArgs(args)
		return root.ExecuteContext(ctx)
	}
	err = runNode(tlsArgs...)
	if !errors.Is(err, node.ErrNoGossipKeyring) || !strings.Contains(err.Error(), "--gossip-keyring-file") ||
		!strings.Contains(err.Error(), "raftps keyring generate") || !strings.Contains(err.Error(), "--insecure-gossip") {
		t.Fatalf("TLS without a keyring: %v; want ErrNoGossipKeyring naming --gossip-keyring-file, raftps keyring generate and --insecure-gossip", err)
	}
	keyring := filepath.Join(dir, "gossip.keyring")
	if err := security.NewKeyringFile(keyring); err != nil {
		t.Fatal(err)
	}
	err = runNode(append(tlsArgs, "--gossip-keyring-file", keyring, "--insecure-gossip")...)
	if !errors.Is(err, node.ErrInvalidConfig) || !strings.Contains(err.Error(), "--insecure-gossip with --gossip-keyring-file") {
		t.Fatalf("--insecure-gossip with a keyring: %v", err)
	}
	if _, err := os.Stat(filepath.Join(data, "LOCK")); err == nil {
		t.Fatal("a refused node took the data dir")
	}
}

// TestStatusShowsTLSOff: a node without TLS (in process here; `raftps
// node --insecure` in production) says so in `raftps status`.
func TestStatusShowsTLSOff(t *testing.T) {
	n := mustNode(t)
	out, err := run(t, n, "status")
	if err != nil || !strings.Contains(out, "tls: off") {
		t.Fatalf("status: %v\n%s\nwant a line tls: off", err, out)
	}
}
