package checkpoint

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"io"
	"math"
	"strings"
	"testing"

	pb "github.com/raftps/raftps/api/raftpspb"
	"github.com/raftps/raftps/schema"
)

// fakeDecoder decodes a fakeBlob into w[id] = {version, id} (shape [NV,2])
// and, for vshard 0, b = {7} (shape [1]).
var fakeDecoder = DecoderFunc(func(b []byte) ([]Block, error) {
	if len(b) < 16 {
		return nil, errors.New("short blob")
	}
	v, id := blobVersion(b)
	out := []Block{{Name: "w", Shape: []int64{testNV, 2}, Offset: int64(id) * 2, Data: []float32{float32(v), float32(id)}}}
	if id == 0 {
		out = append(out, Block{Name: "b", Shape: []int64{1}, Data: []float32{7}})
	}
	return out, nil
})

func TestListBestExport(t *testing.T) {
	c := mustCluster(t, 2)
	ctx := context.Background()
	pol := &pb.CheckpointPolicy{Replicas: 2}
	for s := int32(0); s < 2; s++ {
		c.claim(testJob, s, c.nodes[s], 1)
	}
	for v := int64(1); v <= 3; v++ {
		for s := int32(0); s < 2; s++ {
			mustCheckpoint(t, c.nodes[s].mgr.Writer(testJob, s), WriteRequest{Job: testJob, Slot: s, NumPservers: 2, Version: v, Step: v * 10,
				Incarnation: 1, Blobs: slotBlobs(v, s, 2, testNV, testSize), Policy: pol})
		}
	}
	metrics := Metrics{1: 0.5, 2: 0.9, 3: 0.7}
	vs, err := c.nodes[0].mgr.List(ctx, testJob, metrics)
	if err != nil {
		t.Fatal(err)
	}
	if len(vs) != 3 || vs[0].Version != 3 || vs[2].Version != 1 {
		t.Fatalf("List: %+v", vs)
	}
	for _, v := range vs {
		if !v.Complete || v.Step != v.Version*10 || v.Bytes != 2*4*testSize || len(v.Slots) != 2 || len(v.Replicas) != 2 || v.Metric == nil {
			t.Fatalf("List entry: %+v", v)
		}
	}
	plain, err := List(ctx, c.meta, testJob, nil)
	if err != nil || len(plain) != 3 || plain[0].Step != 30 || !plain[2].Complete {
		t.Fatalf("package List: %+v %v", plain, err)
	}
	best, ok := Best(vs, HigherIsBetter)
	if !ok || best.Version != 2 {
		t.Fatalf("Best higher: %+v", best)
	}
	if best, _ := Best(vs, LowerIsBetter); best.Version != 1 {
		t.Fatalf("Best lower: %+v", best)
	}
	if _, ok := Best(plain, HigherIsBetter); ok {
		t.Fatal("Best without metrics must say so")
	}

	var buf bytes.Buffer
	if err := c.nodes[1].mgr.Export(ctx, testJob, 2, fakeDecoder, &buf); err != nil {
		t.Fatal(err)
	}
	r := bytes.NewReader(buf.Bytes())
	h, err := ReadExportHeader(r)
	if err != nil {
		t.Fatal(err)
	}
	if h.Job != testJob || h.Version != 2 || h.Step != 20 || len(h.Params) != 2 || h.Params[0].Name != "b" || h.Params[1].Name != "w" {
		t.Fatalf("header %+v", h)
	}
	data, _ := io.ReadAll(r)
	if MD5Hex(data) != h.DataMD5 || int64(len(data)) != h.Params[1].Offset+h.Params[1].Bytes {
		t.Fatalf("data section: %d bytes, md5 %s vs %s", len(data), MD5Hex(data), h.DataMD5)
	}
	f := func(off int64) float32 { return math.Float32frombits(binary.LittleEndian.Uint32(data[off:])) }
	if f(h.Params[0].Offset) != 7 {
		t.Fatalf("b = %v", f(h.Params[0].Offset))
	}
	for id := int64(0); id < testNV; id++ {
		if f(h.Params[1].Offset+8*id) != 2 || f(h.Params[1].Offset+8*id+4) != float32(id) {
			t.Fatalf("w[%d] wrong", id)
		}
	}
	if _, err := ReadExportHeader(strings.NewReader("NOTRAFTPS-------")); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("bad magic: %v", err)
	}
}

