package main

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/raftps/raftps/cmd/raftps/offline"
	"github.com/raftps/raftps/fsm"
	"github.com/raftps/raftps/raftstore/etcdapi"
)

// TestSnapshotNewerFormatRefused (mixed versions): a snapshot file whose
// FSM snapshot carries a newer format version, with an intact file
// checksum (as a newer raftps would write it), is refused by `snapshot
// status` and `snapshot restore` as a newer format (fsm.ErrNewerFormat,
// naming both versions and what to do), not as a corrupt file, and the
// restore writes nothing.
func TestSnapshotNewerFormatRefused(t *testing.T) {
	n := mustNode(t)
	dir := t.TempDir()
	file := filepath.Join(dir, "snap.db")
	if _, err := runArgs("--endpoints", n.GRPCAddr(), "snapshot", "save", file); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	// The FSM snapshot starts with its magic "RPSFSM\x00<format>".
	const formatByte = 7
	body, err := etcdapi.ParseSnapshot(b)
	if err != nil || !bytes.HasPrefix(body, []byte("RPSFSM\x00")) {
		t.Fatalf("snapshot file: %v; FSM snapshot starts %q, want the FSM magic", err, body[:min(8, len(body))])
	}
	body = bytes.Clone(body)
	body[formatByte]++
	newer := etcdapi.EncodeSnapshot(body)
	p := filepath.Join(dir, "newer.db")
	if err := os.WriteFile(p, newer, 0o600); err != nil {
		t.Fatal(err)
	}
	target := filepath.Join(dir, "target")
	for _, args := range [][]string{
		{"snapshot", "status", p},
		{"snapshot", "restore", p, "--data-dir", target, "--id", "r1"},
	} {
		_, err := runArgs(args...)
		if !errors.Is(err, fsm.ErrNewerFormat) || errors.Is(err, offline.ErrBadSnapshotFile) {
			t.Fatalf("%s: %v, want fsm.ErrNewerFormat", strings.Join(args[:2], " "), err)
		}
		if msg := err.Error(); !strings.Contains(msg, "format 2") || !strings.Contains(msg, "up to 1") || !strings.Contains(msg, "upgrade raftps") {
			t.Fatalf("%s: message %q does not name the versions and the remedy", strings.Join(args[:2], " "), msg)
		}
		t.Logf("%s: %v", strings.Join(args[:2], " "), err)
	}
	if _, err := os.Stat(target); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("restore of a newer-format snapshot created %s", target)
	}
}
