package raftstore

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
)

// nodeIDFile is written on first start and checked on every later start.
const nodeIDFile = "node-id"

// checkDataDir creates dir (the <data-dir>/raft directory) if needed and
// guards it against reuse by another server: the first start writes id to
// dir/node-id, a later start with a different id fails with
// ErrDataDirMismatch. hasState reports whether Raft state exists already (a
// data dir with state but no node-id file is adopted by writing the file).
func checkDataDir(dir, id string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("raftstore: create data dir %q: %w", dir, err)
	}
	p := filepath.Join(dir, nodeIDFile)
	b, err := os.ReadFile(p)
	switch {
	case err == nil:
		got := string(bytes.TrimSpace(b))
		if got != id {
			return fmt.Errorf("%w: data dir %q belongs to node %q, this node was started with --id %q; start it with --id %s or point --data-dir at this node's own directory",
				ErrDataDirMismatch, filepath.Dir(dir), got, id, got)
		}
		return nil
	case errors.Is(err, fs.ErrNotExist):
		tmp := p + ".tmp"
		if err := os.WriteFile(tmp, []byte(id+"\n"), 0o644); err != nil {
			return fmt.Errorf("raftstore: write %q: %w", tmp, err)
		}
		if err := syncFile(tmp); err != nil {
			return err
		}
		if err := os.Rename(tmp, p); err != nil {
			return fmt.Errorf("raftstore: rename %q: %w", tmp, err)
		}
		return syncFile(dir)
	default:
		return fmt.Errorf("raftstore: read %q: %w", p, err)
	}
}

func syncFile(p string) error {
	f, err := os.Open(p)
	if err != nil {
		return fmt.Errorf("raftstore: open %q: %w", p, err)
	}
	defer f.Close()
	if err := f.Sync(); err != nil {
		return fmt.Errorf("raftstore: sync %q: %w", p, err)
	}
	return nil
}
