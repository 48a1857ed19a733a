package node

import (
	"context"
	"errors"
	"io"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	etcdpb "go.etcd.io/etcd/api/v3/etcdserverpb"

	pb "github.com/raftps/raftps/api/raftpspb"
	"github.com/raftps/raftps/gossip"
	"github.com/raftps/raftps/schema"
	"github.com/raftps/raftps/security"
)

// rolePKI holds a certificate per attacker of issue 32: admin, a second
// node, a trainer of job-a ("ta"), a trainer of job-b ("tb"), a reader.
type rolePKI struct {
	node, node2, admin, reader, ta, tb security.Files
}

func newRolePKI(t *testing.T) rolePKI {
	t.Helper()
	dir := t.TempDir()
	nodes, admin, err := security.Dev(dir, []string{"n1", "n2"})
	if err != nil {
		t.Fatal(err)
	}
	ca, err := security.LoadCA(filepath.Join(dir, "ca.pem"), filepath.Join(dir, "ca-key.pem"))
	if err != nil {
		t.Fatal(err)
	}
	issue := func(name string, req security.CertRequest) security.Files {
		req.Name = name
		f, err := security.IssueFiles(ca, dir, req)
		if err != nil {
			t.Fatal(err)
		}
		return f
	}
	return rolePKI{node: nodes["n1"], node2: nodes["n2"], admin: admin,
		reader: issue("rd", security.CertRequest{Role: security.RoleReader}),
		ta:     issue("ta", security.CertRequest{Role: security.RoleTrainer, Jobs: []string{"job-a"}}),
		tb:     issue("tb", security.CertRequest{Role: security.RoleTrainer, Jobs: []string{"job-b"}})}
}

// mustOpenTLS opens a single mutual-TLS node n1 of p (roles server and
// pserver) and waits for it to lead.
func mustOpenTLS(t *testing.T, p rolePKI) *Node {
	t.Helper()
	cfg := testConfig(t, "n1")
	cfg.TLS = p.node
	cfg.Roles = []string{gossip.RoleServer, gossip.RolePServer} // the pserver port serves PServer
	return mustOpen(t, cfg)
}

// dialAs dials addr presenting f's certificate.
func dialAs(t *testing.T, addr string, f security.Files) *grpc.ClientConn {
	t.Helper()
	m, err := security.Load(f, nil)
	if err != nil {
		t.Fatal(err)
	}
	cc, err := grpc.NewClient(addr, m.DialOptions()...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cc.Close() })
	return cc
}

