package main

import (
	"strings"
	"testing"
)

// TestNoGossipKeyFlag: the gossip key is not taken on the command line
// (where ps shows it); --gossip-keyring-file is the only way, and
// --gossip-key is refused as an unknown flag before a node starts.
func TestNoGossipKeyFlag(t *testing.T) {
	// --roles cook: a node that parsed --gossip-key fails its config check
	// instead of starting, so the old flag shows as the wrong error.
	_, err := runOffline(t, "node", "--insecure", "--id", "x", "--data-dir", t.TempDir(), "--roles", "cook",
		"--gossip-key", strings.Repeat("k", 32))
	if err == nil || !strings.Contains(err.Error(), "unknown flag: --gossip-key") {
		t.Fatalf("raftps node --gossip-key: %v; want unknown flag", err)
	}
}

// TestRaftLogStoreFlag: --raft-log-store takes boltdb or wal; anything
// else is refused before the node starts, naming both.
func TestRaftLogStoreFlag(t *testing.T) {
	_, err := runOffline(t, "node", "--insecure", "--id", "x", "--data-dir", t.TempDir(), "--raft-log-store", "rocksdb")
	if err == nil || !strings.Contains(err.Error(), `--raft-log-store "rocksdb": want boltdb or wal`) {
		t.Fatalf("raftps node --raft-log-store rocksdb: %v; want the two stores named", err)
	}
}
