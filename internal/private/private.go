// Package private keeps a node's files owner-only: directories 0700,
// files 0600, whatever the process's umask (issue 32, hole 9: parameters
// and metadata are the customer's).
package private

import (
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
)

// Tighten makes dir and every directory under it 0700 and clears the
// group and other bits of every regular file under it, and reports how
// many it changed. Symbolic links are not followed (chmod would change
// their target).
func Tighten(dir string) (changed int, err error) {
	err = filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() && !d.Type().IsRegular() {
			return nil // links, sockets, FIFOs
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		want := fi.Mode().Perm() &^ 0o077
		if d.IsDir() {
			want = 0o700
		}
		if fi.Mode().Perm() == want {
			return nil
		}
		if err := os.Chmod(p, want); err != nil {
			return fmt.Errorf("private: %w", err)
		}
		changed++
		return nil
	})
	return changed, err
}

// MkdirAll creates dir (and its parents) 0700 and makes dir itself 0700
// if it existed with looser modes; it reports the mode dir had if it
// changed it (0 otherwise).
func MkdirAll(dir string) (was fs.FileMode, err error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return 0, err
	}
	fi, err := os.Stat(dir)
	if err != nil {
		return 0, err
	}
	if fi.Mode().Perm() == 0o700 {
		return 0, nil
	}
	return fi.Mode().Perm(), os.Chmod(dir, 0o700)
}
