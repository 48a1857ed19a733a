package raftstore

import (
	"errors"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	pb "github.com/raftps/raftps/api/raftpspb"
	"github.com/raftps/raftps/fsm"
)

// TestDiskGuard: below the reserve Check refuses with ErrDiskFull
// (ResourceExhausted, naming the dir and the figures); above it, and on a
// failing statfs, it admits; every Check reads the free space afresh (a
// disk that fills between two writes refuses the second).
func TestDiskGuard(t *testing.T) {
	free := uint64(100 << 20)
	var statErr error
	g := NewDiskGuard("/data/n1", 64<<20)
	g.statfs = func(string) (uint64, error) { return free, statErr }

	if err := g.Check(); err != nil {
		t.Fatalf("100 MiB free: %v", err)
	}
	free = 10 << 20
	err := g.Check()
	if !errors.Is(err, ErrDiskFull) || status.Code(err) != codes.ResourceExhausted {
		t.Fatalf("10 MiB free: %v (code %v), want ErrDiskFull / ResourceExhausted", err, status.Code(err))
	}
	for _, want := range []string{"/data/n1", "10.0 MiB free", "64.0 MiB"} {
		if !strings.Contains(err.Error(), want) || !strings.Contains(status.Convert(err).Message(), want) {
			t.Errorf("error %q does not name %q", err, want)
		}
	}
	if st := g.Status(); !st.Full || st.Free != 10<<20 || st.Reserve != 64<<20 {
		t.Fatalf("status %+v", st)
	}
	free = 64 << 20 // space returns
	if err := g.Check(); err != nil {
		t.Fatalf("at the reserve: %v", err)
	}
	statErr = errors.New("statfs: boom")
	free = 0
	if err := g.Check(); err != nil {
		t.Fatalf("a failing statfs refuses writes: %v", err)
	}
	if st := g.Status(); st.Err == nil || st.Full {
		t.Fatalf("status after a failing statfs: %+v", st)
	}
	if NewDiskGuard("/x", 0).reserve != DefaultDiskReserve {
		t.Fatal("reserve 0 is not the default")
	}
}

// TestDiskGuardReadsTheDisk: the real reads (fstatfs on the open dir,
// statfs by path after Close) see the file system's free space; a dir
// that does not exist reports its error and refuses nothing.
func TestDiskGuardReadsTheDisk(t *testing.T) {
	dir := t.TempDir()
	var want syscall.Statfs_t
	if err := syscall.Statfs(dir, &want); err != nil {
		t.Fatal(err)
	}
	g := NewDiskGuard(dir, 1)
	if g.f == nil {
		t.Fatal("the dir is not held open")
	}
	for _, phase := range []string{"open", "closed"} {
		st := g.Status()
		total := want.Blocks * uint64(want.Bsize)
		if st.Err != nil || st.Free == 0 || st.Free > total || st.Full {
			t.Fatalf("%s: status %+v (file system of %d bytes)", phase, st, total)
		}
		if err := g.Close(); err != nil {
			t.Fatal(err)
		}
	}
	missing := NewDiskGuard(filepath.Join(dir, "missing"), 1)
	if st := missing.Status(); st.Err == nil || !strings.Contains(st.Err.Error(), "missing") {
		t.Fatalf("missing dir: %+v", st)
	}
	if err := missing.Check(); err != nil {
		t.Fatalf("a failing statfs refuses writes: %v", err)
	}
}

// TestStoreDiskFull: with Config.Disk below its reserve, every write that
// would append to the log (Put, a writing Txn, LeaseGrant, ApplyLocal as
// the forwarding handler calls it, Join, Remove) is refused at once with
// ErrDiskFull / ResourceExhausted, while reads and read-only txns are
// served; when space returns, writes succeed again. The check sits in the
// store's one write path (it was node's gatedStore wrapper).
func TestStoreDiskFull(t *testing.T) {
	var free atomic.Uint64
	free.Store(100 << 20)
	g := NewDiskGuard("/data/n1", 64<<20)
	g.statfs = func(string) (uint64, error) { return free.Load(), nil }
	cfg := testConfig(t, "n1", t.TempDir())
	cfg.Bootstrap = true
	cfg.Disk = g
	s, err := New(cfg, fsm.New(nil), nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Open(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	ctx := ctxT(t, 30*time.Second)
	if err := s.WaitForLeader(ctx); err != nil {
		t.Fatal(err)
	}
	mustPut(ctx, t, s, "/before", "1")

	free.Store(10 << 20)
	full := func(what string, err error) {
		t.Helper()
		if !errors.Is(err, ErrDiskFull) || status.Code(err) != codes.ResourceExhausted || !strings.Contains(err.Error(), "/data/n1") {
			t.Fatalf("%s on a full disk: %v, want ErrDiskFull / ResourceExhausted naming the dir", what, err)
		}
	}
	_, err = s.Put(ctx, &pb.PutRequest{Key: []byte("/full"), Value: []byte("1")})
	full("put", err)
	_, err = s.Txn(ctx, &pb.TxnRequest{Success: []*pb.RequestOp{{Request: &pb.RequestOp_RequestPut{
		RequestPut: &pb.PutRequest{Key: []byte("/full"), Value: []byte("1")}}}}})
	full("writing txn", err)
	_, err = s.LeaseGrant(ctx, &pb.LeaseGrantRequest{Ttl: 10})
	full("lease grant", err)
	_, err = s.ApplyLocal(ctx, putCmd(t, "/full", "1", 0))
	full("apply local", err)
	full("join", s.Join(ctx, "n2", "127.0.0.1:1", true))
	full("remove", s.Remove(ctx, "n2"))

	if v, ok, err := get(ctx, s, "/before", false); err != nil || !ok || v != "1" {
		t.Fatalf("read on a full disk: %q %v %v", v, ok, err)
	}
	tr, err := s.Txn(ctx, &pb.TxnRequest{Success: []*pb.RequestOp{{Request: &pb.RequestOp_RequestRange{
		RequestRange: &pb.RangeRequest{Key: []byte("/before")}}}}})
	if err != nil || len(tr.Responses[0].GetResponseRange().GetKvs()) != 1 {
		t.Fatalf("read-only txn on a full disk: %v %v", tr, err)
	}
	if _, ok, _ := get(ctx, s, "/full", false); ok {
		t.Fatal("a refused write was applied")
	}

	free.Store(64 << 20) // space returns
	if _, err := s.Put(ctx, &pb.PutRequest{Key: []byte("/after"), Value: []byte("1")}); err != nil {
		t.Fatalf("put after space returned: %v", err)
	}
}
