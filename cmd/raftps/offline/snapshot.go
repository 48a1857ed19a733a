package offline

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/hashicorp/raft"

	"github.com/raftps/raftps/raftstore"
	"github.com/raftps/raftps/raftstore/etcdapi"
)

// SnapshotFile is what a snapshot file holds: the result of `snapshot
// save` and `snapshot status` (its JSON is their -w json output).
type SnapshotFile struct {
	Path string `json:"path"`
	raftstore.SnapshotInfo
	// SHA256 is the checksum of the whole file (its last 32 bytes are a
	// SHA-256 of the rest, checked on every read).
	SHA256 string `json:"sha256"`
	// FileBytes is the file's size.
	FileBytes int64 `json:"file_bytes"`
}

// ErrBadSnapshotFile: a file is not a whole raftps snapshot.
var ErrBadSnapshotFile = errors.New("not a valid raftps snapshot file")

// ReadSnapshotFile checks the file's checksum and returns the FSM
// snapshot inside. Errors: ErrBadSnapshotFile, or the read's.
func ReadSnapshotFile(path string) ([]byte, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	snap, err := etcdapi.ParseSnapshot(b)
	if err != nil {
		return nil, fmt.Errorf("%s: %w: %w (corrupt or truncated; take a new one with `raftps snapshot save`)", path, ErrBadSnapshotFile, err)
	}
	return snap, nil
}

// InspectSnapshotFile checks a file completely: checksum, then a full
// decode of the FSM snapshot (which also refuses a newer format:
// fsm.ErrNewerFormat). Path in the result is absolute.
func InspectSnapshotFile(path string) (SnapshotFile, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return SnapshotFile{}, err
	}
	snap, err := ReadSnapshotFile(path)
	if err != nil {
		return SnapshotFile{}, err
	}
	info, _, err := raftstore.InspectSnapshot(snap)
	if err != nil {
		return SnapshotFile{}, fmt.Errorf("%s: %w", path, err)
	}
	sum := sha256.Sum256(b)
	abs, _ := filepath.Abs(path)
	return SnapshotFile{Path: abs, SnapshotInfo: info, SHA256: hex.EncodeToString(sum[:]), FileBytes: int64(len(b))}, nil
}

// ParseInitialCluster is the first configuration of a restored cluster:
// the --initial-cluster list (id=raftaddr, each id once, id among them),
// or this node alone at raftAddr.
func ParseInitialCluster(id, raftAddr string, list []string) ([]raft.Server, error) {
	if len(list) == 0 {
		return []raft.Server{{Suffrage: raft.Voter, ID: raft.ServerID(id), Address: raft.ServerAddress(raftAddr)}}, nil
	}
	var out []raft.Server
	seen := map[string]bool{}
	for _, m := range list {
		k, v, ok := strings.Cut(m, "=")
		if !ok || k == "" || v == "" {
			return nil, fmt.Errorf("--initial-cluster %q: want id=raftaddr", m)
		}
		if seen[k] {
			return nil, fmt.Errorf("--initial-cluster: %q twice", k)
		}
		seen[k] = true
		out = append(out, raft.Server{Suffrage: raft.Voter, ID: raft.ServerID(k), Address: raft.ServerAddress(v)})
	}
	if !seen[id] {
		return nil, fmt.Errorf("--initial-cluster does not list --id %q", id)
	}
	return out, nil
}

// RestoreConfig is what `snapshot restore` seeds a data dir with.
type RestoreConfig struct {
	File     string // the snapshot file
	DataDir  string // the new node's data dir (must hold no Raft state)
	ID       string // the new node's ID
	RaftAddr string // its advertised Raft address, without InitialCluster
	// InitialCluster lists every member of the new cluster as
	// id=raftaddr (the same list on each); empty: ID alone at RaftAddr.
	InitialCluster []string
	LogStore       string // raftstore.LogStoreBoltDB or LogStoreWAL
}

// Restored is the result of Restore (its JSON is `snapshot restore -w
// json`'s output).
type Restored struct {
	raftstore.SnapshotInfo
	DataDir string   `json:"data_dir"`
	ID      string   `json:"id"`
	Members []string `json:"members"` // id=raftaddr
}

// Restore writes a data dir from which `raftps node` starts a new cluster
// holding the snapshot's state (etcdutl's snapshot restore). The file is
// checked completely first; a corrupt or newer-format snapshot, or a data
// dir that already holds Raft state, is refused and nothing is written.
func Restore(cfg RestoreConfig) (Restored, error) {
	if cfg.DataDir == "" || cfg.ID == "" {
		return Restored{}, errors.New("--data-dir and --id are required")
	}
	servers, err := ParseInitialCluster(cfg.ID, cfg.RaftAddr, cfg.InitialCluster)
	if err != nil {
		return Restored{}, err
	}
	snap, err := ReadSnapshotFile(cfg.File)
	if err != nil {
		return Restored{}, err
	}
	info, err := raftstore.SeedFromSnapshot(raftstore.SeedConfig{ID: cfg.ID, DataDir: cfg.DataDir, Servers: servers, LogStore: cfg.LogStore}, snap)
	if err != nil {
		return Restored{}, fmt.Errorf("snapshot restore %s: %w", cfg.File, err)
	}
	out := Restored{SnapshotInfo: info, DataDir: cfg.DataDir, ID: cfg.ID}
	for _, s := range servers {
		out.Members = append(out.Members, string(s.ID)+"="+string(s.Address))
	}
	return out, nil
}
