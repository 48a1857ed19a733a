package fsm

import (
	"encoding/binary"
	"hash/crc32"

	"google.golang.org/protobuf/encoding/protowire"
)

func appendUvarint(b []byte, v uint64) []byte { return protowire.AppendVarint(b, v) }

// seal wraps body (a sequence of records) into a snapshot with a valid
// header and checksum, so tests and the fuzzer reach the record validation.
func seal(body []byte) []byte {
	b := append([]byte(snapMagic), body...)
	b = append(b, tagEnd)
	sum := crc32.Checksum(b, crcTable)
	b = appendUvarint(b, 4)
	return binary.BigEndian.AppendUint32(b, sum)
}
