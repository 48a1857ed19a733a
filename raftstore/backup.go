package raftstore

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"

	"github.com/hashicorp/raft"

	pb "github.com/raftps/raftps/api/raftpspb"
	"github.com/raftps/raftps/fsm"
)

// SnapshotInfo describes an FSM snapshot (the bytes a `raftps snapshot
// save` file carries inside its checksummed envelope).
type SnapshotInfo struct {
	// Index is the Raft index of the last command in the snapshot;
	// Revision the key/value revision at that point.
	Index    uint64 `json:"index"`
	Revision int64  `json:"revision"`
	// Keys, Leases and Jobs count what the snapshot holds.
	Keys   int `json:"keys"`
	Leases int `json:"leases"`
	Jobs   int `json:"jobs"`
	// Bytes is the size of the FSM snapshot.
	Bytes int64 `json:"bytes"`
}

// InspectSnapshot decodes and validates an FSM snapshot completely (as a
// node restoring it would) and returns what it holds. Errors wrap
// fsm.ErrMalformed for a corrupt snapshot and fsm.ErrNewerFormat for one
// written by a newer raftps.
func InspectSnapshot(snap []byte) (SnapshotInfo, *fsm.FSM, error) {
	f := fsm.New(slog.New(slog.DiscardHandler))
	if err := f.Restore(io.NopCloser(bytes.NewReader(snap))); err != nil {
		return SnapshotInfo{}, nil, err
	}
	info := SnapshotInfo{Index: f.AppliedIndex(), Revision: f.Revision(), Leases: len(f.Leases()), Bytes: int64(len(snap))}
	resp, err := f.Range(&pb.RangeRequest{Key: []byte{0}, RangeEnd: []byte{0}, CountOnly: true})
	if err != nil {
		return SnapshotInfo{}, nil, err
	}
	info.Keys = int(resp.Count)
	info.Jobs = len(f.Jobs().Jobs())
	return info, f, nil
}

// ErrDataDirInUse: a restore target already holds Raft state.
var ErrDataDirInUse = errors.New("raftstore: data dir already holds Raft state")

// SeedConfig says where SeedFromSnapshot writes a new server's state.
type SeedConfig struct {
	// ID is the new server's Raft ID; DataDir its node data dir (the
	// state goes to DataDir/raft, as Store.Open expects it).
	ID      string
	DataDir string
	// Servers is the new cluster's first configuration, every member as
	// it will start (ID and advertised Raft address); it must include
	// ID. Every member of a new cluster is seeded from the same snapshot
	// with the same Servers (etcd's `snapshot restore --initial-cluster`).
	Servers []raft.Server
	// LogStore is the new server's Raft log store, LogStoreBoltDB (also
	// for "") or LogStoreWAL; the server must then start with the same
	// (Config.LogStore).
	LogStore string
}

// SeedFromSnapshot writes a data dir that starts as a member of a new
// cluster whose state is the FSM snapshot snap (etcdctl's `snapshot
// restore`): a Raft snapshot at the snapshot's applied index holding snap
// and cfg.Servers as the configuration, no log, and a cluster ID derived
// from snap and the servers, so every seeded member agrees on it. The
// snapshot is validated completely first; nothing is written if it is
// corrupt or newer than this build's format, or if the data dir already
// holds Raft state (ErrDataDirInUse).
func SeedFromSnapshot(cfg SeedConfig, snap []byte) (SnapshotInfo, error) {
	info, _, err := InspectSnapshot(snap)
	if err != nil {
		return SnapshotInfo{}, err
	}
	if cfg.ID == "" || cfg.DataDir == "" {
		return SnapshotInfo{}, errors.New("raftstore: seed: ID and DataDir are required")
	}
	if err := checkLogStore(cfg.LogStore); err != nil {
		return SnapshotInfo{}, fmt.Errorf("raftstore: seed: %w", err)
	}
	self := false
	for _, s := range cfg.Servers {
		self = self || string(s.ID) == cfg.ID
	}
	if !self {
		return SnapshotInfo{}, fmt.Errorf("raftstore: seed: the initial cluster does not include %q", cfg.ID)
	}
	dir := filepath.Join(cfg.DataDir, "raft")
	if hasLogStore(dir) {
		return SnapshotInfo{}, fmt.Errorf("%w: %s; restore into a new, empty --data-dir", ErrDataDirInUse, dir)
	}
	if err := checkDataDir(dir, cfg.ID); err != nil {
		return SnapshotInfo{}, err
	}
	kind, err := resolveLogStore(dir, cfg.LogStore)
	if err != nil {
		return SnapshotInfo{}, err
	}
	ls, err := openLogStore(dir, kind, newHCLogger(slog.New(slog.DiscardHandler), "wal"))
	if err != nil {
		return SnapshotInfo{}, fmt.Errorf("raftstore: seed: %w", err)
	}
	defer ls.Close()
	snaps, err := openSnapshotStore(dir, 2, newHCLogger(slog.New(slog.DiscardHandler), "snapshot"))
	if err != nil {
		return SnapshotInfo{}, fmt.Errorf("raftstore: seed: open snapshot store: %w", err)
	}
	if has, err := raft.HasExistingState(ls, ls, snaps); err != nil || has {
		if err == nil {
			err = fmt.Errorf("%w: %s", ErrDataDirInUse, dir)
		}
		return SnapshotInfo{}, err
	}
	index := max(info.Index, 1)
	const term = 1
	_, trans := raft.NewInmemTransport("") // encodes the legacy peers field only
	sink, err := snaps.Create(raft.SnapshotVersionMax, index, term, raft.Configuration{Servers: cfg.Servers}, index, trans)
	if err != nil {
		return SnapshotInfo{}, fmt.Errorf("raftstore: seed: create snapshot: %w", err)
	}
	if _, err := sink.Write(snap); err != nil {
		_ = sink.Cancel()
		return SnapshotInfo{}, fmt.Errorf("raftstore: seed: write snapshot: %w", err)
	}
	if err := sink.Close(); err != nil {
		return SnapshotInfo{}, fmt.Errorf("raftstore: seed: write snapshot: %w", err)
	}
	// The term must not go back below the snapshot's.
	if err := ls.SetUint64([]byte("CurrentTerm"), term); err != nil {
		return SnapshotInfo{}, fmt.Errorf("raftstore: seed: %w", err)
	}
	h := sha256.New()
	h.Write(snap)
	for _, s := range cfg.Servers {
		fmt.Fprintf(h, "\x00%s=%s", s.ID, s.Address)
	}
	cid := hex.EncodeToString(h.Sum(nil)[:8])
	if err := os.WriteFile(filepath.Join(dir, clusterIDFile), []byte(cid+"\n"), 0o600); err != nil {
		return SnapshotInfo{}, fmt.Errorf("raftstore: seed: %w", err)
	}
	return info, syncFile(dir)
}

// DBSize is the bytes on disk of this server's Raft data: the log store
// and the snapshots under <DataDir>/raft (etcd's db size).
func (s *Store) DBSize() int64 {
	var n int64
	_ = filepath.WalkDir(filepath.Join(s.cfg.DataDir, "raft"), func(_ string, d os.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			if fi, err := d.Info(); err == nil {
				n += fi.Size()
			}
		}
		return nil
	})
	return n
}
