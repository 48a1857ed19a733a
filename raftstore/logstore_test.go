package raftstore

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"

	"github.com/raftps/raftps/fsm"
)

// wantLogStore fails unless the data dir dir records kind (0600) and holds
// that store's files, not the other's.
func wantLogStore(tb testing.TB, dir, kind string) {
	tb.Helper()
	p := filepath.Join(dir, "raft", logStoreFile)
	b, err := os.ReadFile(p)
	if err != nil || strings.TrimSpace(string(b)) != kind {
		tb.Fatalf("%s = %q, %v; want %s", p, b, err, kind)
	}
	if fi, err := os.Stat(p); err != nil || fi.Mode().Perm() != 0o600 {
		tb.Fatalf("%s: mode %v, %v; want 0600", p, fi.Mode().Perm(), err)
	}
	files := map[string]string{LogStoreBoltDB: boltFile, LogStoreWAL: walDir}
	for k, f := range files {
		if _, err := os.Stat(filepath.Join(dir, "raft", f)); (err == nil) != (k == kind) {
			tb.Fatalf("log store %s: %s present = %v", kind, f, err == nil)
		}
	}
}

// openSingle opens a bootstrapped single-server store on dir with the log
// store kind and waits for it to lead.
func openSingle(t *testing.T, dir, kind string) (*Store, error) {
	t.Helper()
	cfg := testConfig(t, "n1", dir)
	cfg.Bootstrap = true
	cfg.LogStore = kind
	s, err := New(cfg, fsm.New(nil), nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Open(); err != nil {
		return nil, err
	}
	t.Cleanup(func() { s.Close() })
	if err := s.WaitForLeader(ctxT(t, 10*time.Second)); err != nil {
		t.Fatal(err)
	}
	return s, nil
}

// A data dir keeps the log store of its first start: a restart naming the
// other one is refused with an error naming both and the way out, and
// nothing is written; a restart with the same one keeps every write.
func TestLogStoreMismatch(t *testing.T) {
	forEachLogStore(t, func(t *testing.T) {
		kind := logStoreOf(t)
		other := LogStoreWAL
		if kind == LogStoreWAL {
			other = LogStoreBoltDB
		}
		ctx := ctxT(t, 20*time.Second)
		dir := t.TempDir()
		s, err := openSingle(t, dir, kind)
		if err != nil {
			t.Fatal(err)
		}
		mustPut(ctx, t, s, "k", "v")
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
		wantLogStore(t, dir, kind)

		_, err = openSingle(t, dir, other)
		if !errors.Is(err, ErrLogStoreMismatch) {
			t.Fatalf("restart with %s on a %s data dir: %v, want ErrLogStoreMismatch", other, kind, err)
		}
		for _, want := range []string{"holds a " + kind + " log store", "--raft-log-store " + other, "start it with --raft-log-store " + kind, "wiping its data dir"} {
			if !strings.Contains(err.Error(), want) {
				t.Fatalf("refusal %q does not say %q", err, want)
			}
		}
		wantLogStore(t, dir, kind)

		s, err = openSingle(t, dir, kind)
		if err != nil {
			t.Fatal(err)
		}
		if v, _, err := get(ctx, s, "k", false); err != nil || v != "v" {
			t.Fatalf("after the refused restart: k = %q, %v", v, err)
		}
	})
}

// A data dir from before the log-store record (raft.db, no record) is
// boltdb: the default start adopts it and keeps its state, a start with
// wal is refused.
func TestLogStoreUpgradeFromUnrecordedBoltDB(t *testing.T) {
	ctx := ctxT(t, 20*time.Second)
	dir := t.TempDir()
	s, err := openSingle(t, dir, LogStoreBoltDB)
	if err != nil {
		t.Fatal(err)
	}
	mustPut(ctx, t, s, "k", "old")
	s.Close()
	if err := os.Remove(filepath.Join(dir, "raft", logStoreFile)); err != nil {
		t.Fatal(err)
	}

	if _, err := openSingle(t, dir, LogStoreWAL); !errors.Is(err, ErrLogStoreMismatch) {
		t.Fatalf("wal on an unrecorded raft.db: %v, want ErrLogStoreMismatch", err)
	}
	if _, err := os.Stat(filepath.Join(dir, "raft", walDir)); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the refused wal start created %s: %v", walDir, err)
	}
	s, err = openSingle(t, dir, "")
	if err != nil {
		t.Fatal(err)
	}
	if v, _, err := get(ctx, s, "k", false); err != nil || v != "old" {
		t.Fatalf("after the upgrade: k = %q, %v", v, err)
	}
	wantLogStore(t, dir, LogStoreBoltDB)
}

// A log store reopens after its tail was truncated (hashicorp/raft clears
// a log suffix a new leader did not commit: "clearing log suffix"), on
// both stores. raft-wal before v0.4.1 sealed the truncated tail segment
// without an index block, so the next open failed every read with "sealed
// segment has no index block" and hashicorp/raft's NewRaft panicked on it
// (hashicorp/raft-wal#31, fixed by #33 in v0.4.1); the Jepsen membership
// fault on wal hit it when the removed node restarted.
func TestLogStoreReopensAfterTailTruncation(t *testing.T) {
	forEachLogStore(t, func(t *testing.T) {
		kind, dir := logStoreOf(t), t.TempDir()
		st, err := openLogStore(dir, kind, hclog.NewNullLogger())
		if err != nil {
			t.Fatal(err)
		}
		var logs []*raft.Log
		for i := uint64(1); i <= 5; i++ {
			logs = append(logs, &raft.Log{Index: i, Term: 1, Type: raft.LogCommand, Data: []byte{byte(i)}})
		}
		if err := st.StoreLogs(logs); err != nil {
			t.Fatal(err)
		}
		if err := st.DeleteRange(4, 5); err != nil { // the suffix 4..5
			t.Fatal(err)
		}
		if err := st.StoreLog(&raft.Log{Index: 4, Term: 2, Type: raft.LogCommand, Data: []byte{44}}); err != nil {
			t.Fatal(err)
		}
		if err := st.Close(); err != nil {
			t.Fatal(err)
		}
		st, err = openLogStore(dir, kind, hclog.NewNullLogger())
		if err != nil {
			t.Fatalf("reopen after a tail truncation: %v", err)
		}
		defer st.Close()
		if last, err := st.LastIndex(); err != nil || last != 4 {
			t.Fatalf("last index after reopen = %d, %v; want 4", last, err)
		}
		for i, want := range []byte{1, 2, 3, 44} {
			var l raft.Log
			if err := st.GetLog(uint64(i+1), &l); err != nil || len(l.Data) != 1 || l.Data[0] != want {
				t.Fatalf("entry %d after reopen = %v, %v; want data %d", i+1, l.Data, err, want)
			}
		}
	})
}
