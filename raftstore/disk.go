package raftstore

import (
	"errors"
	"fmt"
	"sync"
	"syscall"
	"time"

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

// diskCheckInterval bounds how stale DiskGuard's view of the free space is.
const diskCheckInterval = 100 * time.Millisecond

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
// recovering by itself when space returns. It reads statfs(2) at most
// every 100 ms (on the Check that finds its view stale). Safe for
// concurrent use.
type DiskGuard struct {
	dir     string
	reserve uint64
	statfs  func(dir string) (free uint64, err error)
	now     func() time.Time

	mu      sync.Mutex
	checked time.Time
	st      DiskStatus
}

// NewDiskGuard guards dir with reserve bytes (DefaultDiskReserve if 0).
func NewDiskGuard(dir string, reserve uint64) *DiskGuard {
	if reserve == 0 {
		reserve = DefaultDiskReserve
	}
	return &DiskGuard{dir: dir, reserve: reserve, statfs: freeBytes, now: time.Now,
		st: DiskStatus{Dir: dir, Reserve: reserve}}
}

func freeBytes(dir string) (uint64, error) {
	var fs syscall.Statfs_t
	if err := syscall.Statfs(dir, &fs); err != nil {
		return 0, fmt.Errorf("statfs %q: %w", dir, err)
	}
	return fs.Bavail * uint64(fs.Bsize), nil
}

// Status returns the current view, refreshed if stale.
func (g *DiskGuard) Status() DiskStatus {
	g.mu.Lock()
	defer g.mu.Unlock()
	if now := g.now(); now.Sub(g.checked) >= diskCheckInterval || g.checked.IsZero() {
		g.checked = now
		free, err := g.statfs(g.dir)
		g.st = DiskStatus{Dir: g.dir, Free: free, Reserve: g.reserve, Full: err == nil && free < g.reserve, Err: err}
	}
	return g.st
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
