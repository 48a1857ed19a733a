package integration

import (
	"bytes"
	"context"
	"crypto/tls"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/raft"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/status"

	pb "github.com/raftps/raftps/api/raftpspb"
	"github.com/raftps/raftps/internal/testing/localcluster"
	"github.com/raftps/raftps/raftstore/client"
	"github.com/raftps/raftps/schema"
	"github.com/raftps/raftps/security"
)

// secureCluster is a TLS cluster of real processes with its PKI.
type secureCluster struct {
	*Cluster
	pki   string // dir of ca.pem, ca-key.pem and the certificates
	admin security.Files
	ca    *security.CA
	// peer and pserver gRPC addresses by node id (set by flags, so the
	// test can dial them).
	peer, pserver map[string]string
}

// newSecureCluster starts n nodes with mutual TLS and encrypted gossip
// (NewCluster's default: the PKI localcluster.New made in <Dir>/pki) and
// waits for a leader.
func newSecureCluster(t *testing.T, n int, extra ...string) *secureCluster {
	return newSecureClusterKeyring(t, n, nil, extra...)
}

// newSecureClusterKeyring is newSecureCluster with gossip encrypted by
// keyring (each node its own copy in <id>.keyring); nil: the PKI's key.
func newSecureClusterKeyring(t *testing.T, n int, keyring [][]byte, extra ...string) *secureCluster {
	t.Helper()
	c := NewCluster(t, binPath, n, extra...)
	sc := &secureCluster{Cluster: c, pki: filepath.Join(c.Dir, "pki"), admin: c.Admin(), peer: map[string]string{}, pserver: map[string]string{}}
	if !sc.admin.Enabled() {
		t.Fatal("NewCluster made a plaintext cluster")
	}
	var err error
	if sc.ca, err = security.LoadCA(filepath.Join(sc.pki, "ca.pem"), filepath.Join(sc.pki, "ca-key.pem")); err != nil {
		t.Fatal(err)
	}
	ports := extraPorts(t, c.Procs, 2*len(c.Procs))
	for i, p := range c.Procs {
		sc.peer[p.ID], sc.pserver[p.ID] = ports[2*i], ports[2*i+1]
		p.Args = append(p.Args, "--peer-addr", sc.peer[p.ID], "--pserver-addr", sc.pserver[p.ID])
		if keyring != nil {
			if err := localcluster.SetKeyring(p, keyring); err != nil {
				t.Fatal(err)
			}
		}
	}
	c.StartAll()
	sc.waitLeader(t, 60*time.Second)
	return sc
}

// extraPorts returns n free loopback addresses, distinct and none of them
// a port of procs (ports FreePorts released come back in a later call).
func extraPorts(t *testing.T, procs []*Proc, n int) []string {
	t.Helper()
	used := map[string]bool{}
	for _, p := range procs {
		for _, a := range p.Addrs() {
			used[a] = true
		}
	}
	for range 20 {
		ps, err := localcluster.FreePorts(n)
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, p := range ps {
			if a := fmt.Sprintf("127.0.0.1:%d", p); !used[a] {
				out = append(out, a)
			}
		}
		if len(out) == n {
			return out
		}
	}
	t.Fatal("no free ports apart from the cluster's")
	return nil
}

// issue makes a client certificate of the cluster's CA.
func (sc *secureCluster) issue(t *testing.T, name string, req security.CertRequest) security.Files {
	t.Helper()
	req.Name = name
	cpem, kpem, err := sc.ca.Issue(req)
	if err != nil {
		t.Fatal(err)
	}
	f := security.Files{CA: filepath.Join(sc.pki, "ca.pem"), Cert: filepath.Join(sc.pki, name+".pem"), Key: filepath.Join(sc.pki, name+"-key.pem")}
	if err := security.WriteFile(f.Key, kpem, true); err != nil {
		t.Fatal(err)
	}
	if err := security.WriteFile(f.Cert, cpem, true); err != nil {
		t.Fatal(err)
	}
	return f
}

// client is a Go client with files' certificate.
func (sc *secureCluster) client(t *testing.T, f security.Files, ps ...*Proc) *client.Client {
	t.Helper()
	opts, err := localcluster.DialOptions(f)
	if err != nil {
		t.Fatal(err)
	}
	if len(ps) == 0 {
		ps = sc.Procs
	}
	var eps []string
	for _, p := range ps {
		eps = append(eps, p.GRPC)
	}
	cl, err := client.New(eps, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cl.Close() })
	return cl
}

