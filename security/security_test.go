package security

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	pb "github.com/raftps/raftps/api/raftpspb"
	"github.com/raftps/raftps/schema"
)

// pki is a CA in a temp dir that issues certificates into it.
type pki struct {
	t   *testing.T
	dir string
	ca  *CA
}

func newPKI(t *testing.T) *pki {
	t.Helper()
	dir := t.TempDir()
	ca, cpem, kpem, err := NewCA("test CA", 1)
	if err != nil {
		t.Fatal(err)
	}
	must(t, WriteFile(filepath.Join(dir, "ca.pem"), cpem, false))
	must(t, WriteFile(filepath.Join(dir, "ca-key.pem"), kpem, false))
	return &pki{t: t, dir: dir, ca: ca}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func (p *pki) issue(name string, req CertRequest) Files {
	p.t.Helper()
	req.Name = name
	c, k, err := p.ca.Issue(req)
	if err != nil {
		p.t.Fatal(err)
	}
	f := Files{CA: filepath.Join(p.dir, "ca.pem"), Cert: filepath.Join(p.dir, name+".pem"), Key: filepath.Join(p.dir, name+"-key.pem")}
	must(p.t, WriteFile(f.Cert, c, true))
	must(p.t, WriteFile(f.Key, k, true))
	return f
}

func (p *pki) node(name string) Files {
	return p.issue(name, CertRequest{Role: RoleNode, IPs: []net.IP{net.IPv4(127, 0, 0, 1)}, DNS: []string{"localhost"}})
}

func mustLoad(t *testing.T, f Files) *Material {
	t.Helper()
	m, err := Load(f, nil)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func TestWriteFileMode0600AndNoOverwrite(t *testing.T) {
	p := filepath.Join(t.TempDir(), "k.pem")
	must(t, WriteFile(p, []byte("x"), false))
	fi, err := os.Stat(p)
	must(t, err)
	if fi.Mode().Perm() != 0o600 {
		t.Fatalf("mode %v, want 0600", fi.Mode().Perm())
	}
	if err := WriteFile(p, []byte("y"), false); !errors.Is(err, ErrExists) {
		t.Fatalf("overwrite: %v, want ErrExists", err)
	}
	if b, _ := os.ReadFile(p); string(b) != "x" {
		t.Fatalf("file changed to %q", b)
	}
}

func TestLoadRefuses(t *testing.T) {
	a, b := newPKI(t), newPKI(t)
	good := a.node("n1")
	if _, err := Load(Files{CA: good.CA, Cert: good.Cert}, nil); !errors.Is(err, ErrIncomplete) {
		t.Errorf("no key: %v, want ErrIncomplete", err)
	}
	other := b.node("n1")
	if _, err := Load(Files{CA: good.CA, Cert: other.Cert, Key: other.Key}, nil); !errors.Is(err, ErrNotSigned) {
		t.Errorf("another CA's certificate: %v, want ErrNotSigned", err)
	}
	expired := a.issue("old", CertRequest{Role: RoleAdmin, NotBefore: time.Now().Add(-48 * time.Hour), NotAfter: time.Now().Add(-time.Hour)})
	if _, err := Load(expired, nil); !errors.Is(err, ErrExpired) {
		t.Errorf("expired: %v, want ErrExpired", err)
	}
	if _, err := Load(good, nil); err != nil {
		t.Errorf("good: %v", err)
	}
}

func TestIssueRolesAndJobs(t *testing.T) {
	p := newPKI(t)
	m := mustLoad(t, p.issue("ci", CertRequest{Role: RoleTrainer, Jobs: []string{"mnist", "cifar"}}))
	id := IdentityOf(m.Leaf())
	if id.Name != "ci" || id.Role != RoleTrainer || !id.HasJob("mnist") || !id.HasJob("cifar") || id.HasJob("other") {
		t.Fatalf("identity %+v", id)
	}
	if _, _, err := p.ca.Issue(CertRequest{Name: "x", Role: "root"}); err == nil {
		t.Fatal("unknown role issued")
	}
	// A job pattern (issue 35) serves the jobs it matches.
	m = mustLoad(t, p.issue("series", CertRequest{Role: RoleTrainer, Jobs: []string{"exp-*"}}))
	id = IdentityOf(m.Leaf())
	if id.Role != RoleTrainer || !id.HasJob("exp-1") || !id.HasJob("exp-22") || id.HasJob("exp") || id.HasJob("other") {
		t.Fatalf("pattern identity %+v", id)
	}
	for _, bad := range []string{"exp-[", "a/b", "a%2A"} {
		if _, _, err := p.ca.Issue(CertRequest{Name: "x", Role: RoleTrainer, Jobs: []string{bad}}); err == nil {
			t.Fatalf("job %q issued", bad)
		}
	}
}

// handshake runs one TLS handshake between server and client configs over
// a pipe and returns the client's and the server's errors.
func handshake(server, client *tls.Config) (cerr, serr error) {
	a, b := net.Pipe()
	defer a.Close()
	defer b.Close()
	done := make(chan error, 1)
	go func() {
		s := tls.Server(b, server)
		err := s.Handshake()
		if err == nil {
			// TLS 1.3: the client learns of a refused client
			// certificate on its first read.
			_, err = s.Write([]byte{1})
		}
		b.Close()
		done <- err
	}()
	c := tls.Client(a, client)
	cerr = c.Handshake()
	if cerr == nil {
		_, cerr = c.Read(make([]byte, 1))
	}
	a.Close()
	return cerr, <-done
}

func TestMutualTLS(t *testing.T) {
	a, b := newPKI(t), newPKI(t)
	srv := mustLoad(t, a.node("n1"))
	admin := mustLoad(t, a.issue("alice", CertRequest{Role: RoleAdmin}))
	if cerr, serr := handshake(srv.ServerConfig(nil), admin.ClientConfig("127.0.0.1")); cerr != nil || serr != nil {
		t.Fatalf("same CA: client %v, server %v", cerr, serr)
	}
	// A client of another CA is refused by the server.
	stranger := mustLoad(t, b.issue("mallory", CertRequest{Role: RoleAdmin}))
	if _, serr := handshake(srv.ServerConfig(nil), &tls.Config{MinVersion: tls.VersionTLS13, InsecureSkipVerify: true,
		Certificates: []tls.Certificate{mustCert(t, stranger)}}); serr == nil {
		t.Fatal("server accepted a certificate of another CA")
	}
	// A client without a certificate is refused.
	if _, serr := handshake(srv.ServerConfig(nil), &tls.Config{MinVersion: tls.VersionTLS13, InsecureSkipVerify: true}); serr == nil {
		t.Fatal("server accepted a client without a certificate")
	}
	// TLS 1.2 is refused.
	if _, serr := handshake(srv.ServerConfig(nil), &tls.Config{MaxVersion: tls.VersionTLS12, InsecureSkipVerify: true,
		Certificates: []tls.Certificate{mustCert(t, admin)}}); serr == nil {
		t.Fatal("server accepted TLS 1.2")
	}
	// A client refuses a server whose certificate is not a node's
	// (an admin certificate posing as a node), and a wrong host name.
	if cerr, _ := handshake(admin.ServerConfig(nil), srv.ClientConfig("127.0.0.1")); cerr == nil {
		t.Fatal("client accepted a server without the node role")
	}
	if cerr, _ := handshake(srv.ServerConfig(nil), admin.ClientConfig("10.9.9.9")); cerr == nil {
		t.Fatal("client accepted a server certificate for another host")
	}
	// The Raft port's verify hook sees the client's role.
	refuseClients := func(cs tls.ConnectionState) error {
		if RoleOf(cs.PeerCertificates[0]) != RoleNode {
			return ErrNotNode
		}
		return nil
	}
	if _, serr := handshake(srv.ServerConfig(refuseClients), admin.ClientConfig("127.0.0.1")); !errors.Is(serr, ErrNotNode) {
		t.Fatalf("verify hook: %v, want ErrNotNode", serr)
	}
}

func mustCert(t *testing.T, m *Material) tls.Certificate {
	t.Helper()
	c, err := m.GetCertificate(nil)
	must(t, err)
	return *c
}

// TestReload: a certificate rewritten on disk is served by the next
// handshakes without a restart, and a broken rewrite keeps the old one.
func TestReload(t *testing.T) {
	p := newPKI(t)
	f := p.node("n1")
	m := mustLoad(t, f)
	before := m.Leaf().SerialNumber
	time.Sleep(10 * time.Millisecond) // a new mtime
	p.node("n1")
	m.Reload()
	after := m.Leaf().SerialNumber
	if after.Cmp(before) == 0 {
		t.Fatal("certificate not reloaded")
	}
	must(t, WriteFile(f.Cert, []byte("garbage"), true))
	m.Reload()
	if m.Leaf().SerialNumber.Cmp(after) != 0 {
		t.Fatal("a broken file replaced the loaded certificate")
	}
	// Without Reload, a handshake after PollInterval sees the change.
	p.node("n1")
	time.Sleep(PollInterval + 50*time.Millisecond)
	admin := mustLoad(t, p.issue("alice", CertRequest{Role: RoleAdmin}))
	var seen *x509.Certificate
	cfg := admin.ClientConfig("127.0.0.1")
	cfg.VerifyConnection = func(cs tls.ConnectionState) error { seen = cs.PeerCertificates[0]; return nil }
	if cerr, serr := handshake(m.ServerConfig(nil), cfg); cerr != nil || serr != nil {
		t.Fatal(cerr, serr)
	}
	if seen == nil || seen.SerialNumber.Cmp(after) == 0 {
		t.Fatal("handshake after PollInterval served the old certificate")
	}
}

// callCtx is a gRPC server context whose peer presented cert.
func callCtx(cert *x509.Certificate) context.Context {
	info := credentials.TLSInfo{State: tls.ConnectionState{VerifiedChains: [][]*x509.Certificate{{cert}}}}
	return peer.NewContext(context.Background(), &peer.Peer{Addr: &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 1}, AuthInfo: info})
}

func TestAuthorizer(t *testing.T) {
	p := newPKI(t)
	leaf := func(name string, req CertRequest) *x509.Certificate { return mustLoad(t, p.issue(name, req)).Leaf() }
	node := leaf("n1", CertRequest{Role: RoleNode})
	admin := leaf("alice", CertRequest{Role: RoleAdmin})
	reader := leaf("bob", CertRequest{Role: RoleReader})
	trainer := leaf("ci", CertRequest{Role: RoleTrainer, Jobs: []string{"mnist"}})
	series := leaf("exp", CertRequest{Role: RoleTrainer, Jobs: []string{"exp-*"}}) // issue 35: a job pattern
	put := func(k string) *pb.PutRequest { return &pb.PutRequest{Key: []byte(k), Value: []byte("v")} }
	cases := []struct {
		name   string
		cert   *x509.Certificate
		method string
		req    any
		peer   bool // NodeOnly authorizer
		ok     bool
	}{
		{"admin put", admin, "/raftps.v1.KV/Put", put("/x"), false, true},
		{"admin cancel", admin, "/raftps.v1.Master/CancelJob", &pb.CancelJobRequest{Name: "mnist"}, false, true},
		{"admin internal", admin, "/raftps.v1.Internal/ForwardApply", &pb.ForwardApplyRequest{}, false, false},
		{"admin on peer port", admin, "/raftps.v1.CheckpointStore/GetBlob", &pb.GetBlobRequest{}, true, false},
		{"node internal", node, "/raftps.v1.Internal/ForwardApply", &pb.ForwardApplyRequest{}, true, true},
		{"node put", node, "/raftps.v1.KV/Put", put("/x"), false, true},
		{"reader get", reader, "/raftps.v1.KV/Range", &pb.RangeRequest{Key: []byte("/x")}, false, true},
		{"reader status", reader, "/raftps.v1.Cluster/Status", &pb.StatusRequest{}, false, true},
		{"reader member remove", reader, "/raftps.v1.Cluster/MemberRemove", &pb.MemberRemoveRequest{Id: "n2"}, false, false},
		{"reader member add", reader, "/raftps.v1.Cluster/MemberAdd", &pb.MemberAddRequest{Id: "n4"}, false, false},
		{"trainer member promote", trainer, "/raftps.v1.Cluster/MemberPromote", &pb.MemberPromoteRequest{Id: "n4"}, false, false},
		{"admin member promote", admin, "/raftps.v1.Cluster/MemberPromote", &pb.MemberPromoteRequest{Id: "n4"}, false, true},
		{"reader list jobs", reader, "/raftps.v1.Master/ListJobs", &pb.ListJobsRequest{}, false, true},
		{"reader put", reader, "/raftps.v1.KV/Put", put("/x"), false, false},
		{"reader etcd put", reader, "/etcdserverpb.KV/Put", nil, false, false},
		{"reader submit", reader, "/raftps.v1.Master/SubmitJob", &pb.SubmitJobRequest{}, false, false},
		{"reader push", reader, "/raftps.v1.PServer/Push", &pb.PushRequest{Job: "mnist"}, false, false},
		{"reader checkpoint blob", reader, "/raftps.v1.CheckpointStore/GetBlob", &pb.GetBlobRequest{}, false, true},
		{"reader put blob", reader, "/raftps.v1.CheckpointStore/PutBlob", nil, false, false},
		{"trainer own key", trainer, "/raftps.v1.KV/Put", put(schema.TrainerKey("mnist", "ci")), false, true},
		{"trainer key of a trainer named ci-x", trainer, "/raftps.v1.KV/Put", put(schema.TrainerKey("mnist", "ci-x")), false, false},
		{"trainer other's key", trainer, "/raftps.v1.KV/Put", put(schema.TrainerKey("mnist", "n1-1")), false, false},
		{"trainer other job's key", trainer, "/raftps.v1.KV/Put", put(schema.TrainerKey("cifar", "ci")), false, false},
		// issue 35: a trainer's raftps.torch.Store (elastic allreduce) writes under its jobs' prefix.
		{"trainer torch store key", trainer, "/raftps.v1.KV/Put", put(TorchStorePrefix + "mnist/elastic/gen"), false, true},
		{"trainer torch store key of a series job", series, "/raftps.v1.KV/Put", put(TorchStorePrefix + "exp-3/gloo/1/rank_0"), false, true},
		{"trainer torch store other job", trainer, "/raftps.v1.KV/Put", put(TorchStorePrefix + "cifar/k"), false, false},
		{"trainer torch store job prefix of another", trainer, "/raftps.v1.KV/Put", put(TorchStorePrefix + "mnist2/k"), false, false},
		{"trainer torch store no key", trainer, "/raftps.v1.KV/Put", put(TorchStorePrefix + "mnist"), false, false},
		{"trainer torch store txn", trainer, "/raftps.v1.KV/Txn", &pb.TxnRequest{Success: []*pb.RequestOp{
			{Request: &pb.RequestOp_RequestPut{RequestPut: put(TorchStorePrefix + "mnist/ctr")}}}}, false, true},
		{"trainer torch store delete range", trainer, "/raftps.v1.KV/DeleteRange",
			&pb.DeleteRangeRequest{Key: []byte(TorchStorePrefix + "mnist/"), RangeEnd: []byte(TorchStorePrefix + "mnist0")}, false, false},
		{"trainer delete prefix", trainer, "/raftps.v1.KV/DeleteRange",
			&pb.DeleteRangeRequest{Key: []byte("/"), RangeEnd: []byte{0}}, false, false},
		{"trainer txn put elsewhere", trainer, "/raftps.v1.KV/Txn", &pb.TxnRequest{Success: []*pb.RequestOp{
			{Request: &pb.RequestOp_RequestPut{RequestPut: put("/jobs/mnist/spec")}}}}, false, false},
		{"trainer cancel", trainer, "/raftps.v1.Master/CancelJob", &pb.CancelJobRequest{Name: "mnist"}, false, false},
		{"trainer push own job", trainer, "/raftps.v1.PServer/Push", &pb.PushRequest{Job: "mnist", Trainer: "ci"}, false, true},
		{"trainer push as ci-x", trainer, "/raftps.v1.PServer/Push", &pb.PushRequest{Job: "mnist", Trainer: "ci-x"}, false, false},
		{"trainer leave step as another", trainer, "/raftps.v1.PServer/LeaveStep", &pb.LeaveStepRequest{Job: "mnist", Trainer: "n1-1"}, false, false},
		{"trainer pull own job", trainer, "/raftps.v1.PServer/Pull", &pb.PullRequest{Job: "mnist"}, false, true},
		{"trainer pull other job", trainer, "/raftps.v1.PServer/Pull", &pb.PullRequest{Job: "cifar"}, false, false},
		{"reader pull", reader, "/raftps.v1.PServer/Pull", &pb.PullRequest{Job: "cifar"}, false, false},
		{"trainer push other job", trainer, "/raftps.v1.PServer/Push", &pb.PushRequest{Job: "cifar"}, false, false},
		{"trainer task own job", trainer, "/raftps.v1.Master/GetTask", &pb.GetTaskRequest{Job: "mnist", Trainer: "ci"}, false, true},
		{"trainer task finished as ci-x", trainer, "/raftps.v1.Master/TaskFinished", &pb.TaskFinishedRequest{Job: "mnist", Trainer: "ci-x"}, false, false},
		{"trainer task failed as another", trainer, "/raftps.v1.Master/TaskFailed", &pb.TaskFailedRequest{Job: "mnist", Trainer: "other"}, false, false},
		{"trainer task other job", trainer, "/raftps.v1.Master/GetTask", &pb.GetTaskRequest{Job: "cifar"}, false, false},
		// issue 34: a trainer reports a suspect primary of its own jobs' slots only, as itself.
		{"trainer report suspect own job", trainer, "/raftps.v1.Master/ReportSuspect", &pb.ReportSuspectRequest{Job: "mnist", Slot: 1, Trainer: "ci"}, false, true},
		{"trainer report suspect other job", trainer, "/raftps.v1.Master/ReportSuspect", &pb.ReportSuspectRequest{Job: "cifar", Slot: 1, Trainer: "ci"}, false, false},
		{"trainer report suspect as another", trainer, "/raftps.v1.Master/ReportSuspect", &pb.ReportSuspectRequest{Job: "mnist", Slot: 1, Trainer: "n1-1"}, false, false},
		{"reader report suspect", reader, "/raftps.v1.Master/ReportSuspect", &pb.ReportSuspectRequest{Job: "mnist", Slot: 1}, false, false},
		{"node report suspect", node, "/raftps.v1.Master/ReportSuspect", &pb.ReportSuspectRequest{Job: "mnist", Slot: 1}, false, true},
		{"trainer get own job", trainer, "/raftps.v1.Master/GetJob", &pb.GetJobRequest{Name: "mnist"}, false, true},
		{"trainer get other job", trainer, "/raftps.v1.Master/GetJob", &pb.GetJobRequest{Name: "cifar"}, false, false},
		{"trainer watch other job", trainer, "/raftps.v1.Master/WatchJob", &pb.WatchJobRequest{Name: "cifar"}, false, false},
		{"reader get other job", reader, "/raftps.v1.Master/GetJob", &pb.GetJobRequest{Name: "cifar"}, false, true},
		{"trainer range own job", trainer, "/raftps.v1.KV/Range", rangeOf(schema.PrefixRange(schema.JobPrefix("mnist"))), false, true},
		{"trainer range own slot", trainer, "/raftps.v1.KV/Range", &pb.RangeRequest{Key: []byte(schema.SlotKey("mnist", 0))}, false, true},
		{"trainer range other job", trainer, "/raftps.v1.KV/Range", rangeOf(schema.PrefixRange(schema.JobPrefix("cifar"))), false, false},
		{"trainer range every job", trainer, "/raftps.v1.KV/Range", rangeOf(schema.PrefixRange(schema.JobsPrefix)), false, false},
		{"trainer range every key", trainer, "/raftps.v1.KV/Range", &pb.RangeRequest{Key: []byte{0}, RangeEnd: []byte{0}}, false, false},
		{"trainer range from mnist to the end", trainer, "/raftps.v1.KV/Range", &pb.RangeRequest{Key: []byte(schema.JobPrefix("mnist")), RangeEnd: []byte{0}}, false, false},
		{"trainer range nodes", trainer, "/raftps.v1.KV/Range", rangeOf(schema.PrefixRange(schema.NodesPrefix)), false, true},
		{"trainer watch other job keys", trainer, "/raftps.v1.Watch/Watch", &pb.WatchRequest{Key: []byte(schema.SlotKey("cifar", 0))}, false, false},
		{"trainer txn range other job", trainer, "/raftps.v1.KV/Txn", &pb.TxnRequest{Success: []*pb.RequestOp{
			{Request: &pb.RequestOp_RequestRange{RequestRange: &pb.RangeRequest{Key: []byte(schema.SlotKey("cifar", 0))}}}}}, false, false},
		{"trainer txn compare other job", trainer, "/raftps.v1.KV/Txn", &pb.TxnRequest{Compare: []*pb.Compare{{Key: []byte(schema.SlotKey("cifar", 0))}}}, false, false},
		{"trainer checkpoint manifest", trainer, "/raftps.v1.CheckpointStore/GetManifest", &pb.GetManifestRequest{Key: "cifar/1/0"}, false, false},
		{"trainer checkpoint blob", trainer, "/raftps.v1.CheckpointStore/GetBlob", &pb.GetBlobRequest{}, false, false},
		{"reader checkpoint manifest", reader, "/raftps.v1.CheckpointStore/GetManifest", &pb.GetManifestRequest{Key: "cifar/1/0"}, false, true},
		{"trainer etcd range", trainer, "/etcdserverpb.KV/Range", nil, false, false},
		{"trainer etcd watch", trainer, "/etcdserverpb.Watch/Watch", nil, false, false},
		{"trainer etcd lease keepalive", trainer, "/etcdserverpb.Lease/LeaseKeepAlive", nil, false, false},
		{"reader etcd hash", reader, "/etcdserverpb.Maintenance/HashKV", nil, false, false},
		{"trainer etcd hash", trainer, "/etcdserverpb.Maintenance/Hash", nil, false, false},
		{"admin etcd hash", admin, "/etcdserverpb.Maintenance/HashKV", nil, false, true},
		{"trainer lease grant", trainer, "/raftps.v1.Lease/LeaseGrant", &pb.LeaseGrantRequest{Ttl: 5}, false, true},
		{"trainer lease grant an hour", trainer, "/raftps.v1.Lease/LeaseGrant", &pb.LeaseGrantRequest{Ttl: 3600}, false, false},
		{"admin lease grant an hour", admin, "/raftps.v1.Lease/LeaseGrant", &pb.LeaseGrantRequest{Ttl: 3600}, false, true},
		// The service checks the lease's owner (CheckLease).
		{"trainer lease revoke", trainer, "/raftps.v1.Lease/LeaseRevoke", &pb.LeaseRevokeRequest{Id: 1}, false, true},
		{"reader lease revoke", reader, "/raftps.v1.Lease/LeaseRevoke", &pb.LeaseRevokeRequest{Id: 1}, false, false},
		{"trainer forward", trainer, "/raftps.v1.Internal/ForwardApply", &pb.ForwardApplyRequest{}, false, false},
		{"pattern own key exp-1", series, "/raftps.v1.KV/Put", put(schema.TrainerKey("exp-1", "exp")), false, true},
		{"pattern own key other", series, "/raftps.v1.KV/Put", put(schema.TrainerKey("other", "exp")), false, false},
		{"pattern push exp-2", series, "/raftps.v1.PServer/Push", &pb.PushRequest{Job: "exp-2", Trainer: "exp"}, false, true},
		{"pattern push other", series, "/raftps.v1.PServer/Push", &pb.PushRequest{Job: "other", Trainer: "exp"}, false, false},
		{"pattern task exp-1", series, "/raftps.v1.Master/GetTask", &pb.GetTaskRequest{Job: "exp-1", Trainer: "exp"}, false, true},
		{"pattern get job exp-3", series, "/raftps.v1.Master/GetJob", &pb.GetJobRequest{Name: "exp-3"}, false, true},
		{"pattern get job exp", series, "/raftps.v1.Master/GetJob", &pb.GetJobRequest{Name: "exp"}, false, false},
		{"pattern range exp-1", series, "/raftps.v1.KV/Range", rangeOf(schema.PrefixRange(schema.JobPrefix("exp-1"))), false, true},
		{"pattern range other", series, "/raftps.v1.KV/Range", rangeOf(schema.PrefixRange(schema.JobPrefix("other"))), false, false},
		{"pattern range every exp- job", series, "/raftps.v1.KV/Range", rangeOf(schema.PrefixRange(schema.JobsPrefix + "exp-")), false, false},
		{"pattern range every job", series, "/raftps.v1.KV/Range", rangeOf(schema.PrefixRange(schema.JobsPrefix)), false, false},
		{"unknown method", admin, "/raftps.v1.KV/Nope", nil, false, false},
		{"unknown method node", node, "/raftps.v1.KV/Nope", nil, false, true},
		{"unknown method reader", reader, "/raftps.v1.KV/Nope", nil, false, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			a := &Authorizer{NodeOnly: tc.peer}
			called := false
			_, err := a.UnaryInterceptor()(callCtx(tc.cert), tc.req, &grpc.UnaryServerInfo{FullMethod: tc.method},
				func(context.Context, any) (any, error) { called = true; return nil, nil })
			if tc.ok != (err == nil) || called != tc.ok {
				t.Fatalf("err %v, handler called %v; want allowed=%v", err, called, tc.ok)
			}
			if err != nil {
				if status.Code(err) != codes.PermissionDenied {
					t.Fatalf("code %v, want PermissionDenied", status.Code(err))
				}
				msg := status.Convert(err).Message()
				if !contains(msg, tc.method) || !contains(msg, IdentityOf(tc.cert).Role) {
					t.Fatalf("message %q does not name the method and role", msg)
				}
			}
		})
	}
	// No verified certificate (a server without TLS) is refused.
	if _, err := (&Authorizer{}).UnaryInterceptor()(context.Background(), nil, &grpc.UnaryServerInfo{FullMethod: "/raftps.v1.KV/Range"},
		func(context.Context, any) (any, error) { return nil, nil }); status.Code(err) != codes.PermissionDenied {
		t.Fatalf("no certificate: %v", err)
	}
}

