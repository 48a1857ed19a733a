package node

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	"github.com/raftps/raftps/internal/private"
)

// lockFile is the data dir's lock: held (flock, exclusive) by the process
// that runs the node, and holding its pid.
const lockFile = "LOCK"

// ErrDataDirLocked: another process holds the data dir (a second `raftps
// node` on the same --data-dir). The error names the dir and the holder.
var ErrDataDirLocked = errors.New("data dir in use")

// dirLock is a held data dir lock; release closes it.
type dirLock struct{ f *os.File }

// lockDataDir takes <dir>/LOCK with flock(LOCK_EX|LOCK_NB) and writes this
// process's pid into it. It never waits: if another process holds the
// lock it returns ErrDataDirLocked naming dir and that process (pid and
// command line, from the file and /proc). The kernel drops the lock when
// the holder exits, however it exits, so a stale file never blocks a start.
// Taken before anything in the data dir is opened (bolt's own flock
// would otherwise wait forever: raft-boltdb sets no timeout).
func lockDataDir(dir string) (*dirLock, error) {
	p := filepath.Join(dir, lockFile)
	f, err := os.OpenFile(p, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("data dir %q: open lock: %w", dir, err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		holder := lockHolder(f)
		f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, fmt.Errorf("%w: %q is locked by %s; stop that node or use another --data-dir", ErrDataDirLocked, dir, holder)
		}
		return nil, fmt.Errorf("data dir %q: lock %s: %w", dir, p, err)
	}
	if err := f.Truncate(0); err == nil {
		_, err = f.WriteAt([]byte(strconv.Itoa(os.Getpid())+"\n"), 0)
		if err != nil {
			f.Close()
			return nil, fmt.Errorf("data dir %q: write %s: %w", dir, p, err)
		}
	}
	return &dirLock{f: f}, nil
}

// lockHolder describes the process whose pid the lock file holds.
func lockHolder(f *os.File) string {
	b := make([]byte, 32)
	n, _ := f.ReadAt(b, 0)
	pid, err := strconv.Atoi(string(bytes.TrimSpace(b[:n])))
	if err != nil || pid <= 0 {
		return "another process (pid unknown)"
	}
	cmd, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	if err != nil || len(cmd) == 0 {
		return fmt.Sprintf("process %d", pid)
	}
	args := strings.Fields(strings.ReplaceAll(string(bytes.TrimRight(cmd, "\x00")), "\x00", " "))
	if len(args) > 8 {
		args = append(args[:8], "...")
	}
	return fmt.Sprintf("process %d (%s)", pid, strings.Join(args, " "))
}

// release unlocks and closes the lock file (the file stays: removing it
// could race with a process that just opened it).
func (l *dirLock) release() error {
	if l == nil || l.f == nil {
		return nil
	}
	err := l.f.Close()
	l.f = nil
	return err
}

// privateDataDir creates the data dir 0700. A data dir an older release
// made readable by others (0755, files 0644) is tightened, with a
// warning: the directory becomes 0700, then every directory under it
// 0700 and every file loses its group and other bits (issue 32, hole 9).
func (n *Node) privateDataDir() error {
	was, err := private.MkdirAll(n.cfg.DataDir)
	if err != nil {
		return fmt.Errorf("data dir %q: %w", n.cfg.DataDir, err)
	}
	if was == 0 {
		return nil
	}
	changed, err := private.Tighten(n.cfg.DataDir)
	if err != nil {
		return fmt.Errorf("data dir %q: tighten modes: %w", n.cfg.DataDir, err)
	}
	n.log.Warn("data dir was open to other users: made it 0700 and its files owner-only",
		"dir", n.cfg.DataDir, "was", was.String(), "changed", changed+1)
	return nil
}