func TestAsyncRestorePerSlot(t *testing.T) {
	c := mustCluster(t, 2)
	ctx := context.Background()
	pol := &pb.CheckpointPolicy{Replicas: 1, KeepMax: 2}
	vers := map[int32][]int64{0: {10, 20}, 1: {7, 13}}
	for s := int32(0); s < 2; s++ {
		c.claim(testJob, s, c.nodes[s], 1)
		for _, v := range vers[s] {
			mustCheckpoint(t, c.nodes[s].mgr.Writer(testJob, s), WriteRequest{Job: testJob, Slot: s, NumPservers: 2, Version: v,
				Incarnation: 1, Blobs: slotBlobs(v, s, 2, testNV, testSize), Policy: pol})
		}
	}
	// Sync restore finds no common version.
	blobs, rec, err := c.nodes[0].mgr.Restore(ctx, RestoreRequest{Job: testJob, Slot: 0, NumPservers: 2})
	if err != nil || blobs != nil || !strings.HasPrefix(rec.GetReason(), "initializer:") {
		t.Fatalf("sync restore of async versions: %v %v", rec, err)
	}
	for s := int32(0); s < 2; s++ {
		blobs, rec, err := c.nodes[1].mgr.Restore(ctx, RestoreRequest{Job: testJob, Slot: s, NumPservers: 2, Async: true})
		if err != nil || blobs == nil {
			t.Fatalf("async restore: %v %v", rec, err)
		}
		if v := checkWhole(t, blobs, vshardsOf(s, 2, testNV), testSize); v != vers[s][1] {
			t.Fatalf("slot %d restored %d", s, v)
		}
	}
	// Repartition to 1 slot: each old slot contributes its newest; then a
	// corrupt blob of slot 0's version 20 falls back to 10 for slot 0 only.
	flipByte(t, c.nodes[0].store, MD5Hex(fakeBlob(20, 4, testSize)), 50)
	blobs, rec, err = c.nodes[1].mgr.Restore(ctx, RestoreRequest{Job: testJob, Slot: 0, NumPservers: 1, Async: true})
	if err != nil || blobs == nil {
		t.Fatalf("async restore: %v %v", rec, err)
	}
	for id, b := range blobs {
		v, _ := blobVersion(b)
		want := map[int32]int64{0: 10, 1: 13}[id%2]
		if v != want || string(b) != string(fakeBlob(v, id, testSize)) {
			t.Fatalf("vshard %d: version %d, want %d", id, v, want)
		}
	}
	if len(blobs) != testNV || !strings.HasPrefix(rec.GetReason(), "fallback:") {
		t.Fatalf("record %v", rec)
	}
	t.Log(rec)
}

func TestFenceSurvivesValueRewrite(t *testing.T) {
	// The claimer may rewrite its ps value (same claim, same create
	// revision): that must not fence it.
	c := mustCluster(t, 1)
	c.claim(testJob, 0, c.nodes[0], 1)
	w := c.nodes[0].mgr.Writer(testJob, 0)
	w.hook = func(s string) error {
		if s == StageBeforePointer {
			c.meta.put(schema.SlotKey(testJob, 0), []byte(`{"node":"n0","addr":"elsewhere","incarnation":1}`))
		}
		return nil
	}
	mustCheckpoint(t, w, WriteRequest{Job: testJob, Slot: 0, NumPservers: 1, Version: 1, Incarnation: 1,
		Blobs: slotBlobs(1, 0, 1, testNV, testSize), Policy: &pb.CheckpointPolicy{Replicas: 1}})
}
