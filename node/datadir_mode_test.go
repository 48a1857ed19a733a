package node_test

import (
	"bytes"
	"context"
	"crypto/md5"
	"encoding/hex"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	pb "github.com/raftps/raftps/api/raftpspb"
	"github.com/raftps/raftps/internal/testing/nodetest"
	"github.com/raftps/raftps/node"
	"github.com/raftps/raftps/pserver/checkpoint"
)

// checkPrivate fails for every directory under dir that is not 0700 and
// every regular file that is not 0600.
func checkPrivate(t *testing.T, dir string) (files int) {
	t.Helper()
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		switch {
		case d.IsDir() && fi.Mode().Perm() != 0o700:
			t.Errorf("directory %s is %v, want 0700", p, fi.Mode().Perm())
		case fi.Mode().IsRegular():
			files++
			if fi.Mode().Perm() != 0o600 {
				t.Errorf("file %s is %v, want 0600", p, fi.Mode().Perm())
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return files
}

// withUmask runs the test under umask m (the node's modes must not depend
// on it) and restores the old one at its end.
func withUmask(t *testing.T, m int) {
	old := syscall.Umask(m)
	t.Cleanup(func() { syscall.Umask(old) })
}

// TestDataDirPrivate is issue 32's hole 9: after a node ran with a Raft
// snapshot and a checkpoint store holding blobs (one small, one ingested
// as an sstable), every directory under its data dir is 0700 and every
// file 0600, under umask 0 (hashicorp/raft's snapshot files come from
// os.Create, Pebble's with 0666).
func TestDataDirPrivate(t *testing.T) {
	withUmask(t, 0)
	var dir string
	n := nodetest.Open(t, "n1", []string{"server", "pserver"}, func(c *node.Config) { dir = c.DataDir })
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for i := range 20 {
		if _, err := n.Store().Put(ctx, &pb.PutRequest{Key: []byte{'k', byte(i)}, Value: []byte("v")}); err != nil {
			t.Fatal(err)
		}
	}
	if err := n.Store().Raft().Snapshot().Error(); err != nil {
		t.Fatal(err)
	}
	if err := n.Close(); err != nil {
		t.Fatal(err)
	}
	// The node's checkpoint store, as its pserver agent writes it.
	st, err := checkpoint.Open(filepath.Join(dir, "checkpoints"), nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, size := range []int{1 << 10, checkpoint.DefaultIngestThreshold + 1} {
		blob := bytes.Repeat([]byte{byte(size)}, size)
		sum := md5.Sum(blob)
		if err := st.PutBlob(hex.EncodeToString(sum[:]), blob); err != nil {
			t.Fatal(err)
		}
	}
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}
	snaps, _ := filepath.Glob(filepath.Join(dir, "raft", "snapshots", "*", "state.bin"))
	if len(snaps) == 0 {
		t.Fatal("no Raft snapshot in the data dir")
	}
	files := checkPrivate(t, dir)
	if !t.Failed() {
		t.Logf("%d files under the data dir, all 0600", files)
	}
}

// TestLooseDataDirTightened: a data dir an older release left 0755 with
// 0644 files is made 0700 with 0600 files when the node opens it.
func TestLooseDataDirTightened(t *testing.T) {
	withUmask(t, 0)
	var dir string
	n := nodetest.Open(t, "n1", []string{"server"}, func(c *node.Config) { dir = c.DataDir })
	if err := n.Close(); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "raft", "old-file"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(filepath.Join(dir, "raft"), 0o755); err != nil {
		t.Fatal(err)
	}
	nodetest.Open(t, "n1", []string{"server"}, func(c *node.Config) { c.DataDir = dir })
	checkPrivate(t, dir)
}
