package pserver

import (
	"encoding/binary"
	"errors"
	"hash/crc32"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/raftps/raftps/pserver/vshard"
	"github.com/raftps/raftps/pserver/wire"
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
		binary.LittleEndian.PutUint32(b[len(b)-4:], crc32.Checksum(body, crc32.MakeTable(crc32.Castagnoli)))
		return b
	}
	if _, err := vshard.Decode(reformat(vshard.Format)); err != nil {
		t.Fatalf("current format: %v", err)
	}
	_, err := vshard.Decode(reformat(vshard.Format + 1))
	if !errors.Is(err, wire.ErrNewerFormat) || errors.Is(err, wire.ErrCorrupt) {
		t.Fatalf("format %d: %v, want wire.ErrNewerFormat", vshard.Format+1, err)
	}
	if status.Code(wire.ToGRPC(err)) != codes.FailedPrecondition {
		t.Fatalf("format %d: gRPC code %v, want FailedPrecondition", vshard.Format+1, status.Code(wire.ToGRPC(err)))
	}
	t.Logf("newer format: %v", err)
	if _, err := vshard.Decode(reformat(0)); !errors.Is(err, wire.ErrCorrupt) {
		t.Fatalf("format 0: %v, want wire.ErrCorrupt", err)
	}
}
