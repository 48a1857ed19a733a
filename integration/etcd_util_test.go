package integration

import (
	"bytes"
	"context"
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/raftps/raftps/internal/testing/localcluster"
	"github.com/raftps/raftps/security"
)

// The etcd tests run etcd's own tools against raftps: Debian's etcdctl
// (etcd-client 3.4.23) and a real etcd (etcd-server) to compare with,
// both installed with apt-get when missing, and etcd's Go client.

var etcdInstall struct {
	once sync.Once
	err  error
}

// ensureEtcdTools installs etcd-client and etcd-server (after one apt-get
// update) unless etcd and etcdctl are on PATH.
func ensureEtcdTools(t *testing.T) {
	t.Helper()
	etcdInstall.once.Do(func() {
		_, e1 := exec.LookPath("etcd")
		_, e2 := exec.LookPath("etcdctl")
		if e1 == nil && e2 == nil {
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
		defer cancel()
		if out, err := exec.CommandContext(ctx, "apt-get", "update").CombinedOutput(); err != nil {
			etcdInstall.err = fmt.Errorf("apt-get update: %v\n%s", err, out)
			return
		}
		cmd := exec.CommandContext(ctx, "apt-get", "install", "-y", "etcd-client", "etcd-server")
		cmd.Env = append(cmd.Environ(), "DEBIAN_FRONTEND=noninteractive")
		if out, err := cmd.CombinedOutput(); err != nil {
			etcdInstall.err = fmt.Errorf("apt-get install -y etcd-client etcd-server: %v\n%s", err, out)
		}
	})
	if etcdInstall.err != nil {
		t.Fatal(etcdInstall.err)
	}
}

// etcdProcs prepares and starts n etcd members e1..eN on loopback and
// waits until every member answers; it returns their client addresses.
func startEtcd(t *testing.T, n int) []string {
	t.Helper()
	bin, err := exec.LookPath("etcd")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	var clients, peers, initial []string
	ps, err := localcluster.FreePorts(2 * n) // one call: distinct ports
	if err != nil {
		t.Fatal(err)
	}
	for i := range n {
		clients = append(clients, fmt.Sprintf("127.0.0.1:%d", ps[2*i]))
		peers = append(peers, fmt.Sprintf("http://127.0.0.1:%d", ps[2*i+1]))
		initial = append(initial, fmt.Sprintf("e%d=%s", i+1, peers[i]))
	}
	var procs []*localcluster.Node
	for i := range n {
		id := fmt.Sprintf("e%d", i+1)
		p := &localcluster.Node{ID: id, Bin: bin, LogPath: filepath.Join(dir, id+".log"), Args: []string{
			"--name", id, "--data-dir", filepath.Join(dir, id),
			"--listen-client-urls", "http://" + clients[i], "--advertise-client-urls", "http://" + clients[i],
			"--listen-peer-urls", peers[i], "--initial-advertise-peer-urls", peers[i],
			"--initial-cluster", strings.Join(initial, ","), "--initial-cluster-state", "new",
			"--initial-cluster-token", "raftps-etcd-test", "--logger", "zap", "--log-level", "warn"}}
		if err := p.Start(); err != nil {
			t.Fatal(err)
		}
		procs = append(procs, p)
	}
	t.Cleanup(func() {
		for _, p := range procs {
			p.Kill()
		}
	})
	cli := etcdClient(t, clients, security.Files{})
	deadline := time.Now().Add(30 * time.Second)
	for _, ep := range clients {
		for {
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			st, err := cli.Status(ctx, ep)
			cancel()
			if err == nil && st.Leader != 0 {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("etcd %s not ready: %v", ep, err)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	return clients
}

// etcdClient is etcd's Go client on endpoints (closed at cleanup), with
// mutual TLS as the holder of files (a cluster's Admin; plaintext for the
// zero Files: etcd here, a raftps cluster started --insecure).
func etcdClient(t testing.TB, endpoints []string, files security.Files) *clientv3.Client {
	t.Helper()
	tlsCfg, err := localcluster.ClientTLS(files)
	if err != nil {
		t.Fatal(err)
	}
	cli, err := clientv3.New(clientv3.Config{Endpoints: endpoints, TLS: tlsCfg, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cli.Close() })
	return cli
}

// grpcEndpoints are the client addresses of c's running nodes.
func grpcEndpoints(c *Cluster) []string {
	var eps []string
	for _, p := range c.Procs {
		if p.Running() {
			eps = append(eps, p.GRPC)
		}
	}
	return eps
}

// etcdctl runs Debian's etcdctl with args against endpoints, with the
// TLS flags tlsFlags (localcluster.CLIFlags: --cacert, --cert, --key;
// etcdctl's own names) and stdin as its input; it returns stdout, stderr
// and the exit error.
func etcdctl(t *testing.T, tlsFlags, endpoints []string, stdin string, args ...string) (string, string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	global := append([]string{"--endpoints", strings.Join(endpoints, ","), "--dial-timeout", "5s", "--command-timeout", "10s"}, tlsFlags...)
	cmd := exec.CommandContext(ctx, "etcdctl", append(global, args...)...)
	cmd.Env = append(cmd.Environ(), "ETCDCTL_API=3")
	cmd.Stdin = strings.NewReader(stdin)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	return out.String(), errb.String(), err
}
