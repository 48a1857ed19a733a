package checkpoint

import (
	"bytes"
	"path/filepath"
	"testing"
)

// TestHashAndIngest: the SIMD MD5 of the hash-and-write pipeline equals
// the standard library's for every length around MD5's 64-byte block and
// md5-simd's 32 KiB chunk; a blob repeated within one checkpoint is
// stored once; a blob already stored is not written again; every blob
// reads back whole and verified after a reopen.
func TestHashAndIngest(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "ckpt")
	st, err := Open(dir, quietLogger())
	if err != nil {
		t.Fatal(err)
	}
	st.ingestThreshold = 0 // every checkpoint takes the ingest path
	blobs := map[int32][]byte{}
	for i, n := range []int{0, 1, 55, 63, 64, 65, 127, 32<<10 - 1, 32 << 10, 32<<10 + 1, 1 << 20} {
		b := make([]byte, n)
		for j := range b {
			b[j] = byte(j*7 + i)
		}
		blobs[int32(i)] = b
	}
	blobs[100] = bytes.Clone(blobs[7]) // repeated within the checkpoint
	refs, total, err := st.putBlobs(blobs)
	if err != nil {
		t.Fatal(err)
	}
	var want int64
	for _, b := range blobs {
		want += int64(len(b))
	}
	if total != want || len(refs) != len(blobs) {
		t.Fatalf("total %d refs %d, want %d and %d", total, len(refs), want, len(blobs))
	}
	for _, r := range refs {
		if got := MD5Hex(blobs[r.ID]); r.MD5 != got {
			t.Errorf("vshard %d (%d bytes): md5 %s, want %s", r.ID, len(blobs[r.ID]), r.MD5, got)
		}
	}
	stored, err := st.BlobMD5s()
	if err != nil || len(stored) != len(blobs)-1 {
		t.Fatalf("%d blobs stored (%v), want %d (the repeat once)", len(stored), err, len(blobs)-1)
	}
	// Again with one new blob: only it is written.
	blobs[200] = []byte("new")
	if _, _, err := st.putBlobs(blobs); err != nil {
		t.Fatal(err)
	}
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}
	if st, err = Open(dir, quietLogger()); err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	if stored, _ = st.BlobMD5s(); len(stored) != len(blobs)-1 {
		t.Fatalf("after reopen %d blobs, want %d", len(stored), len(blobs)-1)
	}
	for id, b := range blobs {
		got, err := st.GetBlob(MD5Hex(b))
		if err != nil || !bytes.Equal(got, b) {
			t.Fatalf("vshard %d: read back %d bytes, %v", id, len(got), err)
		}
	}
}
