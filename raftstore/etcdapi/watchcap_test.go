package etcdapi_test

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"testing"
	"time"

	etcdpb "go.etcd.io/etcd/api/v3/etcdserverpb"
	etcdrpc "go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	pb "github.com/raftps/raftps/api/raftpspb"
	"github.com/raftps/raftps/raftstore"
)

// dialEnv opens a new client connection to e.
func dialEnv(t *testing.T, e *env) *grpc.ClientConn {
	t.Helper()
	conn, err := grpc.NewClient(e.addr, grpc.WithTransportCredentials(insecureCreds()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

// createWatch creates a watcher of key on st and returns its response to
// the create (a refusal past a cap is one response, Created and Canceled
// with a reason, as etcd's).
func createWatch(t *testing.T, st etcdpb.Watch_WatchClient, key string) *etcdpb.WatchResponse {
	t.Helper()
	if err := st.Send(&etcdpb.WatchRequest{RequestUnion: &etcdpb.WatchRequest_CreateRequest{
		CreateRequest: &etcdpb.WatchCreateRequest{Key: []byte(key)}}}); err != nil {
		t.Fatal(err)
	}
	r, err := st.Recv()
	if err != nil {
		t.Fatal(err)
	}
	if !r.Created {
		t.Fatalf("create %q answered %v", key, r)
	}
	return r
}

// createRefused creates a watcher that must be refused, and returns the
// reason.
func createRefused(t *testing.T, st etcdpb.Watch_WatchClient, key string) string {
	t.Helper()
	r := createWatch(t, st, key)
	if !r.Canceled {
		t.Fatalf("watcher %q was created (id %d), want it refused", key, r.WatchId)
	}
	return r.CancelReason
}

// TestWatchCaps is issue 32 hole 5: one Watch stream took 50,000 watchers.
// Watchers are capped per stream (Server.MaxWatchersPerStream), per
// connection and per node (raftstore.Config), each refusal naming the cap;
// raftps's own Watch is refused with ResourceExhausted.
func TestWatchCaps(t *testing.T) {
	e := newEnv(t, 0, func(c *raftstore.Config) { c.MaxWatchersPerConn, c.MaxWatchers = 8, 12 })
	e.srv.MaxWatchersPerStream = 5
	ctx := ctxT(t)
	conn1 := dialEnv(t, e)
	s1, err := etcdpb.NewWatchClient(conn1).Watch(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 5 {
		if r := createWatch(t, s1, fmt.Sprintf("a%d", i)); r.Canceled {
			t.Fatalf("watcher %d refused: %s", i, r.CancelReason)
		}
	}
	if why := createRefused(t, s1, "a5"); !strings.Contains(why, "too many watchers") || !strings.Contains(why, "stream") {
		t.Fatalf("6th watcher of a stream refused with %q, want the per-stream cap", why)
	}
	s2, err := etcdpb.NewWatchClient(conn1).Watch(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		if r := createWatch(t, s2, fmt.Sprintf("b%d", i)); r.Canceled {
			t.Fatalf("watcher b%d refused: %s", i, r.CancelReason)
		}
	}
	if why := createRefused(t, s2, "b3"); !strings.Contains(why, "per connection") {
		t.Fatalf("9th watcher of a connection refused with %q, want the per-connection cap", why)
	}

	conn2 := dialEnv(t, e)
	s3, err := etcdpb.NewWatchClient(conn2).Watch(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 4 {
		if r := createWatch(t, s3, fmt.Sprintf("c%d", i)); r.Canceled {
			t.Fatalf("watcher c%d refused: %s", i, r.CancelReason)
		}
	}
	if why := createRefused(t, s3, "c4"); !strings.Contains(why, "on this node") {
		t.Fatalf("13th watcher of the node refused with %q, want the node's cap", why)
	}
	rw, err := pb.NewWatchClient(conn2).Watch(ctx, &pb.WatchRequest{Key: []byte("d")})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := rw.Recv(); status.Code(err) != codes.ResourceExhausted || !strings.Contains(err.Error(), "too many watchers") {
		t.Fatalf("raftps watch past the node's cap: %v, want ResourceExhausted", err)
	}

	// Ending a stream frees its watchers.
	cctx, cancel := context.WithCancel(ctx)
	s4, err := etcdpb.NewWatchClient(conn1).Watch(cctx)
	if err != nil {
		t.Fatal(err)
	}
	if why := createRefused(t, s4, "e0"); !strings.Contains(why, "too many watchers") {
		t.Fatalf("refused with %q", why)
	}
	cancel()
	s1.CloseSend()
	deadline := time.Now().Add(10 * time.Second)
	for {
		s5, err := etcdpb.NewWatchClient(conn1).Watch(ctx)
		if err != nil {
			t.Fatal(err)
		}
		r := createWatch(t, s5, "f0")
		if !r.Canceled {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("watchers of a closed stream still count: %s", r.CancelReason)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestWatchFanOut is issue 32 hole 5's mechanism: each watcher was two
// goroutines woken on every apply. 2,000 watchers on one stream now cost
// a bounded number of goroutines (the store's one dispatcher and the
// stream's one sender), and a put reaches exactly the watcher of its key.
func TestWatchFanOut(t *testing.T) {
	e := newEnv(t, 0)
	e.srv.MaxWatchersPerStream = 5000
	ctx := ctxT(t)
	st, err := etcdpb.NewWatchClient(dialEnv(t, e)).Watch(ctx)
	if err != nil {
		t.Fatal(err)
	}
	createWatch(t, st, "warm") // the stream's own goroutines
	time.Sleep(100 * time.Millisecond)
	before := runtime.NumGoroutine()
	const n = 2000
	ids := map[int64]string{}
	for i := range n {
		k := fmt.Sprintf("k%04d", i)
		r := createWatch(t, st, k)
		if r.Canceled {
			t.Fatalf("watcher %d refused: %s", i, r.CancelReason)
		}
		ids[r.WatchId] = k
	}
	time.Sleep(100 * time.Millisecond)
	if grew := runtime.NumGoroutine() - before; grew > 50 {
		t.Fatalf("%d watchers added %d goroutines, want a bounded number (at most 50)", n, grew)
	}
	for _, k := range []string{"k0007", "k1999", "k0007"} {
		mustPut(t, e.cli, k, "v")
		r, err := st.Recv()
		if err != nil {
			t.Fatal(err)
		}
		if len(r.Events) != 1 || ids[r.WatchId] != k || string(r.Events[0].Kv.Key) != k {
			t.Fatalf("put %s: watcher %d (%s) got %v", k, r.WatchId, ids[r.WatchId], r.Events)
		}
	}
}

// TestNoSpaceAlarmEtcd: past the backend quota etcd's client gets etcd's
// "database space exceeded", `etcdctl alarm list` shows NOSPACE, writes
// stay refused after space is freed, and `etcdctl alarm disarm` lifts it.
func TestNoSpaceAlarmEtcd(t *testing.T) {
	e := newEnv(t, 0, func(c *raftstore.Config) { c.QuotaBackendBytes = 100 << 10 })
	ctx := ctxT(t)
	value := strings.Repeat("v", 20<<10)
	var err error
	for i := 0; err == nil; i++ {
		if i > 10 {
			t.Fatal("no put refused past a quota of 100 KiB")
		}
		_, err = e.cli.Put(ctx, fmt.Sprintf("k%d", i), value)
	}
	if !errors.Is(err, etcdrpc.ErrNoSpace) {
		t.Fatalf("put past the quota: %v, want %v", err, etcdrpc.ErrNoSpace)
	}
	al, err := e.cli.AlarmList(ctx)
	if err != nil || len(al.Alarms) != 1 || al.Alarms[0].Alarm != etcdpb.AlarmType_NOSPACE {
		t.Fatalf("alarm list: %v %v, want NOSPACE", al, err)
	}
	if _, err := e.cli.Delete(ctx, "k", clientv3.WithPrefix()); err != nil {
		t.Fatalf("delete under the alarm: %v", err)
	}
	if _, err := e.cli.Put(ctx, "small", "1"); !errors.Is(err, etcdrpc.ErrNoSpace) {
		t.Fatalf("put with the alarm armed: %v", err)
	}
	if _, err := e.cli.AlarmDisarm(ctx, &clientv3.AlarmMember{MemberID: al.Alarms[0].MemberID, Alarm: etcdpb.AlarmType_NOSPACE}); err != nil {
		t.Fatal(err)
	}
	if al, err := e.cli.AlarmList(ctx); err != nil || len(al.Alarms) != 0 {
		t.Fatalf("alarm list after disarm: %v %v", al, err)
	}
	mustPut(t, e.cli, "small", "1")
}
