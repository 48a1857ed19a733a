package pserver

import (
	"encoding/binary"
	"errors"
	"hash/crc32"
	"testing"

	"github.com/raftps/raftps/api/rpctypes"
)

// A vshard blob of a newer format (a newer raftps wrote it, in a
// mixed-version cluster) is refused as such, with the versions named, not
// as corrupt bytes; a format below the current one stays ErrCorrupt.
func TestDecodeVShardRefusesNewerFormat(t *testing.T) {
	s := mustSlot(t, restoreSpec(), 0, 1)
	snap := s.Snapshot()
	var blob []byte
	for v := range snap.VShards {
		b, err := EncodeVShard(snap, v)
		if err != nil {
			t.Fatal(err)
		}
		blob = b
		break
	}
	reformat := func(f uint16) []byte {
		b := append([]byte(nil), blob...)
		binary.LittleEndian.PutUint16(b[4:], f)
		body := b[:len(b)-4]
		binary.LittleEndian.PutUint32(b[len(b)-4:], crc32.Checksum(body, castagnoli))
		return b
	}
	if _, err := DecodeVShard(reformat(vshardFormat)); err != nil {
		t.Fatalf("current format: %v", err)
	}
	_, err := DecodeVShard(reformat(vshardFormat + 1))
	if !errors.Is(err, ErrNewerFormat) || errors.Is(err, ErrCorrupt) {
		t.Fatalf("format %d: %v, want ErrNewerFormat", vshardFormat+1, err)
	}
	if rpctypes.Code(err).String() != "FailedPrecondition" {
		t.Fatalf("format %d: gRPC code %v, want FailedPrecondition", vshardFormat+1, rpctypes.Code(err))
	}
	t.Logf("newer format: %v", err)
	if _, err := DecodeVShard(reformat(0)); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("format 0: %v, want ErrCorrupt", err)
	}
}
