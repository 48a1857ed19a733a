package checkpoint

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"testing"

	"github.com/raftps/raftps/schema"

	pb "github.com/raftps/raftps/api/raftpspb"
)

// An export of a newer format is refused as such, not as corrupt bytes.
func TestReadExportHeaderRefusesNewerFormat(t *testing.T) {
	var buf bytes.Buffer
	dec := DecoderFunc(func([]byte) ([]Block, error) {
		return []Block{{Name: "w", Shape: []int64{1}, Data: []float32{1}}}, nil
	})
	if err := WriteExport(&buf, ExportHeader{Job: "j", Version: 1}, map[int32][]byte{0: nil}, dec); err != nil {
		t.Fatal(err)
	}
	b := buf.Bytes()
	if _, err := ReadExportHeader(bytes.NewReader(b)); err != nil {
		t.Fatalf("current format: %v", err)
	}
	binary.LittleEndian.PutUint32(b[8:], ExportFormatVersion+1)
	_, err := ReadExportHeader(bytes.NewReader(b))
	if !errors.Is(err, ErrNewerFormat) || errors.Is(err, ErrCorrupt) {
		t.Fatalf("format %d: %v, want ErrNewerFormat", ExportFormatVersion+1, err)
	}
}

// A manifest written by this build carries ManifestFormat; one of a newer
// format (with fields this build does not know) is refused as newer, not
// as corrupt; one from before the field existed reads as format 1.
func TestDecodeManifestFormat(t *testing.T) {
	m := &Manifest{UUID: "u", Job: "j", Version: 1, Slot: 0, NumPservers: 1,
		VShards: []VShardRef{{ID: 0, MD5: MD5Hex([]byte("x")), Bytes: 1}}, Bytes: 1}
	raw, _, err := EncodeManifest(m)
	if err != nil {
		t.Fatal(err)
	}
	got, err := DecodeManifest(raw)
	if err != nil || got.Format != ManifestFormat {
		t.Fatalf("current format: %+v, %v; want format %d", got, err, ManifestFormat)
	}
	newer := bytes.Replace(raw, []byte(`"format":1,`), []byte(`"format":2,"shiny_new_field":true,`), 1)
	if bytes.Equal(newer, raw) {
		t.Fatalf("no format field in %s", raw)
	}
	_, err = DecodeManifest(newer)
	if !errors.Is(err, ErrNewerFormat) || errors.Is(err, ErrCorrupt) {
		t.Fatalf("format 2: %v, want ErrNewerFormat", err)
	}
	t.Logf("newer format: %v", err)
	old := bytes.Replace(raw, []byte(`"format":1,`), nil, 1)
	if got, err := DecodeManifest(old); err != nil || got.Format != 0 {
		t.Fatalf("manifest without a format: %+v, %v; want it read", got, err)
	}
}

// A checkpoint version whose manifest a newer raftps wrote (a mixed-version
// cluster) is not silently skipped for an older version, which would drop
// the progress since: Restore refuses with ErrNewerFormat naming it.
func TestRestoreRefusesNewerManifest(t *testing.T) {
	c := mustCluster(t, 2)
	ctx := context.Background()
	c.claim(testJob, 0, c.nodes[0], 1)
	w := c.nodes[0].mgr.Writer(testJob, 0)
	pol := &pb.CheckpointPolicy{Replicas: 2, KeepMax: 2}
	for v := int64(1); v <= 2; v++ {
		mustCheckpoint(t, w, WriteRequest{Job: testJob, Slot: 0, NumPservers: 1, Version: v, Incarnation: 1,
			Blobs: slotBlobs(v, 0, 1, testNV, testSize), Policy: pol})
	}
	key := ManifestKey(testJob, 2, 0)
	var newer []byte
	for _, n := range c.nodes { // every copy, as a newer node would have written it
		raw, err := n.store.GetManifest(key)
		if err != nil {
			t.Fatal(err)
		}
		newer = bytes.Replace(raw, []byte(`"format":1,`), []byte(`"format":2,`), 1)
		if err := n.store.setRaw(key, newer); err != nil {
			t.Fatal(err)
		}
		if err := n.store.setRaw(manifestSumKey(key), []byte(MD5Hex(newer))); err != nil {
			t.Fatal(err)
		}
	}
	// The pointer names the newer manifest's MD5, as the newer writer's would.
	ptrKey := schema.CheckpointKey(testJob, 0)
	kv, err := getKV(ctx, c.meta, ptrKey)
	if err != nil {
		t.Fatal(err)
	}
	p, err := schema.ParsePointer(kv.GetValue())
	if err != nil {
		t.Fatal(err)
	}
	if p.GetVersion() != 2 {
		t.Fatalf("pointer at version %d, want 2", p.GetVersion())
	}
	p.Md5 = MD5Hex(newer)
	b, err := schema.MarshalPointer(p)
	if err != nil {
		t.Fatal(err)
	}
	c.meta.put(ptrKey, b)

	blobs, rec, err := c.nodes[0].mgr.Restore(ctx, RestoreRequest{Job: testJob, Slot: 0, NumPservers: 1})
	if !errors.Is(err, ErrNewerFormat) || blobs != nil {
		t.Fatalf("restore: %d blobs, record %v, err %v; want ErrNewerFormat and no fallback", len(blobs), rec, err)
	}
	t.Logf("restore: %v", err)
}
