package deploy_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"gopkg.in/yaml.v3"

	pb "github.com/raftps/raftps/api/raftpspb"
	"github.com/raftps/raftps/security"
)

// buildRaftps builds cmd/raftps into a temporary directory.
func buildRaftps(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "raftps")
	cmd := exec.Command("go", "build", "-o", bin, "../cmd/raftps")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build ../cmd/raftps: %v\n%s", err, out)
	}
	return bin
}

// loopbackPorts returns n distinct free ports below Linux's ephemeral
// range (32768-60999), so that no port a node binds as ":0" takes one.
func loopbackPorts(t *testing.T, n int) []int {
	t.Helper()
	seen := map[int]bool{}
	var out []int
	for tries := 0; len(out) < n; tries++ {
		if tries > 1000 {
			t.Fatal("no free loopback ports in 20000-32000")
		}
		p := 20000 + rand.IntN(12000)
		if seen[p] {
			continue
		}
		seen[p] = true
		l, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", p))
		if err != nil {
			continue
		}
		u, err := net.ListenPacket("udp", fmt.Sprintf("127.0.0.1:%d", p))
		l.Close()
		if err != nil {
			continue
		}
		u.Close()
		out = append(out, p)
	}
	return out
}

// run runs the binary and fails the test on error.
func run(t *testing.T, bin string, args ...string) string {
	t.Helper()
	out, err := exec.Command(bin, args...).CombinedOutput()
	if err != nil {
		t.Fatalf("raftps %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

// makePKI makes, with `raftps tls` as the files' comments say, a CA and
// the gossip keyring beside it, a node certificate per node (IP 127.0.0.1
// plus dns(node)) and the admin's certificate in dir.
func makePKI(t *testing.T, bin, dir string, nodes []string, dns func(string) []string) security.Files {
	t.Helper()
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	ca := []string{"--ca", filepath.Join(dir, "ca.pem"), "--ca-key", filepath.Join(dir, "ca-key.pem"), "--dir", dir}
	run(t, bin, "tls", "ca", "create", "--dir", dir)
	for _, n := range nodes {
		args := append([]string{"tls", "cert", "create", "--node", n, "--ip", "127.0.0.1"}, ca...)
		for _, d := range dns(n) {
			args = append(args, "--dns", d)
		}
		run(t, bin, args...)
	}
	run(t, bin, append([]string{"tls", "cert", "create", "--client", "admin", "--role", "admin"}, ca...)...)
	if _, err := security.LoadKeyringFile(filepath.Join(dir, "gossip.keyring")); err != nil {
		t.Fatalf("tls ca create wrote no usable gossip keyring: %v", err)
	}
	return security.Files{CA: filepath.Join(dir, "ca.pem"), Cert: filepath.Join(dir, "admin.pem"), Key: filepath.Join(dir, "admin-key.pem")}
}

// startNode starts `raftps args...` until the test ends, logging to log.
func startNode(t *testing.T, bin, log string, args ...string) {
	t.Helper()
	f, err := os.Create(log)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = f, f
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		f.Close()
		if t.Failed() {
			b, _ := os.ReadFile(log)
			if len(b) > 3000 {
				b = b[len(b)-3000:]
			}
			t.Logf("%s:\n%s", log, b)
		}
	})
}

// putWith puts key=value through addr with dial options opts.
func putWith(addr, key, value string, opts ...grpc.DialOption) error {
	cc, err := grpc.NewClient(addr, opts...)
	if err != nil {
		return err
	}
	defer cc.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	_, err = pb.NewKVClient(cc).Put(ctx, &pb.PutRequest{Key: []byte(key), Value: []byte(value)})
	return err
}

// checkRefusesUnauthenticated waits until the admin's certificate can
// write through grpcAddrs[0] (the cluster formed), failing at once if a
// plaintext put gets through meanwhile; then a plaintext client and a
// TLS client without a certificate must be refused by every node, and the
// key must keep the admin's value.
func checkRefusesUnauthenticated(t *testing.T, admin security.Files, grpcAddrs []string) {
	t.Helper()
	m, err := security.Load(admin, nil)
	if err != nil {
		t.Fatal(err)
	}
	plain := grpc.WithTransportCredentials(insecure.NewCredentials())
	deadline := time.Now().Add(90 * time.Second)
	for {
		if err := putWith(grpcAddrs[0], "/deploy/k", "plain", plain); err == nil {
			t.Fatalf("a node started from the shipped file took an unauthenticated put through %s", grpcAddrs[0])
		}
		err := putWith(grpcAddrs[0], "/deploy/k", "admin", m.DialOptions()...)
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the admin's put never got through in 90 s: %v", err)
		}
		time.Sleep(500 * time.Millisecond)
	}
	caPEM, err := os.ReadFile(admin.CA)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(caPEM)
	noCert := grpc.WithTransportCredentials(credentials.NewTLS(&tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS13}))
	for _, a := range grpcAddrs {
		if err := putWith(a, "/deploy/k", "plain", plain); err == nil {
			t.Fatalf("%s took a plaintext put", a)
		}
		if err := putWith(a, "/deploy/k", "nocert", noCert); err == nil {
			t.Fatalf("%s took a put over TLS without a client certificate", a)
		}
	}
	cc, err := grpc.NewClient(grpcAddrs[0], m.DialOptions()...)
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	r, err := pb.NewKVClient(cc).Range(ctx, &pb.RangeRequest{Key: []byte("/deploy/k")})
	if err != nil || len(r.Kvs) != 1 || string(r.Kvs[0].Value) != "admin" {
		t.Fatalf("after the refused puts /deploy/k = %v (err %v), want the admin's value", r.GetKvs(), err)
	}
}

