package raftstore

import (
	"errors"
	"fmt"
	"os"
	"sync"
	"syscall"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// ErrDiskFull: the file system of the data dir has less free space than
// the reserve, so the node refuses writes instead of starting them (a
// write that meets ENOSPC in the Raft log costs the leader its leadership,
// and a server that cannot persist its term cannot win it back). Errors
// that wrap it carry gRPC code ResourceExhausted.
var ErrDiskFull = errors.New("disk full")

// DefaultDiskReserve is the free space a data dir must keep (64 MiB):
// room for a few maximal Raft entries, bolt's page growth and a snapshot
// header, so that writes admitted just before the check flips still land.
const DefaultDiskReserve = 64 << 20

// DiskStatus is a point-in-time view of a data dir's space (DiskGuard.Status).
type DiskStatus struct {
	Dir     string
	Free    uint64 // bytes available to the node's user
	Reserve uint64
	Full    bool  // Free < Reserve
	Err     error // the last statfs error, if any (then Full is unknown and false)
}

// DiskGuard watches the free space of a data dir's file system and turns
// "almost full" into an immediate, explained refusal of writes (Check),
// recovering by itself when space returns. Every Check and Status reads
// the free space afresh (fstatfs(2) on the dir, held open, which costs
// far less than a Raft write and less than statfs(2) by path; the figures
// are in DESIGN.md, "Measurements"): a view cached even for 100 ms let a
// write through onto a disk that had just filled. Safe for concurrent use.
type DiskGuard struct {
	dir     string
	reserve uint64
	statfs  func(dir string) (free uint64, err error) // tests replace it

	mu sync.RWMutex
	f  *os.File // dir, open until Close; nil: statfs by path
	fd int      // f's descriptor (a directory: never in the runtime's poller)
}

// NewDiskGuard guards dir with reserve bytes (DefaultDiskReserve if 0).
// It holds dir open until Close (if dir cannot be opened, every read goes
// by path and reports what is wrong).
func NewDiskGuard(dir string, reserve uint64) *DiskGuard {
	if reserve == 0 {
		reserve = DefaultDiskReserve
	}
	g := &DiskGuard{dir: dir, reserve: reserve}
	g.statfs = g.freeBytes
	if f, err := os.Open(dir); err == nil {
		g.f, g.fd = f, int(f.Fd())
	}
	return g
}

// Close releases the open dir; later reads go by path.
func (g *DiskGuard) Close() error {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.f == nil {
		return nil
	}
	err := g.f.Close()
	g.f = nil
	return err
}

// freeBytes is the bytes available to the node's user on dir's file system.
func (g *DiskGuard) freeBytes(dir string) (uint64, error) {
	var fs syscall.Statfs_t
	g.mu.RLock()
	var err error
	if g.f != nil {
		err = syscall.Fstatfs(g.fd, &fs)
	} else {
		err = syscall.Statfs(dir, &fs)
	}
	g.mu.RUnlock()
	if err != nil {
		return 0, fmt.Errorf("statfs %q: %w", dir, err)
	}
	return fs.Bavail * uint64(fs.Bsize), nil
}

// Status reads the data dir's free space now.
func (g *DiskGuard) Status() DiskStatus {
	free, err := g.statfs(g.dir)
	return DiskStatus{Dir: g.dir, Free: free, Reserve: g.reserve, Full: err == nil && free < g.reserve, Err: err}
}

// Check returns an error wrapping ErrDiskFull (gRPC ResourceExhausted,
// naming the dir, its free space and the reserve) while the data dir's
// file system is below the reserve, else nil. A failing statfs does not
// refuse writes: the write itself will report what is wrong.
func (g *DiskGuard) Check() error {
	if st := g.Status(); st.Full {
		return &DiskFullError{Status: st}
	}
	return nil
}

// DiskFullError is the error of Check: it wraps ErrDiskFull and carries
// gRPC status ResourceExhausted with an ErrorInfo of reason DISK_FULL.
type DiskFullError struct{ Status DiskStatus }

func (e *DiskFullError) Error() string {
	return fmt.Sprintf("%v: data dir %s has %s free, below the reserve of %s; writes are refused until space is freed",
		ErrDiskFull, e.Status.Dir, mib(e.Status.Free), mib(e.Status.Reserve))
}

// Unwrap returns ErrDiskFull.
func (e *DiskFullError) Unwrap() error { return ErrDiskFull }

// GRPCStatus is ResourceExhausted with the message of Error.
func (e *DiskFullError) GRPCStatus() *status.Status {
	st := status.New(codes.ResourceExhausted, e.Error())
	if d, err := st.WithDetails(&errdetails.ErrorInfo{Reason: "DISK_FULL", Domain: "raftps",
		Metadata: map[string]string{"dir": e.Status.Dir}}); err == nil {
		st = d
	}
	return st
}

func mib(b uint64) string { return fmt.Sprintf("%.1f MiB", float64(b)/(1<<20)) }