func ctxFor(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// keepAliveOnce sends one keep-alive of id on a new stream and returns
// the answer's error.
func keepAliveOnce(ctx context.Context, cc *grpc.ClientConn, id int64) error {
	s, err := pb.NewLeaseClient(cc).LeaseKeepAlive(ctx)
	if err != nil {
		return err
	}
	return sendRecv(s, &pb.LeaseKeepAliveRequest{Id: id}, new(pb.LeaseKeepAliveResponse))
}

// sendRecv sends req on s and receives one answer into resp: the
// stream's status if the server ended it (a refused stream makes Send
// return io.EOF; Recv then returns the status).
func sendRecv(s grpc.ClientStream, req, resp any) error {
	defer func() { _ = s.CloseSend() }()
	if err := s.SendMsg(req); err != nil && !errors.Is(err, io.EOF) {
		return err
	}
	return s.RecvMsg(resp)
}

// TestRPCTableCoversServers (issue 32, "close the class"): every method
// registered on the node's client, node-to-node and pserver gRPC servers
// has a row in security's RPC table, and every row is a method one of
// them serves (no stale rows).
func TestRPCTableCoversServers(t *testing.T) {
	n := mustOpenTLS(t, newRolePKI(t))
	table := security.RPCTable()
	served := map[string]bool{}
	for name, srv := range map[string]*grpc.Server{"client": n.client, "peer": n.peer, "pserver": n.pserver} {
		for svc, info := range srv.GetServiceInfo() {
			for _, m := range info.Methods {
				full := "/" + svc + "/" + m.Name
				served[full] = true
				if _, ok := table[full]; !ok {
					t.Errorf("%s server registers %s, which is not in the RPC table (security/rpctable.go)", name, full)
				}
			}
		}
	}
	for m := range table {
		if !served[m] {
			t.Errorf("RPC table row %s is a method no server of the node registers", m)
		}
	}
	if len(served) < 60 {
		t.Fatalf("only %d methods served: the walk found too few", len(served))
	}
}

// TestLeaseOwnership (issue 32 hole 7): a lease belongs to the
// certificate that granted it. A trainer of job B cannot keep alive,
// revoke or read a job-A trainer's lease, nor a node's own; a reader may
// read it but not keep it alive; admin and node may act on any; without a
// certificate nothing connects. Ids are random, not sequential. Before,
// any trainer kept any lease alive.
func TestLeaseOwnership(t *testing.T) {
	p := newRolePKI(t)
	n := mustOpenTLS(t, p)
	ctx := ctxFor(t)
	addr := n.GRPCAddr()
	ta, tb, rd := dialAs(t, addr, p.ta), dialAs(t, addr, p.tb), dialAs(t, addr, p.reader)

	var ids []int64
	for range 3 {
		g, err := pb.NewLeaseClient(ta).LeaseGrant(ctx, &pb.LeaseGrantRequest{Ttl: 30})
		if err != nil {
			t.Fatalf("trainer A grant: %v", err)
		}
		ids = append(ids, g.Id)
	}
	if ids[1] == ids[0]+1 && ids[2] == ids[1]+1 {
		t.Fatalf("lease ids %v are sequential: guessable", ids)
	}
	id := ids[0]
	own, err := n.Store().LeaseGrant(ctx, &pb.LeaseGrantRequest{Ttl: 30}) // a node's own lease: no owner
	if err != nil {
		t.Fatal(err)
	}

	denied := func(who string, err error) {
		t.Helper()
		if status.Code(err) != codes.PermissionDenied {
			t.Errorf("%s: %v, want PermissionDenied", who, err)
		}
	}
	for _, lease := range []int64{id, own.Id} {
		denied("trainer B keep-alive", keepAliveOnce(ctx, tb, lease))
		_, err = pb.NewLeaseClient(tb).LeaseTimeToLive(ctx, &pb.LeaseTimeToLiveRequest{Id: lease, Keys: true})
		denied("trainer B time-to-live", err)
		_, err = pb.NewLeaseClient(tb).LeaseRevoke(ctx, &pb.LeaseRevokeRequest{Id: lease})
		denied("trainer B revoke", err)
		denied("reader keep-alive", keepAliveOnce(ctx, rd, lease))
		if _, err := pb.NewLeaseClient(rd).LeaseTimeToLive(ctx, &pb.LeaseTimeToLiveRequest{Id: lease}); err != nil {
			t.Errorf("reader time-to-live: %v, want allowed (a reader reads every lease)", err)
		}
	}
	// etcd's Lease API: no trainer's (the RPC table), a reader reads.
	eka, err := etcdpb.NewLeaseClient(tb).LeaseKeepAlive(ctx)
	if err == nil {
		err = sendRecv(eka, &etcdpb.LeaseKeepAliveRequest{ID: id}, new(etcdpb.LeaseKeepAliveResponse))
	}
	denied("trainer B etcd keep-alive", err)
	_, err = etcdpb.NewLeaseClient(tb).LeaseTimeToLive(ctx, &etcdpb.LeaseTimeToLiveRequest{ID: id, Keys: true})
	denied("trainer B etcd time-to-live", err)
	if r, err := etcdpb.NewLeaseClient(rd).LeaseTimeToLive(ctx, &etcdpb.LeaseTimeToLiveRequest{ID: id}); err != nil || r.TTL <= 0 {
		t.Errorf("reader etcd time-to-live: %v %v, want the lease's TTL", r, err)
	}
	denied("trainer A keep-alive of the node's lease", keepAliveOnce(ctx, ta, own.Id))
	if err := keepAliveOnce(ctx, ta, id); err != nil {
		t.Errorf("trainer A keep-alive of its own lease: %v", err)
	}
	if _, err := pb.NewLeaseClient(ta).LeaseTimeToLive(ctx, &pb.LeaseTimeToLiveRequest{Id: id}); err != nil {
		t.Errorf("trainer A time-to-live of its own lease: %v", err)
	}
	for who, f := range map[string]security.Files{"admin": p.admin, "node n2": p.node2} {
		if err := keepAliveOnce(ctx, dialAs(t, addr, f), id); err != nil {
			t.Errorf("%s keep-alive of trainer A's lease: %v", who, err)
		}
	}
	if _, err := pb.NewLeaseClient(ta).LeaseRevoke(ctx, &pb.LeaseRevokeRequest{Id: id}); err != nil {
		t.Errorf("trainer A revoke of its own lease: %v", err)
	}
	if _, ok := n.Store().FSM().Lease(id); ok {
		t.Error("trainer A's lease outlived its revoke")
	}
	// No certificate: the handshake fails before any call.
	cc, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	if err := keepAliveOnce(ctx, cc, ids[1]); status.Code(err) != codes.Unavailable {
		t.Errorf("plaintext keep-alive: %v, want Unavailable (no TLS handshake)", err)
	}
}

// TestTrainerLeaseLimits (issue 32): a trainer's leases are bounded in
// TTL (PermissionDenied naming the limit) and in count (ResourceExhausted from the FSM); an admin's are not.
// Before, a trainer granted unlimited leases of any TTL.
func TestTrainerLeaseLimits(t *testing.T) {
	p := newRolePKI(t)
	n := mustOpenTLS(t, p)
	ctx := ctxFor(t)
	ta, admin := pb.NewLeaseClient(dialAs(t, n.GRPCAddr(), p.ta)), pb.NewLeaseClient(dialAs(t, n.GRPCAddr(), p.admin))
	if _, err := ta.LeaseGrant(ctx, &pb.LeaseGrantRequest{Ttl: 3600}); status.Code(err) != codes.PermissionDenied ||
		!strings.Contains(err.Error(), "300") {
		t.Errorf("trainer grant of an hour: %v, want PermissionDenied naming the limit", err)
	}
	if _, err := admin.LeaseGrant(ctx, &pb.LeaseGrantRequest{Ttl: 3600}); err != nil {
		t.Errorf("admin grant of an hour: %v", err)
	}
	for i := range security.TrainerMaxLeases {
		if _, err := ta.LeaseGrant(ctx, &pb.LeaseGrantRequest{Ttl: 60}); err != nil {
			t.Fatalf("trainer grant %d: %v", i, err)
		}
	}
	if _, err := ta.LeaseGrant(ctx, &pb.LeaseGrantRequest{Ttl: 60}); status.Code(err) != codes.ResourceExhausted {
		t.Fatalf("trainer grant past %d leases: %v, want ResourceExhausted", security.TrainerMaxLeases, err)
	}
	// Another trainer has its own count; admin none.
	if _, err := pb.NewLeaseClient(dialAs(t, n.GRPCAddr(), p.tb)).LeaseGrant(ctx, &pb.LeaseGrantRequest{Ttl: 60}); err != nil {
		t.Errorf("trainer B grant: %v", err)
	}
	if _, err := admin.LeaseGrant(ctx, &pb.LeaseGrantRequest{Ttl: 60}); err != nil {
		t.Errorf("admin grant: %v", err)
	}
}

// TestTrainerReadsOwnJobs (issue 32 hole 8): a trainer of job A reads
// job A's keys, status and parameters, and none of job B's: KV ranges and
// watches under /jobs/job-b/, the job's status and events, its
// checkpoints, its pserver slots. A reader reads both (an operator's
// view). Before, a trainer read every job.
func TestTrainerReadsOwnJobs(t *testing.T) {
	p := newRolePKI(t)
	n := mustOpenTLS(t, p)
	ctx := ctxFor(t)
	for _, j := range []string{"job-a", "job-b"} {
		if _, err := n.Store().Put(ctx, &pb.PutRequest{Key: []byte(schema.SlotKey(j, 0)), Value: []byte(`{}`)}); err != nil {
			t.Fatal(err)
		}
	}
	ta, rd := dialAs(t, n.GRPCAddr(), p.ta), dialAs(t, n.GRPCAddr(), p.reader)
	rangeJob := func(cc *grpc.ClientConn, job string) error {
		key, end := schema.PrefixRange(schema.JobPrefix(job))
		_, err := pb.NewKVClient(cc).Range(ctx, &pb.RangeRequest{Key: key, RangeEnd: end})
		return err
	}
	denied := func(what string, err error) {
		t.Helper()
		if status.Code(err) != codes.PermissionDenied {
			t.Errorf("trainer A %s: %v, want PermissionDenied", what, err)
		}
	}
	if err := rangeJob(ta, "job-a"); err != nil {
		t.Errorf("trainer A range of job-a: %v", err)
	}
	denied("range of job-b", rangeJob(ta, "job-b"))
	_, err := pb.NewKVClient(ta).Range(ctx, &pb.RangeRequest{Key: []byte("/"), RangeEnd: []byte{0}})
	denied("range of every key", err)
	w, err := pb.NewWatchClient(ta).Watch(ctx, &pb.WatchRequest{Key: []byte(schema.SlotKey("job-b", 0))})
	if err == nil {
		_, err = w.Recv()
	}
	denied("watch of job-b", err)
	_, err = pb.NewMasterClient(ta).GetJob(ctx, &pb.GetJobRequest{Name: "job-b"})
	denied("GetJob job-b", err)
	wj, err := pb.NewMasterClient(ta).WatchJob(ctx, &pb.WatchJobRequest{Name: "job-b"})
	if err == nil {
		_, err = wj.Recv()
	}
	denied("WatchJob job-b", err)
	_, err = pb.NewCheckpointStoreClient(ta).GetManifest(ctx, &pb.GetManifestRequest{Key: "job-b/1/0"})
	denied("checkpoint manifest of job-b", err)
	_, err = pb.NewPServerClient(dialAs(t, n.PServerAddr(), p.ta)).Pull(ctx, &pb.PullRequest{Job: "job-b"})
	denied("Pull of job-b", err)

	// The reader reads both jobs: its answers are the handlers' (the
	// jobs were never submitted: NotFound), not PermissionDenied.
	if err := rangeJob(rd, "job-b"); err != nil {
		t.Errorf("reader range of job-b: %v", err)
	}
	if _, err := pb.NewMasterClient(rd).GetJob(ctx, &pb.GetJobRequest{Name: "job-b"}); status.Code(err) == codes.PermissionDenied {
		t.Errorf("reader GetJob job-b: %v, want the handler's answer", err)
	}
	if _, err := pb.NewCheckpointStoreClient(rd).GetManifest(ctx, &pb.GetManifestRequest{Key: "job-b/1/0"}); status.Code(err) == codes.PermissionDenied {
		t.Errorf("reader manifest of job-b: %v, want the handler's answer", err)
	}
}

// TestLeaseOwnerSurvivesRestart (issue 32 hole 7): the owner recorded at
// the grant survives a Raft snapshot and a restart of the node: trainer B
// still may not keep trainer A's lease alive, trainer A still may.
func TestLeaseOwnerSurvivesRestart(t *testing.T) {
	p := newRolePKI(t)
	cfg := testConfig(t, "n1")
	cfg.TLS = p.node
	n := mustOpen(t, cfg)
	ctx := ctxFor(t)
	g, err := pb.NewLeaseClient(dialAs(t, n.GRPCAddr(), p.ta)).LeaseGrant(ctx, &pb.LeaseGrantRequest{Ttl: 60})
	if err != nil {
		t.Fatal(err)
	}
	if err := n.Store().Raft().Snapshot().Error(); err != nil {
		t.Fatalf("snapshot: %v", err)
	}
	if err := n.Close(); err != nil {
		t.Fatal(err)
	}
	n = mustOpen(t, cfg)
	if err := keepAliveOnce(ctx, dialAs(t, n.GRPCAddr(), p.tb), g.Id); status.Code(err) != codes.PermissionDenied {
		t.Errorf("trainer B keep-alive after a restart: %v, want PermissionDenied", err)
	}
	if err := keepAliveOnce(ctx, dialAs(t, n.GRPCAddr(), p.ta), g.Id); err != nil {
		t.Errorf("trainer A keep-alive after a restart: %v", err)
	}
}

// TestReplicaNodeOnly (issue 34): the Replica service (a primary's
// updates to its backups) is served on the pserver port to nodes only: a
// trainer's and a reader's certificate get PermissionDenied, a node's
// reaches the service (which holds no backup of the slot: the stream
// ends FailedPrecondition, not PermissionDenied).
func TestReplicaNodeOnly(t *testing.T) {
	p := newRolePKI(t)
	n := mustOpenTLS(t, p)
	ctx := ctxFor(t)
	replicate := func(f security.Files) error {
		s, err := pb.NewReplicaClient(dialAs(t, n.PServerAddr(), f)).Replicate(ctx)
		if err != nil {
			return err
		}
		return sendRecv(s, &pb.ReplicateRequest{Job: "job-a", Slot: 0, Epoch: 1, Seq: 1, LrScale: 1}, new(pb.ReplicateAck))
	}
	for name, f := range map[string]security.Files{"trainer": p.ta, "reader": p.reader, "admin": p.admin} {
		if err := replicate(f); status.Code(err) != codes.PermissionDenied {
			t.Errorf("%s Replicate: %v, want PermissionDenied", name, err)
		}
	}
	if err := replicate(p.node2); status.Code(err) != codes.FailedPrecondition {
		t.Errorf("node Replicate of a slot it does not back up: %v, want FailedPrecondition", err)
	}
}