// TestSystemdConfigRefusesUnauthenticatedWrites is issue 32's hole 4 for
// deploy/systemd/raftps.yaml: three nodes each start from the shipped
// file with only its paths (the state directory), ports, addresses (to
// loopback) and node id changed, with TLS material made as its comments
// say; the cluster takes the admin's write and refuses unauthenticated
// ones.
func TestSystemdConfigRefusesUnauthenticatedWrites(t *testing.T) {
	bin := buildRaftps(t)
	shipped, err := os.ReadFile("systemd/raftps.yaml")
	if err != nil {
		t.Fatal(err)
	}
	root := t.TempDir()
	ids := []string{"n1", "n2", "n3"}
	ports := loopbackPorts(t, 4*len(ids))
	port := func(i, k int) string { return fmt.Sprintf("127.0.0.1:%d", ports[4*i+k]) }
	pki := filepath.Join(root, "pki")
	admin := makePKI(t, bin, pki, ids, func(string) []string { return nil })
	var grpcAddrs []string
	for i, id := range ids {
		state := filepath.Join(root, id)
		if err := os.MkdirAll(filepath.Join(state, "tls"), 0o700); err != nil {
			t.Fatal(err)
		}
		for _, f := range []string{"ca.pem", id + ".pem", id + "-key.pem", "gossip.keyring"} {
			b, err := os.ReadFile(filepath.Join(pki, f))
			if err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(state, "tls", f), b, 0o600); err != nil {
				t.Fatal(err)
			}
		}
		var others []string
		for j := range ids {
			if j != i {
				others = append(others, port(j, 2))
			}
		}
		// Node n1's certificate files become this node's (if the file
		// names any).
		cfg := strings.NewReplacer("/n1.pem", "/"+id+".pem", "/n1-key.pem", "/"+id+"-key.pem").Replace(string(shipped))
		for _, r := range [][2]string{
			{"/var/lib/raftps", state}, {"id: n1", "id: " + id},
			{"0.0.0.0:7000", port(i, 0)}, {"0.0.0.0:7001", port(i, 1)}, {"0.0.0.0:7002", port(i, 2)}, {"0.0.0.0:7003", port(i, 3)},
			{"advertise: 10.0.0.1", "advertise: 127.0.0.1"},
			{"10.0.0.2:7002", others[0]}, {"10.0.0.3:7002", others[1]},
		} {
			if !strings.Contains(cfg, r[0]) {
				t.Fatalf("the shipped raftps.yaml has no %q to replace", r[0])
			}
			cfg = strings.ReplaceAll(cfg, r[0], r[1])
		}
		var check map[string]any
		if err := yaml.Unmarshal([]byte(cfg), &check); err != nil {
			t.Fatal(err)
		}
		file := filepath.Join(root, id+".yaml")
		if err := os.WriteFile(file, []byte(cfg), 0o600); err != nil {
			t.Fatal(err)
		}
		startNode(t, bin, filepath.Join(root, id+".log"), "node", "--config-file", file)
		grpcAddrs = append(grpcAddrs, port(i, 0))
	}
	checkRefusesUnauthenticated(t, admin, grpcAddrs)
}

