package etcdapi_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/raft"
	etcdpb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	pb "github.com/raftps/raftps/api/raftpspb"
	"github.com/raftps/raftps/fsm"
	"github.com/raftps/raftps/gossip"
	"github.com/raftps/raftps/internal/testing/localcluster"
	"github.com/raftps/raftps/internal/testing/testutil"
	"github.com/raftps/raftps/internal/version"
	"github.com/raftps/raftps/raftstore"
	"github.com/raftps/raftps/raftstore/etcdapi"
	"github.com/raftps/raftps/raftstore/service"
	"github.com/raftps/raftps/schema"
	"github.com/raftps/raftps/security"
)

type fakeMembers map[string]string

func (m fakeMembers) Member(id string) (gossip.Member, bool) {
	a, ok := m[id]
	return gossip.Member{Meta: gossip.Meta{ID: id, GRPCAddr: a}}, ok
}

type env struct {
	store *raftstore.Store
	srv   *etcdapi.Server
	addr  string
	cli   *clientv3.Client
	raft  *service.Service // raftps' own KV service on the same port
	conn  *grpc.ClientConn
}

// newEnv starts a single-node store serving etcd's API and raftps' own on
// one loopback port, with etcd's Go client connected.
func newEnv(t *testing.T, progress time.Duration, opts ...func(*raftstore.Config)) *env {
	t.Helper()
	cfg := raftstore.DefaultConfig()
	cfg.ID, cfg.DataDir, cfg.RaftAddr, cfg.Bootstrap = "n1", t.TempDir(), "127.0.0.1:0", true
	cfg.Logger = testutil.Logger(t)
	for _, o := range opts {
		o(&cfg)
	}
	s, err := raftstore.New(cfg, fsm.New(slog.New(slog.DiscardHandler)), nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Open(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := s.WaitForLeader(ctx); err != nil {
		t.Fatal(err)
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	g := grpc.NewServer()
	e := &env{store: s, addr: lis.Addr().String()}
	e.srv = etcdapi.New(s, fakeMembers{"n1": e.addr})
	e.srv.ProgressInterval = progress
	e.srv.Register(g)
	service.New(s).Register(g)
	go g.Serve(lis)
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{e.addr}, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	e.cli = cli
	t.Cleanup(func() { cli.Close(); g.Stop(); s.Close() })
	return e
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func mustPut(t *testing.T, cli *clientv3.Client, k, v string, opts ...clientv3.OpOption) int64 {
	t.Helper()
	r, err := cli.Put(ctxT(t), k, v, opts...)
	if err != nil {
		t.Fatalf("put %s: %v", k, err)
	}
	return r.Header.Revision
}

func kvsString(kvs []*mvccpb.KeyValue) string {
	var b bytes.Buffer
	for _, kv := range kvs {
		fmt.Fprintf(&b, "%s=%s ", kv.Key, kv.Value)
	}
	return b.String()
}

// TestRangeAtRevision: a read at an old revision sees the keys as they
// were (a later put, a delete and a create undone); a compacted revision
// is ErrCompacted and one in the future ErrFutureRev, as etcd's client
// reports them.
func TestRangeAtRevision(t *testing.T) {
	e := newEnv(t, 0)
	ctx := ctxT(t)
	r1 := mustPut(t, e.cli, "/p/a", "1")
	mustPut(t, e.cli, "/p/b", "2")
	r3 := mustPut(t, e.cli, "/p/c", "3")
	if _, err := e.cli.Delete(ctx, "/p/b"); err != nil {
		t.Fatal(err)
	}
	mustPut(t, e.cli, "/p/a", "1b")
	mustPut(t, e.cli, "/p/d", "4")

	for _, tc := range []struct {
		rev  int64
		want string
	}{
		{r1, "/p/a=1 "},
		{r3, "/p/a=1 /p/b=2 /p/c=3 "},
		{0, "/p/a=1b /p/c=3 /p/d=4 "},
	} {
		resp, err := e.cli.Get(ctx, "/p/", clientv3.WithPrefix(), clientv3.WithRev(tc.rev))
		if err != nil {
			t.Fatalf("get rev %d: %v", tc.rev, err)
		}
		if got := kvsString(resp.Kvs); got != tc.want {
			t.Errorf("get --prefix at rev %d: %q, want %q", tc.rev, got, tc.want)
		}
	}
	// The old version keeps its own revisions.
	resp, err := e.cli.Get(ctx, "/p/a", clientv3.WithRev(r3))
	if err != nil || len(resp.Kvs) != 1 || resp.Kvs[0].ModRevision != r1 || resp.Kvs[0].Version != 1 {
		t.Fatalf("get /p/a at %d: %v %v", r3, resp, err)
	}
	if _, err := e.cli.Get(ctx, "/p/", clientv3.WithPrefix(), clientv3.WithRev(resp.Header.Revision+10)); !errors.Is(err, rpctypes.ErrFutureRev) {
		t.Fatalf("future revision: %v, want %v", err, rpctypes.ErrFutureRev)
	}
	if _, err := e.store.Compact(ctx, &pb.CompactRequest{Revision: r3}); err != nil {
		t.Fatal(err)
	}
	if _, err := e.cli.Get(ctx, "/p/", clientv3.WithPrefix(), clientv3.WithRev(r1)); !errors.Is(err, rpctypes.ErrCompacted) {
		t.Fatalf("compacted revision: %v, want %v", err, rpctypes.ErrCompacted)
	}
	if resp, err := e.cli.Get(ctx, "/p/", clientv3.WithPrefix(), clientv3.WithRev(r3)); err != nil || kvsString(resp.Kvs) != "/p/a=1 /p/b=2 /p/c=3 " {
		t.Fatalf("get at the compaction revision: %v %v", resp, err)
	}
}

// TestRangeOptions: sort, limit, count, keys-only and the revision
// filters follow etcd's rules (what concurrency.Mutex relies on).
func TestRangeOptions(t *testing.T) {
	e := newEnv(t, 0)
	ctx := ctxT(t)
	mustPut(t, e.cli, "/s/c", "x")
	rb := mustPut(t, e.cli, "/s/b", "yy")
	mustPut(t, e.cli, "/s/a", "z")
	mustPut(t, e.cli, "/s/b", "y2")

	first, err := e.cli.Get(ctx, "/s/", clientv3.WithFirstCreate()...)
	if err != nil || kvsString(first.Kvs) != "/s/c=x " || !first.More || first.Count != 3 {
		t.Fatalf("first create: %v %v", first, err)
	}
	last, err := e.cli.Get(ctx, "/s/", append(clientv3.WithLastCreate(), clientv3.WithMaxCreateRev(rb))...)
	if err != nil || kvsString(last.Kvs) != "/s/b=y2 " {
		t.Fatalf("last create <= %d: %v %v", rb, last, err)
	}
	desc, err := e.cli.Get(ctx, "/s/", clientv3.WithPrefix(), clientv3.WithSort(clientv3.SortByKey, clientv3.SortDescend), clientv3.WithLimit(2))
	if err != nil || kvsString(desc.Kvs) != "/s/c=x /s/b=y2 " || !desc.More || desc.Count != 3 {
		t.Fatalf("key descend limit 2: %v %v", desc, err)
	}
	byVersion, err := e.cli.Get(ctx, "/s/", clientv3.WithPrefix(), clientv3.WithSort(clientv3.SortByVersion, clientv3.SortDescend), clientv3.WithLimit(1))
	if err != nil || kvsString(byVersion.Kvs) != "/s/b=y2 " {
		t.Fatalf("version descend: %v %v", byVersion, err)
	}
	cnt, err := e.cli.Get(ctx, "/s/", clientv3.WithPrefix(), clientv3.WithCountOnly())
	if err != nil || cnt.Count != 3 || len(cnt.Kvs) != 0 {
		t.Fatalf("count only: %v %v", cnt, err)
	}
	keys, err := e.cli.Get(ctx, "/s/", clientv3.WithPrefix(), clientv3.WithKeysOnly(), clientv3.WithMinModRev(rb+1))
	if err != nil || kvsString(keys.Kvs) != "/s/a= /s/b= " {
		t.Fatalf("keys only, min mod rev: %v %v", keys, err)
	}
	if _, err := e.cli.Get(ctx, ""); !errors.Is(err, rpctypes.ErrEmptyKey) {
		t.Fatalf("empty key: %v, want %v", err, rpctypes.ErrEmptyKey)
	}
}

// TestTxn: compares on value, version, create and mod revision and lease
// pick the branch; the branch is one revision; etcd's duplicate-key rule
// holds; a nested txn is Unimplemented.
func TestTxn(t *testing.T) {
	e := newEnv(t, 0)
	ctx := ctxT(t)
	r1 := mustPut(t, e.cli, "/t/k", "v1")
	resp, err := e.cli.Txn(ctx).If(
		clientv3.Compare(clientv3.Value("/t/k"), "=", "v1"),
		clientv3.Compare(clientv3.Version("/t/k"), "=", 1),
		clientv3.Compare(clientv3.CreateRevision("/t/k"), "=", r1),
		clientv3.Compare(clientv3.ModRevision("/t/k"), "<", r1+1),
		clientv3.Compare(clientv3.LeaseValue("/t/k"), "=", clientv3.NoLease),
	).Then(clientv3.OpPut("/t/k", "v2"), clientv3.OpPut("/t/other", "o"), clientv3.OpGet("/t/", clientv3.WithPrefix())).
		Else(clientv3.OpGet("/t/k")).Commit()
	if err != nil || !resp.Succeeded || resp.Header.Revision != r1+1 {
		t.Fatalf("txn: %v %v", resp, err)
	}
	if got := kvsString(resp.Responses[2].GetResponseRange().Kvs); got != "/t/k=v2 /t/other=o " {
		t.Fatalf("range inside txn sees the txn's writes: %q", got)
	}
	resp, err = e.cli.Txn(ctx).If(clientv3.Compare(clientv3.Value("/t/k"), "=", "v1")).
		Then(clientv3.OpPut("/t/k", "never")).Else(clientv3.OpGet("/t/k")).Commit()
	if err != nil || resp.Succeeded || kvsString(resp.Responses[0].GetResponseRange().Kvs) != "/t/k=v2 " {
		t.Fatalf("failing txn: %v %v", resp, err)
	}
	_, err = e.cli.Txn(ctx).Then(clientv3.OpPut("/t/d", "1"), clientv3.OpPut("/t/d", "2")).Commit()
	if !errors.Is(err, rpctypes.ErrDuplicateKey) {
		t.Fatalf("duplicate put: %v, want %v", err, rpctypes.ErrDuplicateKey)
	}
	_, err = e.cli.Txn(ctx).Then(clientv3.OpPut("/t/x/1", "1"), clientv3.OpDelete("/t/x/", clientv3.WithPrefix())).Commit()
	if !errors.Is(err, rpctypes.ErrDuplicateKey) {
		t.Fatalf("put and delete of one key: %v, want %v", err, rpctypes.ErrDuplicateKey)
	}
	_, err = e.cli.Txn(ctx).Then(clientv3.OpTxn(nil, []clientv3.Op{clientv3.OpPut("/t/n", "1")}, nil)).Commit()
	if status.Code(err) != codes.Unimplemented || status.Convert(err).Message() == "" {
		t.Fatalf("nested txn: %v, want Unimplemented with a message", err)
	}
	if g, _ := e.cli.Get(ctx, "/t/n"); len(g.Kvs) != 0 {
		t.Fatal("refused txn wrote")
	}
}

// TestWatch: start_revision with prev_kv, the NODELETE filter, progress
// notifications and progress requests, a compacted start reported as
// etcd's client expects, and cancel.
func TestWatch(t *testing.T) {
	e := newEnv(t, 200*time.Millisecond)
	ctx := ctxT(t)
	r1 := mustPut(t, e.cli, "/w/a", "1")
	mustPut(t, e.cli, "/w/a", "2")
	if _, err := e.cli.Delete(ctx, "/w/a"); err != nil {
		t.Fatal(err)
	}
	wctx, wcancel := context.WithCancel(ctx)
	defer wcancel()
	wch := e.cli.Watch(wctx, "/w/", clientv3.WithPrefix(), clientv3.WithRev(r1), clientv3.WithPrevKV())
	var got []string
	for len(got) < 3 {
		wr := <-wch
		if err := wr.Err(); err != nil {
			t.Fatal(err)
		}
		for _, ev := range wr.Events {
			s := fmt.Sprintf("%s %s=%s", ev.Type, ev.Kv.Key, ev.Kv.Value)
			if ev.PrevKv != nil {
				s += " prev=" + string(ev.PrevKv.Value)
			}
			got = append(got, s)
		}
	}
	want := []string{"PUT /w/a=1", "PUT /w/a=2 prev=1", "DELETE /w/a= prev=2"}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("events %q, want %q", got, want)
	}

	// NODELETE and progress notify: after the put, an idle watcher is told
	// it has seen everything up to the store's revision.
	pch := e.cli.Watch(wctx, "/w/", clientv3.WithPrefix(), clientv3.WithFilterDelete(), clientv3.WithProgressNotify())
	rp := mustPut(t, e.cli, "/w/b", "1")
	if _, err := e.cli.Delete(ctx, "/w/b"); err != nil {
		t.Fatal(err)
	}
	rOther := mustPut(t, e.cli, "/other", "x")
	sawPut, sawProgress := false, false
	for !sawPut || !sawProgress {
		select {
		case wr := <-pch:
			if err := wr.Err(); err != nil {
				t.Fatal(err)
			}
			for _, ev := range wr.Events {
				if ev.Type != mvccpb.PUT || ev.Kv.ModRevision != rp {
					t.Fatalf("filtered watch got %v", ev)
				}
				sawPut = true
			}
			if wr.IsProgressNotify() && wr.Header.Revision >= rOther {
				sawProgress = true
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("no put/progress (put %v, progress %v)", sawPut, sawProgress)
		}
	}
	if err := e.cli.RequestProgress(wctx); err != nil {
		t.Fatal(err)
	}

	if _, err := e.store.Compact(ctx, &pb.CompactRequest{Revision: rOther}); err != nil {
		t.Fatal(err)
	}
	cw := e.cli.Watch(wctx, "/w/", clientv3.WithPrefix(), clientv3.WithRev(r1))
	select {
	case wr := <-cw:
		if !errors.Is(wr.Err(), rpctypes.ErrCompacted) || wr.CompactRevision != rOther {
			t.Fatalf("compacted watch: err %v compact %d, want %v at %d", wr.Err(), wr.CompactRevision, rpctypes.ErrCompacted, rOther)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("compacted watch: no answer")
	}
}

// TestLease: grant, attach, time-to-live with keys, keep-alive, revoke
// deletes the keys; unknown leases answer as etcd's do (TTL -1, TTL 0 on
// keep-alive, ErrLeaseNotFound on put and revoke).
func TestLease(t *testing.T) {
	e := newEnv(t, 0)
	ctx := ctxT(t)
	g, err := e.cli.Grant(ctx, 60)
	if err != nil || g.TTL != 60 {
		t.Fatalf("grant: %v %v", g, err)
	}
	mustPut(t, e.cli, "/l/k", "v", clientv3.WithLease(g.ID))
	ttl, err := e.cli.TimeToLive(ctx, g.ID, clientv3.WithAttachedKeys())
	if err != nil || ttl.GrantedTTL != 60 || ttl.TTL <= 0 || ttl.TTL > 60 || len(ttl.Keys) != 1 || string(ttl.Keys[0]) != "/l/k" {
		t.Fatalf("time to live: %+v %v", ttl, err)
	}
	ka, err := e.cli.KeepAliveOnce(ctx, g.ID)
	if err != nil || ka.TTL != 60 {
		t.Fatalf("keep alive: %v %v", ka, err)
	}
	ls, err := e.cli.Leases(ctx)
	if err != nil || len(ls.Leases) != 1 || ls.Leases[0].ID != g.ID {
		t.Fatalf("leases: %v %v", ls, err)
	}
	if _, err := e.cli.Revoke(ctx, g.ID); err != nil {
		t.Fatal(err)
	}
	if r, _ := e.cli.Get(ctx, "/l/k"); len(r.Kvs) != 0 {
		t.Fatal("revoke left the key")
	}
	if _, err := e.cli.Revoke(ctx, g.ID); !errors.Is(err, rpctypes.ErrLeaseNotFound) {
		t.Fatalf("revoke again: %v, want %v", err, rpctypes.ErrLeaseNotFound)
	}
	if _, err := e.cli.Put(ctx, "/l/k", "v", clientv3.WithLease(g.ID)); !errors.Is(err, rpctypes.ErrLeaseNotFound) {
		t.Fatalf("put with a revoked lease: %v, want %v", err, rpctypes.ErrLeaseNotFound)
	}
	if ttl, err := e.cli.TimeToLive(ctx, g.ID); err != nil || ttl.TTL != -1 {
		t.Fatalf("time to live of a revoked lease: %v %v, want TTL -1", ttl, err)
	}
	if _, err := e.cli.KeepAliveOnce(ctx, g.ID); !errors.Is(err, rpctypes.ErrLeaseNotFound) {
		t.Fatalf("keep alive of a revoked lease: %v, want %v", err, rpctypes.ErrLeaseNotFound)
	}
	if _, err := e.cli.Grant(ctx, 1<<40); !errors.Is(err, rpctypes.ErrLeaseTTLTooLarge) {
		t.Fatalf("huge TTL: %v, want %v", err, rpctypes.ErrLeaseTTLTooLarge)
	}
}

// TestRaftpsKeysSameValidation: raftps' own keys are the same store
// through both APIs, and a write through etcd's API is refused where
// raftps' own is (an over-size value), with nothing written.
func TestRaftpsKeysSameValidation(t *testing.T) {
	e := newEnv(t, 0)
	ctx := ctxT(t)
	conn, err := grpc.NewClient(e.addr, grpc.WithTransportCredentials(insecureCreds()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	kv := pb.NewKVClient(conn)
	job, node := schema.TrainerKey("mnist", "t1"), schema.NodeKey("n9")
	if _, err := kv.Put(ctx, &pb.PutRequest{Key: []byte(job), Value: []byte("mlp")}); err != nil {
		t.Fatal(err)
	}
	g, err := e.cli.Get(ctx, schema.JobsPrefix, clientv3.WithPrefix())
	if err != nil || kvsString(g.Kvs) != job+"=mlp " {
		t.Fatalf("etcd get of raftps' key: %v %v", g, err)
	}
	mustPut(t, e.cli, node, "x")
	r, err := kv.Range(ctx, &pb.RangeRequest{Key: []byte(node)})
	if err != nil || len(r.Kvs) != 1 || r.Header.Revision != g.Header.Revision+1 {
		t.Fatalf("raftps range of an etcd write: %v %v", r, err)
	}
	big := bytes.Repeat([]byte{'x'}, fsm.MaxValueSize+1)
	_, rerr := kv.Put(ctx, &pb.PutRequest{Key: []byte(job), Value: big})
	_, eerr := e.cli.Put(ctx, job, string(big))
	if status.Code(rerr) != codes.InvalidArgument || !errors.Is(eerr, rpctypes.ErrRequestTooLarge) {
		t.Fatalf("over-size value: raftps %v, etcd %v", rerr, eerr)
	}
	if g, _ := e.cli.Get(ctx, job); string(g.Kvs[0].Value) != "mlp" {
		t.Fatal("refused write changed the key")
	}
}

// TestClusterAndMaintenance: member list, status, hash-kv, snapshot, and
// Unimplemented with a message for what raftps does not serve.
func TestClusterAndMaintenance(t *testing.T) {
	e := newEnv(t, 0)
	ctx := ctxT(t)
	mustPut(t, e.cli, "/m/a", "1")
	ml, err := e.cli.MemberList(ctx)
	if err != nil || len(ml.Members) != 1 || ml.Members[0].Name != "n1" || ml.Members[0].ID != etcdapi.MemberID("n1") ||
		ml.Members[0].ClientURLs[0] != "http://"+e.addr || ml.Members[0].IsLearner {
		t.Fatalf("member list: %v %v", ml, err)
	}
	st, err := e.cli.Status(ctx, e.addr)
	if err != nil || st.Leader != etcdapi.MemberID("n1") || st.Header.MemberId != st.Leader || len(st.Errors) != 0 || st.RaftTerm == 0 {
		t.Fatalf("status: %v %v", st, err)
	}
	// raftps's own version beside the etcd API version (issue 37).
	var md metadata.MD
	if _, err := etcdpb.NewMaintenanceClient(e.cli.ActiveConnection()).Status(ctx, &etcdpb.StatusRequest{}, grpc.Header(&md)); err != nil ||
		len(md.Get(etcdapi.VersionHeader)) != 1 || md.Get(etcdapi.VersionHeader)[0] != version.Get().Version || st.Version != etcdapi.Version {
		t.Errorf("status: header %s = %v (%v), version %q; want raftps's %q in the header and the etcd API's %q in the answer",
			etcdapi.VersionHeader, md.Get(etcdapi.VersionHeader), err, st.Version, version.Get().Version, etcdapi.Version)
	}
	// The real size of the node's Raft data (issue 37: etcdctl endpoint status said 0 B).
	if st.DbSize <= 0 || st.DbSizeInUse != st.DbSize {
		t.Errorf("status: db size %d, in use %d; want the Raft data's bytes (> 0) in both", st.DbSize, st.DbSizeInUse)
	}
	h1, err := e.cli.HashKV(ctx, e.addr, 0)
	if err != nil {
		t.Fatal(err)
	}
	mustPut(t, e.cli, "/m/a", "2")
	h2, _ := e.cli.HashKV(ctx, e.addr, 0)
	hOld, _ := e.cli.HashKV(ctx, e.addr, h1.Header.Revision)
	if h1.Hash == h2.Hash || hOld.Hash != h1.Hash {
		t.Fatalf("hash kv: %d, after a put %d, at the old revision %d", h1.Hash, h2.Hash, hOld.Hash)
	}
	rc, err := e.cli.Snapshot(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	if _, err := buf.ReadFrom(rc); err != nil || buf.Len() < 32 {
		t.Fatalf("snapshot: %d bytes, %v", buf.Len(), err)
	}
	if (buf.Len()-32)%512 != 0 {
		t.Fatalf("snapshot of %d bytes: body not a multiple of 512 (etcdctl 3.4 refuses it)", buf.Len())
	}
	body, err := etcdapi.ParseSnapshot(buf.Bytes())
	if err != nil {
		t.Fatal(err)
	}
	bad := bytes.Clone(buf.Bytes())
	bad[10] ^= 1
	if _, err := etcdapi.ParseSnapshot(bad); !errors.Is(err, etcdapi.ErrBadSnapshot) {
		t.Fatalf("corrupt snapshot: %v, want ErrBadSnapshot", err)
	}
	restored := fsm.New(slog.New(slog.DiscardHandler))
	if err := restored.Restore(nopCloser{bytes.NewReader(body)}); err != nil {
		t.Fatalf("the snapshot (less its SHA-256) restores an FSM: %v", err)
	}
	if rr, err := restored.Range(&pb.RangeRequest{Key: []byte("/m/a")}); err != nil || string(rr.Kvs[0].Value) != "2" {
		t.Fatalf("restored snapshot: %v %v", rr, err)
	}
	for name, call := range map[string]func() error{
		"compact":    func() error { _, err := e.cli.Compact(ctx, 2); return err },
		"member add": func() error { _, err := e.cli.MemberAdd(ctx, []string{"http://127.0.0.1:1"}); return err },
		"defrag":     func() error { _, err := e.cli.Defragment(ctx, e.addr); return err },
		"move leader": func() error {
			_, err := e.cli.MoveLeader(ctx, 1)
			return err
		},
		"alarm activate": func() error {
			_, err := etcdpb.NewMaintenanceClient(e.cli.ActiveConnection()).Alarm(ctx,
				&etcdpb.AlarmRequest{Action: etcdpb.AlarmRequest_ACTIVATE, Alarm: etcdpb.AlarmType_NOSPACE})
			return err
		},
		"ignore value": func() error { _, err := e.cli.Put(ctx, "/m/a", "", clientv3.WithIgnoreValue()); return err },
		"hash": func() error {
			_, err := etcdpb.NewMaintenanceClient(e.cli.ActiveConnection()).Hash(ctx, &etcdpb.HashRequest{})
			return err
		},
		"downgrade": func() error {
			_, err := e.cli.Downgrade(ctx, clientv3.DowngradeValidate, "3.5.0")
			return err
		},
		"member remove":  func() error { _, err := e.cli.MemberRemove(ctx, 1); return err },
		"member update":  func() error { _, err := e.cli.MemberUpdate(ctx, 1, []string{"http://127.0.0.1:1"}); return err },
		"member promote": func() error { _, err := e.cli.MemberPromote(ctx, 1); return err },
		"auth status":    func() error { _, err := e.cli.AuthStatus(ctx); return err },
		"auth enable":    func() error { _, err := e.cli.AuthEnable(ctx); return err },
		"user add":       func() error { _, err := e.cli.UserAdd(ctx, "u", "p"); return err },
		"authenticate": func() error {
			_, err := etcdpb.NewAuthClient(e.cli.ActiveConnection()).Authenticate(ctx, &etcdpb.AuthenticateRequest{Name: "u", Password: "p"})
			return err
		},
		"compare with range_end": func() error {
			_, err := e.cli.Txn(ctx).If(clientv3.Compare(clientv3.Version("/m/"), ">", 0).WithPrefix()).Commit()
			return err
		},
		"range at a revision in a txn": func() error {
			_, err := e.cli.Txn(ctx).Then(clientv3.OpGet("/m/a", clientv3.WithRev(1))).Commit()
			return err
		},
		"range stream": func() error {
			s, err := etcdpb.NewKVClient(e.cli.ActiveConnection()).RangeStream(ctx, &etcdpb.RangeRequest{Key: []byte("/m/a")})
			if err != nil {
				return err
			}
			_, err = s.Recv()
			return err
		},
	} {
		// Unimplemented, with raftps' message (what to use instead), not
		// gRPC's generic "method ... not implemented" or "unknown service".
		err := call()
		if status.Code(err) != codes.Unimplemented && !isEtcdUnimplemented(err) {
			t.Errorf("%s: %v, want Unimplemented", name, err)
		} else if !strings.Contains(err.Error(), "not implemented by raftps") {
			t.Errorf("%s: %v, want raftps' message", name, err)
		}
	}
	if al, err := e.cli.AlarmList(ctx); err != nil || len(al.Alarms) != 0 {
		t.Fatalf("alarm list: %v %v", al, err)
	}
}

func isEtcdUnimplemented(err error) bool {
	var ee rpctypes.EtcdError
	return errors.As(err, &ee) && ee.Code() == codes.Unimplemented && ee.Error() != ""
}

// TestToStatus: raftps' sentinels leave as etcd's statuses (code and
// message), which etcd's client turns into its own error values.
func TestToStatus(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		err  error
		want error
	}{
		{fmt.Errorf("put: %w", fsm.ErrLeaseNotFound), rpctypes.ErrLeaseNotFound},
		{fmt.Errorf("x: %w", fsm.ErrCompacted), rpctypes.ErrCompacted},
		{fmt.Errorf("x: %w", fsm.ErrFutureRevision), rpctypes.ErrFutureRev},
		{fmt.Errorf("x: %w", fsm.ErrLeaseExists), rpctypes.ErrLeaseExist},
		{fmt.Errorf("x: %w", fsm.ErrTooLarge), rpctypes.ErrRequestTooLarge},
		{fmt.Errorf("x: %w", raftstore.ErrNoLeader), rpctypes.ErrNoLeader},
		{fmt.Errorf("x: %w", raftstore.ErrNotLeader), rpctypes.ErrNoLeader},
		{fmt.Errorf("apply: %w", raft.ErrLeadershipLost), rpctypes.ErrLeaderChanged},
		{context.DeadlineExceeded, rpctypes.ErrTimeout},
	} {
		got := rpctypes.Error(etcdapi.ToStatus(ctx, tc.err))
		if !errors.Is(got, tc.want) {
			t.Errorf("ToStatus(%v) = %v, want %v", tc.err, got, tc.want)
		}
	}
	if got := status.Code(etcdapi.ToStatus(ctx, fmt.Errorf("x: %w", fsm.ErrInvalid))); got != codes.InvalidArgument {
		t.Errorf("invalid argument: %v", got)
	}
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if got := status.Code(etcdapi.ToStatus(cctx, context.Canceled)); got != codes.Canceled {
		t.Errorf("canceled caller: %v", got)
	}
}

// TestMemberListURLScheme: over TLS, member list gives https:// URLs (an
// http:// one makes etcdctl's `endpoint status --cluster` and clientv3's
// Sync dial the member in plaintext, which a mutual-TLS node refuses); in
// plaintext, http://.
func TestMemberListURLScheme(t *testing.T) {
	e := newEnv(t, 0)
	ctx := ctxT(t)
	ml, err := e.cli.MemberList(ctx)
	if err != nil || len(ml.Members) != 1 || ml.Members[0].ClientURLs[0] != "http://"+e.addr ||
		!strings.HasPrefix(ml.Members[0].PeerURLs[0], "http://") {
		t.Fatalf("plaintext member list: %v %v", ml, err)
	}

	files, admin, err := security.Dev(t.TempDir(), []string{"n1"})
	if err != nil {
		t.Fatal(err)
	}
	m, err := security.Load(files["n1"], nil)
	if err != nil {
		t.Fatal(err)
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	g := grpc.NewServer(grpc.Creds(m.ServerCredentials()))
	e.srv.Register(g)
	go g.Serve(lis)
	t.Cleanup(g.Stop)
	tlsCfg, err := localcluster.ClientTLS(admin)
	if err != nil {
		t.Fatal(err)
	}
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{lis.Addr().String()}, TLS: tlsCfg,
		DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	ml, err = cli.MemberList(ctx)
	if err != nil || len(ml.Members) != 1 || ml.Members[0].ClientURLs[0] != "https://"+e.addr ||
		!strings.HasPrefix(ml.Members[0].PeerURLs[0], "https://") {
		t.Fatalf("member list over TLS: %v %v", ml, err)
	}
}
