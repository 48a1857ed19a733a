package etcdapi

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/fnv"
)

// A snapshot file (what Maintenance.Snapshot streams and `raftps
// snapshot save` or `etcdctl snapshot save` write) is, from its start:
//
//	bolt prefix (4 pages of 4096 bytes) | FSM snapshot | zero padding |
//	length of the FSM snapshot (uint64, big endian) | trailer (32 bytes)
//
// The bolt prefix is a valid, empty-but-for-one-key bolt database whose
// root holds a plain key (not a bucket) named snapshotNotice: `etcdctl
// snapshot status` opens it, checks it, and fails with "cannot get hash of
// bucket NOT AN ETCD SNAPSHOT: ... use `raftps snapshot status|restore`"
// (it had said "invalid database"). The trailer is the SHA-256 of
// snapshotDomain followed by everything before it, not etcd's plain SHA-256
// of the body, so `etcdctl snapshot restore` refuses the file at its hash
// check ("expected sha256 ..., got ...") instead of panicking in etcd's
// backend or restoring an empty etcd. etcdctl 3.4 creates
// DIR/member/snap/db before it reads the file, so a refused restore
// leaves that directory behind, whatever the file holds.
//
// The body (all before the trailer) is a multiple of 512 bytes, as
// etcdctl 3.4's `snapshot save` requires. Files written before the bolt
// prefix (the FSM snapshot first, the trailer its plain SHA-256) are still
// read by ParseSnapshot.
const (
	boltPageSize   = 4096
	boltPrefixLen  = 4 * boltPageSize
	snapshotNotice = "NOT AN ETCD SNAPSHOT: this file is a raftps snapshot; " +
		"read it with `raftps snapshot status FILE` and restore it with `raftps snapshot restore FILE`"
	snapshotDomain = "raftps snapshot v2\x00"
)

// bolt's on-disk constants (go.etcd.io/bbolt, page.go and db.go).
const (
	boltMagic        = 0xED0CDAED
	boltVersion      = 2
	boltLeafPage     = 0x02
	boltMetaPage     = 0x04
	boltFreelistPage = 0x10
	boltPageHeader   = 16
)

// boltPrefix is the 4-page bolt database described above: two meta
// pages, an empty freelist (page 2) and a root leaf (page 3) holding
// snapshotNotice as a key with an empty value. bolt is native-endian; it
// is written little-endian (etcd's platforms).
var boltPrefix = func() []byte {
	b := make([]byte, boltPrefixLen)
	le := binary.LittleEndian
	page := func(id uint64, flags, count uint16) []byte {
		p := b[id*boltPageSize : (id+1)*boltPageSize]
		le.PutUint64(p[0:], id)
		le.PutUint16(p[8:], flags)
		le.PutUint16(p[10:], count)
		return p
	}
	for txid := uint64(0); txid < 2; txid++ {
		m := page(txid, boltMetaPage, 0)[boltPageHeader:]
		le.PutUint32(m[0:], boltMagic)
		le.PutUint32(m[4:], boltVersion)
		le.PutUint32(m[8:], boltPageSize)
		le.PutUint64(m[16:], 3) // root bucket's page; its sequence (m[24:]) is 0
		le.PutUint64(m[32:], 2) // freelist page
		le.PutUint64(m[40:], 4) // high-water page id
		le.PutUint64(m[48:], txid)
		h := fnv.New64a()
		h.Write(m[:56])
		le.PutUint64(m[56:], h.Sum64())
	}
	page(2, boltFreelistPage, 0)
	leaf := page(3, boltLeafPage, 1)[boltPageHeader:]
	// One leaf element: flags 0 (a plain key), key 16 bytes after the
	// element, value empty.
	le.PutUint32(leaf[4:], 16)
	le.PutUint32(leaf[8:], uint32(len(snapshotNotice)))
	copy(leaf[16:], snapshotNotice)
	return b
}()

// EncodeSnapshot lays an FSM snapshot out as a snapshot file (above).
func EncodeSnapshot(fsmSnap []byte) []byte {
	n := len(fsmSnap)
	body := boltPrefixLen + (n+8+snapshotAlign-1)/snapshotAlign*snapshotAlign
	data := make([]byte, body, body+sha256.Size)
	copy(data, boltPrefix)
	copy(data[boltPrefixLen:], fsmSnap)
	binary.BigEndian.PutUint64(data[body-8:], uint64(n))
	return append(data, snapshotTrailer(data)...)
}

func snapshotTrailer(body []byte) []byte {
	h := sha256.New()
	h.Write([]byte(snapshotDomain))
	h.Write(body)
	return h.Sum(nil)
}

// snapshotAlign is the multiple of the snapshot body's size (etcdctl's).
const snapshotAlign = 512

// ErrBadSnapshot: a file is not a snapshot written by Snapshot (wrong
// size, checksum or length).
var ErrBadSnapshot = errors.New("etcdapi: not a raftps snapshot")

// ParseSnapshot checks a snapshot file (saved from Maintenance.Snapshot by
// `raftps snapshot save` or `etcdctl snapshot save`; also the older
// layout without the bolt prefix) and returns the FSM snapshot inside it.
// Errors: ErrBadSnapshot.
func ParseSnapshot(b []byte) ([]byte, error) {
	if len(b) < snapshotAlign+sha256.Size || (len(b)-sha256.Size)%snapshotAlign != 0 {
		return nil, fmt.Errorf("%w: size %d", ErrBadSnapshot, len(b))
	}
	body, sum := b[:len(b)-sha256.Size], b[len(b)-sha256.Size:]
	start := 0
	if bytes.HasPrefix(body, boltPrefix) {
		start = boltPrefixLen
		if !bytes.Equal(snapshotTrailer(body), sum) {
			return nil, fmt.Errorf("%w: checksum mismatch", ErrBadSnapshot)
		}
	} else if plain := sha256.Sum256(body); !bytes.Equal(plain[:], sum) {
		return nil, fmt.Errorf("%w: SHA-256 mismatch", ErrBadSnapshot)
	}
	n := binary.BigEndian.Uint64(body[len(body)-8:])
	if n > uint64(len(body)-8-start) {
		return nil, fmt.Errorf("%w: length %d in a body of %d bytes", ErrBadSnapshot, n, len(body))
	}
	return body[start : start+int(n)], nil
}
