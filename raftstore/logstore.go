package raftstore

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
	raftboltdb "github.com/hashicorp/raft-boltdb/v2"
	raftwal "github.com/hashicorp/raft-wal"
	"github.com/hashicorp/raft-wal/metadb"
	"go.etcd.io/bbolt"
)

// The Raft log stores a server can keep its log and stable store in
// (Config.LogStore, `raftps node --raft-log-store`), as Consul's
// raft_logstore backend: LogStoreBoltDB, raft-boltdb in <DataDir>/raft/raft.db
// (the default: two fdatasyncs per append), or LogStoreWAL,
// hashicorp/raft-wal's segment files in <DataDir>/raft/wal (one fdatasync
// per append). The choice is made at a data dir's first start and recorded
// in <DataDir>/raft/log-store; it cannot change afterwards (see
// ErrLogStoreMismatch for the migration).
const (
	LogStoreBoltDB = "boltdb"
	LogStoreWAL    = "wal"
)

// LogStores are the valid values of Config.LogStore, the default first.
func LogStores() []string { return []string{LogStoreBoltDB, LogStoreWAL} }

// ErrLogStoreMismatch: the data dir holds the other Raft log store than
// the one the server was started with.
var ErrLogStoreMismatch = errors.New("raftstore: data dir holds another raft log store")

// logStoreFile records the data dir's log store, written atomically at the
// first start.
const logStoreFile = "log-store"

const (
	boltFile = "raft.db"
	walDir   = "wal"
)

// boltOptions are the bbolt options of the raft log store, etcd's for its
// own bbolt backend: the freelist is not written on every commit (bbolt
// rebuilds it by scanning the pages on open) and is kept as a hashmap, so
// a commit writes fewer pages. Syncs stay on: every commit is durable. A
// variable so that BenchmarkPutBoltOptions can compare it with the
// library's defaults in one run.
var boltOptions = func() *bbolt.Options {
	return &bbolt.Options{NoFreelistSync: true, FreelistType: bbolt.FreelistMapType}
}

// logStore is the raft log and stable store of a server (raft-boltdb's
// BoltStore or raft-wal's WAL).
type logStore interface {
	raft.LogStore
	raft.StableStore
	Close() error
}

// openLogStore opens the log and stable store kind (LogStoreBoltDB or
// LogStoreWAL) in dir (<DataDir>/raft): raft-boltdb with boltOptions in
// raft.db, or raft-wal in wal/. Callers resolve kind with resolveLogStore
// first.
func openLogStore(dir, kind string, logger hclog.Logger) (logStore, error) {
	switch kind {
	case LogStoreBoltDB:
		path := filepath.Join(dir, boltFile)
		bolt, err := raftboltdb.New(raftboltdb.Options{Path: path, BoltOptions: boltOptions()})
		if err != nil {
			return nil, fmt.Errorf("raftstore: open log store %q: %w", path, err)
		}
		return bolt, nil
	case LogStoreWAL:
		path := filepath.Join(dir, walDir)
		if err := os.MkdirAll(path, 0o700); err != nil {
			return nil, fmt.Errorf("raftstore: open log store %q: %w", path, err)
		}
		meta := &metadb.BoltMetaDB{}
		w, err := raftwal.Open(path, raftwal.WithLogger(logger), raftwal.WithMetaStore(meta))
		if err != nil {
			meta.Close()
			return nil, fmt.Errorf("raftstore: open log store %q: %w", path, err)
		}
		return walStore{w, meta}, nil
	}
	return nil, checkLogStore(kind)
}

// checkLogStore reports an error unless kind is a log store ("" is the
// default, boltdb).
func checkLogStore(kind string) error {
	if kind != "" && kind != LogStoreBoltDB && kind != LogStoreWAL {
		return fmt.Errorf("raftstore: unknown log store %q (want %s or %s)", kind, LogStoreBoltDB, LogStoreWAL)
	}
	return nil
}

// walStore is raft-wal with its meta store (wal-meta.db, bolt: the
// segment list and the stable store). WAL.Close closes the meta store
// since raft-wal v0.4.1; closing it again is a no-op, and it is closed
// here as well so that no version leaves its flock held (the next open in
// this process would wait forever). raft-wal must be at least v0.4.1: a
// v0.4.0 WAL whose tail was truncated could not be reopened
// (TestLogStoreReopensAfterTailTruncation).
type walStore struct {
	*raftwal.WAL
	meta *metadb.BoltMetaDB
}

// Close closes the WAL, then its meta store.
func (w walStore) Close() error {
	return errors.Join(w.WAL.Close(), w.meta.Close())
}

// resolveLogStore returns the log store of the data dir dir
// (<DataDir>/raft) for a server started with want ("" means
// LogStoreBoltDB): the one recorded in dir/log-store, which must be want
// (else ErrLogStoreMismatch, naming both and the way out). A data dir
// without the record is adopted: one holding raft.db (written before the
// record existed) is LogStoreBoltDB, one holding wal/ LogStoreWAL, an empty
// one takes want; the record is then written (atomically, 0600).
func resolveLogStore(dir, want string) (string, error) {
	if want == "" {
		want = LogStoreBoltDB
	}
	if err := checkLogStore(want); err != nil {
		return "", err
	}
	p := filepath.Join(dir, logStoreFile)
	b, err := os.ReadFile(p)
	have := string(bytes.TrimSpace(b))
	switch {
	case err == nil:
	case errors.Is(err, fs.ErrNotExist):
		have = want
		if exists(filepath.Join(dir, boltFile)) {
			have = LogStoreBoltDB
		} else if exists(filepath.Join(dir, walDir)) {
			have = LogStoreWAL
		}
		if have == want {
			if err := writeFileAtomic(p, []byte(have+"\n"), 0o600); err != nil {
				return "", err
			}
		}
	default:
		return "", fmt.Errorf("raftstore: read %q: %w", p, err)
	}
	if have != want {
		return "", fmt.Errorf("%w: %q holds a %s log store, this node was started with --raft-log-store %s; "+
			"start it with --raft-log-store %s, or move it to %s by removing it from the cluster, wiping its data dir and rejoining (DESIGN.md, \"Raft log store\")",
			ErrLogStoreMismatch, dir, have, want, have, want)
	}
	return have, nil
}

// hasLogStore reports whether dir (<DataDir>/raft) holds a log store or
// its record.
func hasLogStore(dir string) bool {
	return exists(filepath.Join(dir, logStoreFile)) || exists(filepath.Join(dir, boltFile)) || exists(filepath.Join(dir, walDir))
}

func exists(p string) bool {
	_, err := os.Lstat(p)
	return err == nil
}

// writeFileAtomic writes data to p through p.tmp: write, fsync, rename,
// fsync of the directory. A crash leaves the old file or the new one.
func writeFileAtomic(p string, data []byte, perm os.FileMode) error {
	tmp := p + ".tmp"
	if err := os.WriteFile(tmp, data, perm); err != nil {
		return fmt.Errorf("raftstore: write %q: %w", tmp, err)
	}
	if err := syncFile(tmp); err != nil {
		return err
	}
	if err := os.Rename(tmp, p); err != nil {
		return fmt.Errorf("raftstore: rename %q: %w", tmp, err)
	}
	return syncFile(filepath.Dir(p))
}