func (sc *secureCluster) waitLeader(t *testing.T, within time.Duration) string {
	t.Helper()
	cl := sc.client(t, sc.admin)
	var leader string
	waitFor(t, within, "a leader over TLS", func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		st, err := cl.Cluster.Status(ctx, &pb.StatusRequest{})
		if err != nil || st.Leader == "" {
			return false
		}
		leader = st.Leader
		return true
	})
	return leader
}

// cli runs the binary against the first node with files' certificate
// (none if zero) and returns stdout, stderr and the error.
func (sc *secureCluster) cli(f security.Files, args ...string) (string, string, error) {
	all := []string{"--endpoints", sc.Procs[0].GRPC, "--dial-timeout", "3s", "--command-timeout", "10s"}
	if f.Enabled() {
		all = append(all, "--cacert", f.CA, "--cert", f.Cert, "--key", f.Key)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, sc.Bin, append(all, args...)...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	return out.String(), errb.String(), err
}

// keys returns the keys and values the refused calls aim at (as admin):
// the test's own /sec/ and the jobs under /jobs/. (The nodes' own records
// change by themselves while the cluster runs.)
func (sc *secureCluster) keys(t *testing.T) map[string]string {
	t.Helper()
	cl := sc.client(t, sc.admin)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	out := map[string]string{}
	for _, prefix := range []string{"/sec/", schema.JobsPrefix} {
		r, err := cl.KV.Range(ctx, &pb.RangeRequest{Key: []byte(prefix), RangeEnd: schema.PrefixEnd([]byte(prefix))})
		if err != nil {
			t.Fatal(err)
		}
		for _, kv := range r.Kvs {
			out[string(kv.Key)] = string(kv.Value)
		}
	}
	return out
}

func sameKeys(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}

// TestTLSRefusals is issue 14's "Must show" on a 3-node mutual-TLS cluster
// of real processes: each refused party gets a clear error and nothing in
// the store changes; admin writes go on.
func TestTLSRefusals(t *testing.T) {
	sc := newSecureCluster(t, 3)
	if out, errOut, err := sc.cli(sc.admin, "kv", "put", "/sec/a", "1"); err != nil {
		t.Fatalf("admin put: %v %s %s", err, out, errOut)
	}
	if out, errOut, err := sc.cli(sc.admin, "status"); err != nil || !strings.Contains(out, "tls: on") {
		t.Fatalf("status: %v %s %s; want tls: on", err, out, errOut)
	}
	before := sc.keys(t)
	unchanged := func(what string) {
		t.Helper()
		if after := sc.keys(t); !sameKeys(before, after) {
			t.Fatalf("%s changed the store:\nbefore %v\nafter  %v", what, before, after)
		}
	}
	reader := sc.issue(t, "bob", security.CertRequest{Role: security.RoleReader})
	trainer := sc.issue(t, "ci", security.CertRequest{Role: security.RoleTrainer, Jobs: []string{"mine"}})

	t.Run("plaintext client", func(t *testing.T) {
		_, errOut, err := sc.cli(security.Files{}, "kv", "put", "/sec/a", "2")
		if err == nil || !strings.Contains(errOut, "--cacert") {
			t.Fatalf("plaintext put: err %v, stderr %q; want a refusal that names --cacert", err, errOut)
		}
		unchanged("a plaintext client")
	})
	t.Run("another CA", func(t *testing.T) {
		dir := t.TempDir()
		_, other, err := security.Dev(dir, nil)
		if err != nil {
			t.Fatal(err)
		}
		_, errOut, err := sc.cli(other, "kv", "put", "/sec/a", "2")
		if err == nil {
			t.Fatalf("another CA's admin put succeeded: %s", errOut)
		}
		// The server refuses it too when the client trusts the cluster CA.
		code := rawPut(t, sc.Procs[0].GRPC, sc.admin.CA, other)
		if code == codes.OK {
			t.Fatal("server accepted a certificate of another CA")
		}
		unchanged("another CA's certificate")
	})
	t.Run("expired certificate", func(t *testing.T) {
		old := sc.issue(t, "old", security.CertRequest{Role: security.RoleAdmin,
			NotBefore: time.Now().Add(-48 * time.Hour), NotAfter: time.Now().Add(-time.Hour)})
		_, errOut, err := sc.cli(old, "kv", "put", "/sec/a", "2")
		if err == nil || !strings.Contains(errOut, "expired") {
			t.Fatalf("expired: err %v, stderr %q; want an error saying expired", err, errOut)
		}
		if code := rawPut(t, sc.Procs[0].GRPC, sc.admin.CA, old); code == codes.OK {
			t.Fatal("server accepted an expired certificate")
		}
		unchanged("an expired certificate")
	})
	t.Run("reader writes", func(t *testing.T) {
		out, errOut, err := sc.cli(reader, "kv", "get", "/sec/a")
		if err != nil || strings.TrimSpace(out) == "" {
			t.Fatalf("reader get: %v %q %q", err, out, errOut)
		}
		for _, args := range [][]string{{"kv", "put", "/sec/a", "2"}, {"kv", "del", "/sec/a"}, {"job", "cancel", "mnist"}} {
			_, errOut, err := sc.cli(reader, args...)
			if err == nil || !strings.Contains(errOut, "PermissionDenied") || !strings.Contains(errOut, "reader") {
				t.Fatalf("reader %v: err %v, stderr %q; want PermissionDenied naming the role", args, err, errOut)
			}
		}
		unchanged("a reader")
	})
	t.Run("trainer", func(t *testing.T) {
		for _, args := range [][]string{{"kv", "del", "--prefix", "/"}, {"kv", "put", "/sec/a", "2"}, {"job", "cancel", "mnist"}} {
			_, errOut, err := sc.cli(trainer, args...)
			if err == nil || !strings.Contains(errOut, "PermissionDenied") || !strings.Contains(errOut, "trainer") {
				t.Fatalf("trainer %v: err %v, stderr %q; want PermissionDenied naming the role", args, err, errOut)
			}
		}
		// Pushing into another job on a pserver port.
		conn := dialTLS(t, sc.pserver["n1"], trainer)
		_, err := pb.NewPServerClient(conn).Push(ctxT(t), &pb.PushRequest{Job: "mnist", Slot: 0, Trainer: "ci"})
		if status.Code(err) != codes.PermissionDenied || !strings.Contains(err.Error(), "mnist") {
			t.Fatalf("trainer push into another job: %v; want PermissionDenied naming the job", err)
		}
		unchanged("a trainer")
	})
	t.Run("client certificate on an internal API", func(t *testing.T) {
		for _, f := range []security.Files{sc.admin, reader, trainer} {
			conn := dialTLS(t, sc.peer["n1"], f)
			_, err := pb.NewInternalClient(conn).ForwardApply(ctxT(t), &pb.ForwardApplyRequest{})
			if status.Code(err) != codes.PermissionDenied || !strings.Contains(err.Error(), "ForwardApply") {
				t.Fatalf("%s on ForwardApply: %v; want PermissionDenied naming the method", f.Cert, err)
			}
			_, err = pb.NewCheckpointStoreClient(conn).GetManifest(ctxT(t), &pb.GetManifestRequest{})
			if status.Code(err) != codes.PermissionDenied {
				t.Fatalf("%s on the peer port's CheckpointStore: %v; want PermissionDenied", f.Cert, err)
			}
		}
		unchanged("a client on an internal API")
	})
	t.Run("plaintext peer on the Raft port", func(t *testing.T) {
		leader := sc.waitLeader(t, 10*time.Second)
		lp := sc.Proc(leader)
		var target *Proc
		for _, p := range sc.Procs {
			if p != lp {
				target = p
				break
			}
		}
		trans, err := raft.NewTCPTransport("127.0.0.1:0", nil, 1, 2*time.Second, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer trans.Close()
		// A heartbeat claiming a far later term: applied, it would depose
		// the cluster's leader.
		var resp raft.AppendEntriesResponse
		err = trans.AppendEntries(raft.ServerID(target.ID), raft.ServerAddress(target.Raft),
			&raft.AppendEntriesRequest{RPCHeader: raft.RPCHeader{ID: []byte("intruder"), Addr: []byte("127.0.0.1:1")},
				Term: 1 << 40, Leader: []byte("127.0.0.1:1")}, &resp)
		if err == nil {
			t.Fatalf("plaintext AppendEntries answered: %+v", resp)
		}
		// A client certificate is refused by the Raft port's handshake.
		m, err := security.Load(sc.admin, nil)
		if err != nil {
			t.Fatal(err)
		}
		cfg := m.ClientConfig("127.0.0.1", "raftps-raft")
		cfg.VerifyConnection = nil
		tc, err := tls.Dial("tcp", target.Raft, cfg)
		if err == nil {
			_, err = tc.Read(make([]byte, 1))
			tc.Close()
		}
		if err == nil {
			t.Fatal("the Raft port accepted an admin certificate")
		}
		// The intruder's term never reached a node (an election of the
		// loaded machine's own may change the leader, not the term so).
		for _, p := range sc.Procs {
			st, err := sc.client(t, sc.admin, p).Cluster.Status(ctxT(t), &pb.StatusRequest{})
			if err != nil {
				t.Fatal(err)
			}
			if st.GetTerm() >= 1<<40 {
				t.Fatalf("%s took the plaintext peer's term %d", p.ID, st.GetTerm())
			}
		}
		unchanged("a plaintext Raft peer")
	})
	if out, errOut, err := sc.cli(sc.admin, "kv", "put", "/sec/b", "3"); err != nil {
		t.Fatalf("admin put after the refusals: %v %s %s", err, out, errOut)
	}
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// dialTLS is a gRPC connection to addr with f's certificate.
func dialTLS(t *testing.T, addr string, f security.Files) *grpc.ClientConn {
	t.Helper()
	m, err := security.Load(f, nil)
	if err != nil {
		t.Fatal(err)
	}
	conn, err := grpc.NewClient(addr, m.DialOptions()...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

// rawPut presents f's certificate (not checked by us: no Load) to the
// node at addr, trusting caFile, and returns the Put's status code.
func rawPut(t *testing.T, addr, caFile string, f security.Files) codes.Code {
	t.Helper()
	cert, err := tls.LoadX509KeyPair(f.Cert, f.Key)
	if err != nil {
		t.Fatal(err)
	}
	trust, err := security.Load(security.Files{CA: caFile, Cert: filepath.Join(filepath.Dir(caFile), "admin.pem"),
		Key: filepath.Join(filepath.Dir(caFile), "admin-key.pem")}, nil)
	if err != nil {
		t.Fatal(err)
	}
	cfg := trust.ClientConfig("127.0.0.1", "h2")
	cfg.Certificates = []tls.Certificate{cert}
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(credentials.NewTLS(cfg)))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_, err = pb.NewKVClient(conn).Put(ctx, &pb.PutRequest{Key: []byte("/sec/a"), Value: []byte("raw")})
	return status.Code(err)
}

func mkdir(p string) error { return os.MkdirAll(p, 0o700) }

// TestDatasetRoots: a job naming a dataset outside the node's
// --dataset-root directories, or reaching out of one through a symbolic
// link, is refused with InvalidArgument and one message that does not
// tell whether the path exists; nothing is created. A dataset under a
// root is accepted.
func TestDatasetRoots(t *testing.T) {
	repo := localcluster.DatasetRoot()
	if repo == "" {
		t.Fatal("no datasets/ directory above the working directory")
	}
	base := t.TempDir()
	root, outside := filepath.Join(base, "root"), filepath.Join(base, "outside")
	for _, d := range []string{root, outside} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	// outside/ is a valid dataset (links to the real files); root/escape
	// links to it.
	files, err := filepath.Glob(filepath.Join(repo, "fashion-mnist", "*.gz"))
	if err != nil || len(files) < 4 {
		t.Fatalf("dataset files: %v %v", files, err)
	}
	for _, f := range files {
		if err := os.Symlink(f, filepath.Join(outside, filepath.Base(f))); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink(outside, filepath.Join(root, "escape")); err != nil {
		t.Fatal(err)
	}
	sc := newSecureCluster(t, 1, "--dataset-root", root)
	before := sc.keys(t)
	var msgs []string
	for i, p := range []string{outside, filepath.Join(root, "escape"), "escape", "/nonexistent/fashion", "../outside", "/etc"} {
		_, errOut, err := sc.cli(sc.admin, "job", "submit", "--name", fmt.Sprintf("bad%d", i), "--dataset", p)
		if err == nil || !strings.Contains(errOut, "InvalidArgument") || !strings.Contains(errOut, "dataset roots") {
			t.Fatalf("dataset %q: err %v, stderr %q; want InvalidArgument naming the roots", p, err, errOut)
		}
		if strings.Contains(errOut, "no such file") || strings.Contains(errOut, root) && !strings.Contains(p, root) {
			t.Fatalf("dataset %q: the error reveals the file system: %q", p, errOut)
		}
		abs, _ := filepath.Abs(p) // the CLI sends relative paths made absolute
		msgs = append(msgs, strings.ReplaceAll(strings.ReplaceAll(errOut, abs, "P"), p, "P"))
	}
	for _, m := range msgs[1:] {
		if m != msgs[0] {
			t.Fatalf("refusals differ, so they tell paths apart:\n%q\n%q", msgs[0], m)
		}
	}
	if after := sc.keys(t); !sameKeys(before, after) {
		t.Fatalf("refused jobs changed the store: %v", after)
	}
	if out, errOut, err := sc.cli(sc.admin, "job", "submit", "--name", "good", "--dataset", filepath.Join(repo, "fashion-mnist")); err != nil {
		t.Fatalf("a dataset under a root: %v %s %s", err, out, errOut)
	}
}