// TestKubernetesArgsRefuseUnauthenticatedWrites is hole 4 for
// deploy/kubernetes/statefulset.yaml: three processes run the container's
// command and arguments with the downward API's variables filled in
// (pod names raftps-0..2), the Secret's files in a directory, the volume
// in another, and ports and DNS names mapped to loopback; the cluster
// takes the admin's write and refuses unauthenticated ones.
func TestKubernetesArgsRefuseUnauthenticatedWrites(t *testing.T) {
	bin := buildRaftps(t)
	var sts struct {
		Spec struct {
			Template struct {
				Spec struct {
					Containers []struct {
						Args []string `yaml:"args"`
					} `yaml:"containers"`
				} `yaml:"spec"`
			} `yaml:"template"`
		} `yaml:"spec"`
	}
	b, err := os.ReadFile("kubernetes/statefulset.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(b, &sts); err != nil {
		t.Fatal(err)
	}
	args := sts.Spec.Template.Spec.Containers[0].Args
	root := t.TempDir()
	pods := []string{"raftps-0", "raftps-1", "raftps-2"}
	dnsName := func(pod string) string { return pod + ".raftps.default.svc.cluster.local" }
	secret := filepath.Join(root, "secret") // the Secret raftps-tls, as mounted
	admin := makePKI(t, bin, secret, pods, func(pod string) []string { return []string{dnsName(pod), "localhost"} })
	ports := loopbackPorts(t, 4*len(pods))
	port := func(i, k int) string { return fmt.Sprintf("127.0.0.1:%d", ports[4*i+k]) }
	var grpcAddrs []string
	for i, pod := range pods {
		var podArgs []string
		for _, a := range args {
			a = strings.NewReplacer("$(POD_NAME)", pod, "$(POD_NAMESPACE)", "default", "$(POD_IP)", "127.0.0.1").Replace(a)
			a = strings.ReplaceAll(a, "/etc/raftps/tls", secret)
			a = strings.ReplaceAll(a, "/var/lib/raftps", filepath.Join(root, pod))
			for k := range 4 {
				a = strings.ReplaceAll(a, fmt.Sprintf("0.0.0.0:%d", 7000+k), port(i, k))
			}
			for j, other := range pods {
				a = strings.ReplaceAll(a, dnsName(other)+":7002", port(j, 2))
			}
			a = strings.ReplaceAll(a, "--advertise="+dnsName(pod), "--advertise=127.0.0.1")
			podArgs = append(podArgs, a)
		}
		for _, a := range podArgs {
			if strings.Contains(a, "svc.cluster.local") || strings.Contains(a, "0.0.0.0") || strings.Contains(a, "$(") {
				t.Fatalf("argument %q left unmapped", a)
			}
		}
		startNode(t, bin, filepath.Join(root, pod+".log"), podArgs...)
		grpcAddrs = append(grpcAddrs, port(i, 0))
	}
	checkRefusesUnauthenticated(t, admin, grpcAddrs)
}
