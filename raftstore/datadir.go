package raftstore

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/hashicorp/raft"
)

// nodeIDFile is written on first start and checked on every later start.
const nodeIDFile = "node-id"

// checkDataDir creates dir (the <data-dir>/raft directory) if needed and
// guards it against reuse by another server: the first start writes id to
// dir/node-id, a later start with a different id fails with
// ErrDataDirMismatch. hasState reports whether Raft state exists already (a
// data dir with state but no node-id file is adopted by writing the file).
func checkDataDir(dir, id string) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
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
		return writeFileAtomic(p, []byte(id+"\n"), 0o600)
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

// clusterIDFile records the cluster's ID once this server has seen it.
const clusterIDFile = "cluster-id"

// clusterIDFromLog derives the cluster ID from log entry 1, the
// configuration that bootstrapped the cluster: every server that holds
// that entry (the bootstrapping ones, and joiners that replicated it)
// computes the same ID; bootstrap-expect servers bootstrap with identical
// configurations and so agree too. ok is false when entry 1 is not (yet,
// or no longer) in the log.
func clusterIDFromLog(logs raft.LogStore) (id string, ok bool) {
	var l raft.Log
	if err := logs.GetLog(1, &l); err != nil || l.Type != raft.LogConfiguration {
		return "", false
	}
	sum := sha256.Sum256(append([]byte(fmt.Sprintf("%d:", l.Term)), l.Data...))
	return hex.EncodeToString(sum[:8]), true
}

// checkClusterID compares the recorded cluster ID with the log's; it
// records the log's if none is recorded. It returns the known ID ("" if
// neither is known yet) and ErrDataDirMismatch if they differ.
func checkClusterID(dir string, logs raft.LogStore) (string, error) {
	p := filepath.Join(dir, clusterIDFile)
	b, err := os.ReadFile(p)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return "", fmt.Errorf("raftstore: read %q: %w", p, err)
	}
	recorded := string(bytes.TrimSpace(b))
	fromLog, ok := clusterIDFromLog(logs)
	switch {
	case !ok:
		return recorded, nil
	case recorded == "":
		if err := os.WriteFile(p, []byte(fromLog+"\n"), 0o600); err != nil {
			return "", fmt.Errorf("raftstore: write %q: %w", p, err)
		}
		return fromLog, nil
	case recorded != fromLog:
		return "", fmt.Errorf("%w: %q records cluster %s but the Raft log in it belongs to cluster %s",
			ErrDataDirMismatch, dir, recorded, fromLog)
	default:
		return recorded, nil
	}
}