func contains(s, sub string) bool { return strings.Contains(s, sub) }

func rangeOf(key, end []byte) *pb.RangeRequest { return &pb.RangeRequest{Key: key, RangeEnd: end} }

// fakeStream is a ServerStream that receives msgs in order.
type fakeStream struct {
	grpc.ServerStream
	ctx  context.Context
	msgs []*pb.PushRequest
}

func (s *fakeStream) Context() context.Context { return s.ctx }
func (s *fakeStream) RecvMsg(m any) error {
	if len(s.msgs) == 0 {
		return errors.New("EOF")
	}
	proto.Merge(m.(*pb.PushRequest), s.msgs[0])
	s.msgs = s.msgs[1:]
	return nil
}

// TestAuthorizerStream: each message of a trainer's push stream is
// checked; one for another job ends the stream with PermissionDenied.
func TestAuthorizerStream(t *testing.T) {
	p := newPKI(t)
	trainer := mustLoad(t, p.issue("ci", CertRequest{Role: RoleTrainer, Jobs: []string{"mnist"}})).Leaf()
	ss := &fakeStream{ctx: callCtx(trainer), msgs: []*pb.PushRequest{{Job: "mnist", Trainer: "ci"}, {Job: "cifar", Trainer: "ci"}}}
	got := 0
	err := (&Authorizer{}).StreamInterceptor()(nil, ss, &grpc.StreamServerInfo{FullMethod: "/raftps.v1.PServer/PushStream"},
		func(_ any, s grpc.ServerStream) error {
			for {
				var m pb.PushRequest
				if err := s.RecvMsg(&m); err != nil {
					return err
				}
				got++
			}
		})
	if got != 1 || status.Code(err) != codes.PermissionDenied {
		t.Fatalf("received %d, err %v; want 1 and PermissionDenied", got, err)
	}
}
