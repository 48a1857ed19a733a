package raftstore

import (
	"fmt"
	"path/filepath"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"

	"github.com/raftps/raftps/internal/private"
)

// privateSnapshots is hashicorp/raft's FileSnapshotStore with owner-only
// modes. The store makes its directories 0755 and its files with
// os.Create (0666 &^ umask); Create here chmods the new snapshot's
// directory to 0700 and its files (meta.json, state.bin) to 0600 before
// the FSM writes a byte of state into it, and the rename that completes
// it keeps those modes (issue 32, hole 9). The data directory itself is
// 0700 (node), so nothing inside is reachable by others meanwhile.
type privateSnapshots struct {
	*raft.FileSnapshotStore
	dir string // <base>/snapshots
}

// openSnapshotStore opens the snapshot store under base (retaining
// retain snapshots) with owner-only modes; snapshots an older release
// left with looser modes are tightened.
func openSnapshotStore(base string, retain int, log hclog.Logger) (*privateSnapshots, error) {
	fss, err := raft.NewFileSnapshotStoreWithLogger(base, retain, log)
	if err != nil {
		return nil, err
	}
	s := &privateSnapshots{FileSnapshotStore: fss, dir: filepath.Join(base, "snapshots")}
	if _, err := private.Tighten(s.dir); err != nil {
		return nil, err
	}
	return s, nil
}

// Create starts a snapshot (raft.SnapshotStore) and makes it owner-only.
func (s *privateSnapshots) Create(version raft.SnapshotVersion, index, term uint64, configuration raft.Configuration,
	configurationIndex uint64, trans raft.Transport) (raft.SnapshotSink, error) {
	sink, err := s.FileSnapshotStore.Create(version, index, term, configuration, configurationIndex, trans)
	if err != nil {
		return nil, err
	}
	if _, err := private.Tighten(filepath.Join(s.dir, sink.ID()+".tmp")); err != nil {
		_ = sink.Cancel()
		return nil, fmt.Errorf("raftstore: snapshot %s: %w", sink.ID(), err)
	}
	return sink, nil
}
