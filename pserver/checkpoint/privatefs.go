package checkpoint

import (
	"io"
	"os"
	"syscall"

	"github.com/cockroachdb/pebble/vfs"
)

// privateFS is vfs.Default with owner-only modes: files it creates are
// fchmod'ed to 0600 before a byte is written, directories are made 0700
// (Pebble's own are 0666 &^ umask and 0755). Parameters are the
// customer's model (issue 32, hole 9); the modes do not depend on the
// process's umask.
type privateFS struct{ vfs.FS }

// storeFS is the file system of every Store (Pebble's files and the
// sstables staged for ingestion).
var storeFS vfs.FS = privateFS{vfs.Default}

func private(f vfs.File, err error) (vfs.File, error) {
	if err != nil {
		return f, err
	}
	if err := syscall.Fchmod(int(f.Fd()), 0o600); err != nil {
		f.Close()
		return nil, &os.PathError{Op: "chmod", Path: "checkpoint store file", Err: err}
	}
	return f, nil
}

func (p privateFS) Create(name string) (vfs.File, error) { return private(p.FS.Create(name)) }

func (p privateFS) OpenReadWrite(name string, opts ...vfs.OpenOption) (vfs.File, error) {
	return private(p.FS.OpenReadWrite(name, opts...))
}

func (p privateFS) ReuseForWrite(oldname, newname string) (vfs.File, error) {
	return private(p.FS.ReuseForWrite(oldname, newname))
}

func (p privateFS) MkdirAll(dir string, _ os.FileMode) error { return p.FS.MkdirAll(dir, 0o700) }

// Lock takes Pebble's LOCK file (created 0666 by vfs.Default) and makes
// it 0600.
func (p privateFS) Lock(name string) (io.Closer, error) {
	c, err := p.FS.Lock(name)
	if err != nil {
		return nil, err
	}
	if err := os.Chmod(name, 0o600); err != nil {
		c.Close()
		return nil, err
	}
	return c, nil
}
