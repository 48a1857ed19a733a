package raftstore

import (
	"errors"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
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
