package etcdapi

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"testing"
)

// TestParseSnapshotLayouts: ParseSnapshot reads the bolt-prefixed file
// EncodeSnapshot writes and the older layout (FSM snapshot first, plain
// SHA-256 trailer) that earlier `raftps snapshot save` files have, and
// refuses a new file whose trailer is a plain SHA-256 (what etcd's tools
// would write after changing it) or a flipped byte.
func TestParseSnapshotLayouts(t *testing.T) {
	fsmSnap := bytes.Repeat([]byte("RPSFSM\x00\x01"), 100)
	file := EncodeSnapshot(fsmSnap)
	if got, err := ParseSnapshot(file); err != nil || !bytes.Equal(got, fsmSnap) {
		t.Fatalf("new layout: %v", err)
	}
	if (len(file)-sha256.Size)%snapshotAlign != 0 || !bytes.HasPrefix(file, boltPrefix) {
		t.Fatalf("new layout: %d bytes, want a bolt prefix and a body a multiple of %d", len(file), snapshotAlign)
	}
	body := (len(fsmSnap) + 8 + snapshotAlign - 1) / snapshotAlign * snapshotAlign
	legacy := make([]byte, body)
	copy(legacy, fsmSnap)
	binary.BigEndian.PutUint64(legacy[body-8:], uint64(len(fsmSnap)))
	sum := sha256.Sum256(legacy)
	legacy = append(legacy, sum[:]...)
	if got, err := ParseSnapshot(legacy); err != nil || !bytes.Equal(got, fsmSnap) {
		t.Fatalf("older layout: %v", err)
	}
	plain := bytes.Clone(file)
	psum := sha256.Sum256(plain[:len(plain)-sha256.Size])
	copy(plain[len(plain)-sha256.Size:], psum[:])
	flipped := bytes.Clone(file)
	flipped[boltPrefixLen+3] ^= 1
	for name, b := range map[string][]byte{"plain SHA-256 trailer": plain, "flipped byte": flipped} {
		if _, err := ParseSnapshot(b); !errors.Is(err, ErrBadSnapshot) {
			t.Errorf("%s: %v, want ErrBadSnapshot", name, err)
		}
	}
}
