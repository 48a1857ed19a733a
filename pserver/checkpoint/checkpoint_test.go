package checkpoint

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	pb "github.com/raftps/raftps/api/raftpspb"
	"github.com/raftps/raftps/schema"
)

const (
	testJob  = "mnist"
	testNV   = 8    // vshards
	testSize = 4096 // bytes per fake blob
)

var errCrash = errors.New("injected crash")

// twoSlotCluster: 3 nodes, slots 0 and 1 of testJob on n0 and n1, both
// checkpointed at version 1 with policy pol.
func twoSlotCluster(t *testing.T, pol *pb.CheckpointPolicy) (*testCluster, []*Writer) {
	c := mustCluster(t, 3)
	var ws []*Writer
	for s := int32(0); s < 2; s++ {
		c.claim(testJob, s, c.nodes[s], 1)
		w := c.nodes[s].mgr.Writer(testJob, s)
		mustCheckpoint(t, w, WriteRequest{Job: testJob, Slot: s, NumPservers: 2, Version: 1, Step: 100,
			Incarnation: 1, Blobs: slotBlobs(1, s, 2, testNV, testSize), Policy: pol})
		ws = append(ws, w)
	}
	return c, ws
}

func TestCrashAtEveryStage(t *testing.T) {
	stages := []string{StageBlobsWritten, StageReplicated, StageBeforePointer, StageAfterPointer, StageDeleting}
	for _, keep := range []int32{0, 1, 2} {
		for _, stage := range stages {
			if keep == 0 && stage == StageDeleting {
				continue // keep_max 0 deletes nothing
			}
			t.Run(fmtName("keep", keep, stage), func(t *testing.T) {
				pol := &pb.CheckpointPolicy{KeepMax: keep, Replicas: 2}
				c, ws := twoSlotCluster(t, pol)
				ctx := context.Background()
				// Version 2: slot 1 completes, slot 0 crashes at stage.
				mustCheckpoint(t, ws[1], WriteRequest{Job: testJob, Slot: 1, NumPservers: 2, Version: 2, Step: 200,
					Incarnation: 1, Blobs: slotBlobs(2, 1, 2, testNV, testSize), Policy: pol})
				ws[0].hook = func(s string) error {
					if s == stage {
						return errCrash
					}
					return nil
				}
				_, err := ws[0].Checkpoint(ctx, WriteRequest{Job: testJob, Slot: 0, NumPservers: 2, Version: 2, Step: 200,
					Incarnation: 1, Blobs: slotBlobs(2, 0, 2, testNV, testSize), Policy: pol})
				if !errors.Is(err, errCrash) {
					t.Fatalf("want the injected crash, got %v", err)
				}
				// The crashed node restarts (Pebble reopened from disk).
				c.restart(c.nodes[0], false)
				pointerMoved := stage == StageAfterPointer || stage == StageDeleting
				for _, p := range []int32{2, 3, 1} {
					for s := int32(0); s < p; s++ {
						blobs, rec, err := c.nodes[s%3].mgr.Restore(ctx, RestoreRequest{Job: testJob, Slot: s, NumPservers: p})
						if err != nil {
							t.Fatal(err)
						}
						t.Logf("P=%d slot %d: %v", p, s, rec)
						if blobs == nil {
							t.Fatalf("unexpected initializer: %v", rec)
						}
						v := checkWhole(t, blobs, vshardsOf(s, p, testNV), testSize)
						if v != rec.GetVersion() {
							t.Fatalf("record says version %d, blobs are %d", rec.GetVersion(), v)
						}
						want := int64(1)
						if pointerMoved {
							want = 2
						}
						if v != want {
							t.Fatalf("restored version %d, want %d", v, want)
						}
					}
				}
				// The restarted writer retries version 2 (orphans from the crash do not get in the way).
				w := c.nodes[0].mgr.Writer(testJob, 0)
				_, err = w.Checkpoint(ctx, WriteRequest{Job: testJob, Slot: 0, NumPservers: 2, Version: 2, Step: 200,
					Incarnation: 1, Blobs: slotBlobs(2, 0, 2, testNV, testSize), Policy: pol})
				if pointerMoved {
					if !errors.Is(err, ErrStaleVersion) {
						t.Fatalf("retry of a committed version: want ErrStaleVersion, got %v", err)
					}
				} else if err != nil {
					t.Fatal(err)
				}
				blobs, rec, err := c.nodes[0].mgr.Restore(ctx, RestoreRequest{Job: testJob, Slot: 0, NumPservers: 2})
				if err != nil || blobs == nil {
					t.Fatalf("restore after retry: %v %v", err, rec)
				}
				if v := checkWhole(t, blobs, vshardsOf(0, 2, testNV), testSize); v != 2 {
					t.Fatalf("after retry restored version %d, want 2", v)
				}
			})
		}
	}
}

func fmtName(k string, v int32, s string) string {
	return k + "=" + string(rune('0'+v)) + "/" + s
}

func TestCorruptBlobFallsBackAndVerifyNamesIt(t *testing.T) {
	c := mustCluster(t, 1) // R=1: the only copy is corrupted
	ctx := context.Background()
	n := c.nodes[0]
	c.claim(testJob, 0, n, 1)
	w := n.mgr.Writer(testJob, 0)
	pol := &pb.CheckpointPolicy{KeepMax: 3, Replicas: 1}
	for v := int64(1); v <= 2; v++ {
		mustCheckpoint(t, w, WriteRequest{Job: testJob, Slot: 0, NumPservers: 1, Version: v, Incarnation: 1,
			Blobs: slotBlobs(v, 0, 1, testNV, testSize), Policy: pol})
	}
	bad := MD5Hex(fakeBlob(2, 5, testSize))
	flipByte(t, n.store, bad, 100)
	if _, err := n.store.GetBlob(bad); !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), bad) {
		t.Fatalf("GetBlob of a flipped blob: %v", err)
	}
	blobs, rec, err := n.mgr.Restore(ctx, RestoreRequest{Job: testJob, Slot: 0, NumPservers: 1})
	if err != nil {
		t.Fatal(err)
	}
	if v := checkWhole(t, blobs, vshardsOf(0, 1, testNV), testSize); v != 1 || rec.GetVersion() != 1 {
		t.Fatalf("restored %d (rec %v), want fallback to 1", v, rec)
	}
	if !strings.HasPrefix(rec.GetReason(), "fallback:") || !strings.Contains(rec.GetReason(), bad) {
		t.Fatalf("reason does not name the bad blob: %q", rec.GetReason())
	}
	mm, err := n.mgr.Verify(ctx, testJob, 2)
	if err != nil {
		t.Fatal(err)
	}
	if len(mm) != 1 || mm[0].MD5 != bad || mm[0].VShard != 5 || mm[0].Slot != 0 || mm[0].Node != n.id {
		t.Fatalf("Verify: %+v", mm)
	}
	if mm, err := n.mgr.Verify(ctx, testJob, 1); err != nil || len(mm) != 0 {
		t.Fatalf("Verify v1: %+v %v", mm, err)
	}
}

func TestCorruptLocalBlobReadFromReplica(t *testing.T) {
	c, _ := twoSlotCluster(t, &pb.CheckpointPolicy{Replicas: 2})
	ctx := context.Background()
	bad := MD5Hex(fakeBlob(1, 2, testSize)) // slot 0's vshard 2
	flipByte(t, c.nodes[0].store, bad, 17)
	blobs, rec, err := c.nodes[0].mgr.Restore(ctx, RestoreRequest{Job: testJob, Slot: 0, NumPservers: 2})
	if err != nil {
		t.Fatal(err)
	}
	checkWhole(t, blobs, vshardsOf(0, 2, testNV), testSize)
	if rec.GetVersion() != 1 || rec.GetReason() != "newest" || !strings.Contains(rec.GetSource(), "n") || rec.GetSource() == "n0" {
		t.Fatalf("record %v: want version 1 from a replica", rec)
	}
	mm, err := c.nodes[0].mgr.Verify(ctx, testJob, 1)
	if err != nil {
		t.Fatal(err)
	}
	if len(mm) != 1 || mm[0].Node != "n0" || mm[0].MD5 != bad || mm[0].VShard != 2 {
		t.Fatalf("Verify: %+v", mm)
	}
}

func flipByte(tb testing.TB, st *Store, md5hex string, at int) {
	tb.Helper()
	b, err := st.GetBlob(md5hex)
	if err != nil {
		tb.Fatal(err)
	}
	b[at] ^= 0x01
	if err := st.setRaw(blobPrefix+md5hex, b); err != nil {
		tb.Fatal(err)
	}
}

func TestRestoreFromReplicaAfterDiskLoss(t *testing.T) {
	c, _ := twoSlotCluster(t, &pb.CheckpointPolicy{Replicas: 2})
	ctx := context.Background()
	c.restart(c.nodes[0], true) // disk of slot 0's node lost
	if keys, _ := c.nodes[0].store.ManifestKeys(""); len(keys) != 0 {
		t.Fatalf("wiped store still has %v", keys)
	}
	blobs, rec, err := c.nodes[0].mgr.Restore(ctx, RestoreRequest{Job: testJob, Slot: 0, NumPservers: 2})
	if err != nil {
		t.Fatal(err)
	}
	if v := checkWhole(t, blobs, vshardsOf(0, 2, testNV), testSize); v != 1 {
		t.Fatalf("version %d", v)
	}
	ptr := mustPointer(t, c.meta, testJob, 0)
	if rec.GetSource() == "n0" || !contains(ptr.GetReplicas(), rec.GetSource()) || rec.GetMd5() != ptr.GetMd5() {
		t.Fatalf("record %v, pointer %v", rec, ptr)
	}
}

func contains(xs []string, x string) bool {
	for _, y := range xs {
		if y == x {
			return true
		}
	}
	return false
}

func TestRepartition(t *testing.T) {
	c, _ := twoSlotCluster(t, &pb.CheckpointPolicy{Replicas: 2})
	ctx := context.Background()
	for _, p := range []int32{3, 1, 2, 5} {
		for s := int32(0); s < p; s++ {
			want := vshardsOf(s, p, testNV)
			// Once with the vshards derived, once named explicitly.
			for _, req := range []RestoreRequest{
				{Job: testJob, Slot: s, NumPservers: p},
				{Job: testJob, Slot: s, NumPservers: p, VShards: want},
			} {
				blobs, rec, err := c.nodes[int(s)%3].mgr.Restore(ctx, req)
				if err != nil {
					t.Fatal(err)
				}
				if v := checkWhole(t, blobs, want, testSize); v != 1 {
					t.Fatalf("P=%d slot %d: version %d (%v)", p, s, v, rec)
				}
			}
		}
	}
}

func TestKeepMax(t *testing.T) {
	for _, tc := range []struct {
		keep     int32
		versions int // manifests per node after 5 checkpoints
	}{{0, 5}, {1, 1}, {3, 3}} {
		t.Run(fmtName("keep", tc.keep, ""), func(t *testing.T) {
			c := mustCluster(t, 2)
			c.claim(testJob, 0, c.nodes[0], 1)
			w := c.nodes[0].mgr.Writer(testJob, 0)
			pol := &pb.CheckpointPolicy{KeepMax: tc.keep, Replicas: 2}
			var ptr *pb.CheckpointPointer
			for v := int64(1); v <= 5; v++ {
				ptr = mustCheckpoint(t, w, WriteRequest{Job: testJob, Slot: 0, NumPservers: 1, Version: v, Incarnation: 1,
					Blobs: slotBlobs(v, 0, 1, testNV, testSize), Policy: pol})
			}
			wantKept := map[int32][]int64{0: {4, 3, 2, 1}, 1: nil, 3: {4, 3}}[tc.keep]
			if !equalInts(ptr.GetKeptVersions(), wantKept) || ptr.GetVersion() != 5 {
				t.Fatalf("pointer version %d kept %v, want 5 %v", ptr.GetVersion(), ptr.GetKeptVersions(), wantKept)
			}
			for _, n := range c.nodes {
				keys, _ := n.store.ManifestKeys(testJob)
				blobs, _ := n.store.BlobMD5s()
				t.Logf("%s: %d manifests, %d blobs", n.id, len(keys), len(blobs))
				if len(keys) != tc.versions || len(blobs) != tc.versions*testNV {
					t.Fatalf("%s: %d manifests and %d blobs, want %d and %d", n.id, len(keys), len(blobs), tc.versions, tc.versions*testNV)
				}
			}
			// Every kept version restores.
			for _, v := range append([]int64{5}, wantKept...) {
				blobs, err := c.nodes[1].mgr.ReadVersion(context.Background(), testJob, v)
				if err != nil {
					t.Fatalf("version %d: %v", v, err)
				}
				if got := checkWhole(t, blobs, vshardsOf(0, 1, testNV), testSize); got != v {
					t.Fatalf("read version %d got %d", v, got)
				}
			}
		})
	}
}

func equalInts(a, b []int64) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func TestFencing(t *testing.T) {
	c := mustCluster(t, 2)
	ctx := context.Background()
	c.claim(testJob, 0, c.nodes[0], 1)
	w := c.nodes[0].mgr.Writer(testJob, 0)
	pol := &pb.CheckpointPolicy{Replicas: 2}
	before := mustCheckpoint(t, w, WriteRequest{Job: testJob, Slot: 0, NumPservers: 1, Version: 1, Incarnation: 1,
		Blobs: slotBlobs(1, 0, 1, testNV, testSize), Policy: pol})

	// The slot is re-claimed by n1 (incarnation 2): the zombie n0 is fenced.
	c.claim(testJob, 0, c.nodes[1], 2)
	_, err := w.Checkpoint(ctx, WriteRequest{Job: testJob, Slot: 0, NumPservers: 1, Version: 2, Incarnation: 1,
		Blobs: slotBlobs(2, 0, 1, testNV, testSize), Policy: pol})
	if !errors.Is(err, ErrFenced) {
		t.Fatalf("stale incarnation: want ErrFenced, got %v", err)
	}
	if after := mustPointer(t, c.meta, testJob, 0); after.GetVersion() != 1 || after.GetMd5() != before.GetMd5() {
		t.Fatalf("pointer moved: %v", after)
	}

	// Re-claimed while the zombie is between reading the claim and the
	// commit: the Txn compare catches it.
	w2 := c.nodes[1].mgr.Writer(testJob, 0)
	w2.hook = func(s string) error {
		if s == StageBeforePointer {
			c.claim(testJob, 0, c.nodes[0], 3)
		}
		return nil
	}
	_, err = w2.Checkpoint(ctx, WriteRequest{Job: testJob, Slot: 0, NumPservers: 1, Version: 2, Incarnation: 2,
		Blobs: slotBlobs(2, 0, 1, testNV, testSize), Policy: pol})
	if !errors.Is(err, ErrFenced) {
		t.Fatalf("re-claimed before commit: want ErrFenced, got %v", err)
	}
	if after := mustPointer(t, c.meta, testJob, 0); after.GetVersion() != 1 || after.GetMd5() != before.GetMd5() {
		t.Fatalf("pointer moved: %v", after)
	}
	// Unclaimed slot.
	_, err = c.nodes[0].mgr.Writer(testJob, 1).Checkpoint(ctx, WriteRequest{Job: testJob, Slot: 1, NumPservers: 2, Version: 2, Incarnation: 3,
		Blobs: slotBlobs(2, 1, 2, testNV, testSize), Policy: pol})
	if !errors.Is(err, ErrFenced) {
		t.Fatalf("unclaimed slot: want ErrFenced, got %v", err)
	}
}

func TestGarbageManifestFallsBack(t *testing.T) {
	for _, tc := range []struct {
		name string
		mut  func([]byte) []byte
	}{
		{"truncated", func(b []byte) []byte { return b[:len(b)/2] }},
		{"garbage", func(b []byte) []byte { return []byte("\x00\xffnot a manifest") }},
		{"empty", func(b []byte) []byte { return nil }},
		{"flipped-digit", func(b []byte) []byte {
			b = append([]byte(nil), b...)
			i := strings.Index(string(b), `"bytes":`) + len(`"bytes":`)
			b[i] = '9'
			return b
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
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
			for _, n := range c.nodes { // every copy
				raw, err := n.store.GetManifest(key)
				if err != nil {
					t.Fatal(err)
				}
				if err := n.store.setRaw(key, tc.mut(raw)); err != nil {
					t.Fatal(err)
				}
			}
			blobs, rec, err := c.nodes[0].mgr.Restore(ctx, RestoreRequest{Job: testJob, Slot: 0, NumPservers: 1})
			if err != nil {
				t.Fatal(err)
			}
			if v := checkWhole(t, blobs, vshardsOf(0, 1, testNV), testSize); v != 1 {
				t.Fatalf("version %d", v)
			}
			if !strings.HasPrefix(rec.GetReason(), "fallback:") || !strings.Contains(rec.GetReason(), key) {
				t.Fatalf("reason %q", rec.GetReason())
			}
			t.Log(rec.GetReason())
		})
	}
}

func TestAllVersionsBadGivesInitializer(t *testing.T) {
	c := mustCluster(t, 1)
	ctx := context.Background()
	n := c.nodes[0]
	// No checkpoint at all.
	blobs, rec, err := n.mgr.Restore(ctx, RestoreRequest{Job: testJob, Slot: 0, NumPservers: 1})
	if err != nil || blobs != nil || !strings.HasPrefix(rec.GetReason(), "initializer:") {
		t.Fatalf("no checkpoint: %v %v %v", blobs != nil, rec, err)
	}
	c.claim(testJob, 0, n, 1)
	mustCheckpoint(t, n.mgr.Writer(testJob, 0), WriteRequest{Job: testJob, Slot: 0, NumPservers: 1, Version: 1, Incarnation: 1,
		Blobs: slotBlobs(1, 0, 1, testNV, testSize), Policy: &pb.CheckpointPolicy{Replicas: 1}})
	if err := n.store.setRaw(ManifestKey(testJob, 1, 0), []byte("{")); err != nil {
		t.Fatal(err)
	}
	// A garbage pointer for another slot is ignored, not fatal.
	c.meta.put(schema.CheckpointKey(testJob, 7), []byte("}}garbage"))
	blobs, rec, err = n.mgr.Restore(ctx, RestoreRequest{Job: testJob, Slot: 0, NumPservers: 1})
	if err != nil || blobs != nil || !strings.HasPrefix(rec.GetReason(), "initializer:") {
		t.Fatalf("all bad: %v %v %v", blobs != nil, rec, err)
	}
	t.Log(rec.GetReason())
}

func TestStorePutGetVerify(t *testing.T) {
	st, err := Open(t.TempDir(), testLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	data := fakeBlob(1, 1, 1000)
	if err := st.PutBlob(MD5Hex([]byte("other")), data); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("wrong md5 accepted: %v", err)
	}
	h := MD5Hex(data)
	if err := st.PutBlob(h, data); err != nil {
		t.Fatal(err)
	}
	if got, err := st.GetBlob(h); err != nil || string(got) != string(data) {
		t.Fatalf("GetBlob: %v", err)
	}
	if _, err := st.GetBlob(MD5Hex([]byte("x"))); !errors.Is(err, ErrNotFound) {
		t.Fatalf("missing blob: %v", err)
	}
	// A manifest whose blobs are missing is refused.
	m := &Manifest{Job: "j", Version: 1, Slot: 0, NumPservers: 1, VShards: []VShardRef{{ID: 0, MD5: MD5Hex([]byte("x")), Bytes: 1}}, Bytes: 1}
	if _, _, err := st.PutManifest(m); !errors.Is(err, ErrNotFound) {
		t.Fatalf("manifest with a missing blob: %v", err)
	}
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}
	if err := st.Close(); err != nil {
		t.Fatal("second Close:", err)
	}
	if _, err := st.GetBlob(h); !errors.Is(err, ErrClosed) {
		t.Fatalf("closed: %v", err)
	}
}

func TestReplicateFetchVerifyRPC(t *testing.T) {
	c := mustCluster(t, 2)
	ctx := context.Background()
	blobs := map[int32][]byte{0: fakeBlob(1, 0, 3*ChunkSize+5), 2: fakeBlob(1, 2, 20), 4: {}}
	refs, total, err := c.nodes[0].store.putBlobs(blobs)
	if err != nil {
		t.Fatal(err)
	}
	m := &Manifest{UUID: "u", Job: testJob, Version: 1, Slot: 0, NumPservers: 2, VShards: refs, Bytes: total}
	if err := c.cli.Replicate(ctx, c.nodes[1].addr, m, blobs); err != nil {
		t.Fatal(err)
	}
	got, raw, gotBlobs, err := c.cli.Fetch(ctx, c.nodes[1].addr, m.Key())
	if err != nil {
		t.Fatal(err)
	}
	want, wantMD5, _ := EncodeManifest(m)
	if string(raw) != string(want) || MD5Hex(raw) != wantMD5 || got.Bytes != total || len(gotBlobs) != 3 {
		t.Fatalf("fetched manifest differs")
	}
	for id, b := range blobs {
		if string(gotBlobs[id]) != string(b) {
			t.Fatalf("vshard %d differs", id)
		}
	}
	flipByte(t, c.nodes[1].store, refs[0].MD5, 5)
	r, err := c.cli.VerifyBlob(ctx, c.nodes[1].addr, refs[0].MD5)
	if err != nil || !r.GetPresent() || r.GetOk() || r.GetActualMd5() == refs[0].MD5 {
		t.Fatalf("VerifyBlob of a flipped blob: %v %v", r, err)
	}
	if _, err := c.cli.GetBlob(ctx, c.nodes[1].addr, refs[0].MD5, refs[0].Bytes); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("GetBlob of a flipped blob: %v", err)
	}
	if _, err := c.cli.GetManifest(ctx, c.nodes[1].addr, "manifest/none/1/0"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("missing manifest: %v", err)
	}
	// A blob whose bytes do not match its md5 is refused by the server.
	if err := c.cli.PutBlob(ctx, c.nodes[1].addr, MD5Hex([]byte("a")), []byte("b")); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("bad PutBlob: %v", err)
	}
}

func TestIngestPath(t *testing.T) {
	c := mustCluster(t, 2)
	ctx := context.Background()
	for _, n := range c.nodes {
		n.store.ingestThreshold = 0 // every checkpoint is ingested as an sstable
	}
	c.claim(testJob, 0, c.nodes[0], 1)
	w := c.nodes[0].mgr.Writer(testJob, 0)
	pol := &pb.CheckpointPolicy{KeepMax: 2, Replicas: 2}
	for v := int64(1); v <= 4; v++ {
		mustCheckpoint(t, w, WriteRequest{Job: testJob, Slot: 0, NumPservers: 1, Version: v, Incarnation: 1,
			Blobs: slotBlobs(v, 0, 1, testNV, testSize), Policy: pol})
	}
	// Version 5 has the same bytes as 4: content addressing stores nothing new.
	mustCheckpoint(t, w, WriteRequest{Job: testJob, Slot: 0, NumPservers: 1, Version: 5, Incarnation: 1,
		Blobs: slotBlobs(4, 0, 1, testNV, testSize), Policy: pol})
	for _, n := range c.nodes {
		keys, _ := n.store.ManifestKeys(testJob)
		blobs, _ := n.store.BlobMD5s()
		if len(keys) != 2 || len(blobs) != testNV {
			t.Fatalf("%s: %d manifests %d blobs, want 2 and %d", n.id, len(keys), len(blobs), testNV)
		}
	}
	blobs, rec, err := c.nodes[0].mgr.Restore(ctx, RestoreRequest{Job: testJob, Slot: 0, NumPservers: 1})
	if err != nil || rec.GetVersion() != 5 {
		t.Fatalf("restore: %v %v", rec, err)
	}
	checkWhole(t, blobs, vshardsOf(0, 1, testNV), testSize)
	// Reopened from disk, the ingested blobs are still there and verify.
	c.restart(c.nodes[0], false)
	if mm, err := c.nodes[0].mgr.Verify(ctx, testJob, 5); err != nil || len(mm) != 0 {
		t.Fatalf("verify after reopen: %+v %v", mm, err)
	}
}

func TestRestoreReadsOnlyNeededOldSlots(t *testing.T) {
	// Slot 1's manifest is gone everywhere: restoring slot 0 with the same
	// layout (or with 4 slots: gcd 2) does not need it and must not fall back.
	c, _ := twoSlotCluster(t, &pb.CheckpointPolicy{Replicas: 2})
	ctx := context.Background()
	for _, n := range c.nodes {
		n.store.setRaw(ManifestKey(testJob, 1, 1), []byte("gone"))
	}
	for _, p := range []int32{2, 4} {
		blobs, rec, err := c.nodes[0].mgr.Restore(ctx, RestoreRequest{Job: testJob, Slot: 0, NumPservers: p})
		if err != nil || rec.GetReason() != "newest" {
			t.Fatalf("P=%d: %v %v", p, rec, err)
		}
		checkWhole(t, blobs, vshardsOf(0, p, testNV), testSize)
	}
	// With 3 slots every old slot contributes: version 1 is unusable.
	blobs, rec, _ := c.nodes[0].mgr.Restore(ctx, RestoreRequest{Job: testJob, Slot: 0, NumPservers: 3})
	if blobs != nil || !strings.HasPrefix(rec.GetReason(), "initializer:") {
		t.Fatalf("P=3: %v", rec)
	}
}

func TestDeleteSparesNewerInFlightVersions(t *testing.T) {
	st, err := Open(t.TempDir(), testLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	for v := int64(1); v <= 4; v++ {
		blobs := slotBlobs(v, 0, 1, 2, 64)
		refs, total, err := st.putBlobs(blobs)
		if err != nil {
			t.Fatal(err)
		}
		if _, _, err := st.PutManifest(&Manifest{Job: testJob, Version: v, Slot: 0, NumPservers: 1, VShards: refs, Bytes: total}); err != nil {
			t.Fatal(err)
		}
	}
	deleted, err := st.DeleteVersions(testJob, 0, []int64{2})
	if err != nil || !equalInts(deleted, []int64{1}) {
		t.Fatalf("deleted %v %v, want [1] (3 and 4 may be in flight)", deleted, err)
	}
	if keys, _ := st.ManifestKeys(testJob); len(keys) != 3 {
		t.Fatalf("manifests left: %v", keys)
	}
	if blobs, _ := st.BlobMD5s(); len(blobs) != 6 {
		t.Fatalf("blobs left: %d, want 6", len(blobs))
	}
}

func TestConcurrentSlotsShareAStore(t *testing.T) {
	// Four slots on one node checkpoint concurrently (keep_max 1: every
	// checkpoint garbage-collects) while restores read; at the end every
	// slot restores its newest version whole.
	c := mustCluster(t, 2)
	ctx := context.Background()
	const p = 4
	pol := &pb.CheckpointPolicy{KeepMax: 1, Replicas: 2}
	for s := int32(0); s < p; s++ {
		c.claim(testJob, s, c.nodes[0], 1)
	}
	errc := make(chan error, 2*p)
	for s := int32(0); s < p; s++ {
		go func() {
			w := c.nodes[0].mgr.Writer(testJob, s)
			for v := int64(1); v <= 4; v++ {
				if _, err := w.Checkpoint(ctx, WriteRequest{Job: testJob, Slot: s, NumPservers: p, Version: v, Incarnation: 1,
					Blobs: slotBlobs(v, s, p, 16, testSize), Policy: pol}); err != nil {
					errc <- err
					return
				}
			}
			errc <- nil
		}()
		go func() {
			for i := 0; i < 4; i++ {
				// Any outcome is fine mid-flight except an error or a torn result.
				blobs, _, err := c.nodes[1].mgr.Restore(ctx, RestoreRequest{Job: testJob, Slot: s, NumPservers: p})
				if err != nil {
					errc <- err
					return
				}
				if blobs != nil {
					if _, err := wholeVersion(blobs, vshardsOf(s, p, 16), testSize); err != nil {
						errc <- err
						return
					}
				}
			}
			errc <- nil
		}()
	}
	for i := 0; i < 2*p; i++ {
		if err := <-errc; err != nil {
			t.Fatal(err)
		}
	}
	for s := int32(0); s < p; s++ {
		blobs, rec, err := c.nodes[0].mgr.Restore(ctx, RestoreRequest{Job: testJob, Slot: s, NumPservers: p})
		if err != nil || blobs == nil {
			t.Fatalf("slot %d: %v %v", s, rec, err)
		}
		if v := checkWhole(t, blobs, vshardsOf(s, p, 16), testSize); v != 4 {
			t.Fatalf("slot %d restored %d", s, v)
		}
	}
}

func TestKeptManifestCorruptionCaughtBySum(t *testing.T) {
	// Version 1's manifest is edited at rest so that it still decodes and
	// validates (vshard 3 now names vshard 5's blob). No pointer md5 anchors
	// a kept version; the stored manifest sum must catch it.
	c := mustCluster(t, 1)
	ctx := context.Background()
	n := c.nodes[0]
	c.claim(testJob, 0, n, 1)
	w := n.mgr.Writer(testJob, 0)
	pol := &pb.CheckpointPolicy{KeepMax: 3, Replicas: 1}
	for v := int64(1); v <= 2; v++ {
		mustCheckpoint(t, w, WriteRequest{Job: testJob, Slot: 0, NumPservers: 1, Version: v, Incarnation: 1,
			Blobs: slotBlobs(v, 0, 1, testNV, testSize), Policy: pol})
	}
	flipByte(t, n.store, MD5Hex(fakeBlob(2, 1, testSize)), 99) // version 2 unusable
	key := ManifestKey(testJob, 1, 0)
	raw, err := n.store.GetManifest(key)
	if err != nil {
		t.Fatal(err)
	}
	edited := strings.Replace(string(raw), MD5Hex(fakeBlob(1, 3, testSize)), MD5Hex(fakeBlob(1, 5, testSize)), 1)
	if _, err := DecodeManifest([]byte(edited)); err != nil {
		t.Fatalf("the edit must stay structurally valid: %v", err)
	}
	if err := n.store.setRaw(key, []byte(edited)); err != nil {
		t.Fatal(err)
	}
	if _, err := n.store.GetManifest(key); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("GetManifest of an edited manifest: %v", err)
	}
	blobs, rec, err := n.mgr.Restore(ctx, RestoreRequest{Job: testJob, Slot: 0, NumPservers: 1})
	if err != nil || blobs != nil || !strings.HasPrefix(rec.GetReason(), "initializer:") {
		t.Fatalf("want the initializer, got %v %v (blobs %v)", rec, err, blobs != nil)
	}
	t.Log(rec.GetReason())
}

func TestPrune(t *testing.T) {
	c := mustCluster(t, 3)
	ctx := context.Background()
	c.claim(testJob, 0, c.nodes[0], 1)
	w := c.nodes[0].mgr.Writer(testJob, 0)
	pol := &pb.CheckpointPolicy{KeepMax: 0, Replicas: 2}
	req := func(v int64) WriteRequest {
		return WriteRequest{Job: testJob, Slot: 0, NumPservers: 1, Version: v, Incarnation: 1,
			Blobs: slotBlobs(v, 0, 1, testNV, testSize), Policy: pol}
	}
	mustCheckpoint(t, w, req(1))
	w.hook = func(s string) error {
		if s == StageReplicated {
			return errCrash // version 2: written and replicated, never pointed to
		}
		return nil
	}
	if _, err := w.Checkpoint(ctx, req(2)); !errors.Is(err, errCrash) {
		t.Fatal(err)
	}
	w.hook = nil
	mustCheckpoint(t, w, req(3))
	ptr := mustPointer(t, c.meta, testJob, 0)
	// n2 also holds an old copy of a version its slot no longer names ...
	var holder, other *testNode
	for _, n := range c.nodes {
		if !contains(ptr.GetReplicas(), n.id) {
			other = n
		} else if n != c.nodes[0] {
			holder = n
		}
	}
	m, _, blobs, err := c.cli.Fetch(ctx, holder.addr, ManifestKey(testJob, 2, 0))
	if err != nil {
		t.Fatal(err)
	}
	if err := c.cli.Replicate(ctx, other.addr, m, blobs); err != nil {
		t.Fatal(err)
	}
	// ... and an old manifest of a job that has no pointer, plus a fresh one.
	for _, tc := range []struct {
		job string
		age time.Duration
	}{{"gone", 2 * PruneOrphanAge}, {"fresh", 0}} {
		bl := slotBlobs(9, 0, 1, 2, 64)
		refs, total, err := other.store.putBlobs(bl)
		if err != nil {
			t.Fatal(err)
		}
		if _, _, err := other.store.PutManifest(&Manifest{Job: tc.job, Version: 9, Slot: 0, NumPservers: 1, VShards: refs, Bytes: total,
			TimestampUnixNano: time.Now().Add(-tc.age).UnixNano()}); err != nil {
			t.Fatal(err)
		}
	}
	for _, n := range c.nodes {
		if _, err := n.mgr.Prune(ctx); err != nil {
			t.Fatal(err)
		}
	}
	for _, n := range c.nodes {
		keys, _ := n.store.ManifestKeys("")
		for _, k := range keys {
			job, v, _, _ := parseManifestKey(k)
			if (job == testJob && v == 2) || job == "gone" {
				t.Fatalf("%s still holds %s", n.id, k)
			}
		}
		t.Logf("%s: %v", n.id, keys)
	}
	if keys, _ := other.store.ManifestKeys("fresh"); len(keys) != 1 {
		t.Fatalf("fresh pointerless manifest pruned: %v", keys)
	}
	for _, v := range []int64{1, 3} {
		got, err := c.nodes[0].mgr.ReadVersion(ctx, testJob, v)
		if err != nil {
			t.Fatalf("version %d after prune: %v", v, err)
		}
		checkWhole(t, got, vshardsOf(0, 1, testNV), testSize)
	}
}

func TestRestoreAndCheckpointErrors(t *testing.T) {
	c, _ := twoSlotCluster(t, &pb.CheckpointPolicy{Replicas: 2})
	ctx := context.Background()
	mgr := c.nodes[0].mgr
	if _, _, err := mgr.Restore(ctx, RestoreRequest{Job: "a/b", Slot: 0, NumPservers: 1}); !errors.Is(err, ErrInvalid) {
		t.Fatalf("bad job: %v", err)
	}
	if _, _, err := mgr.Restore(ctx, RestoreRequest{Job: testJob, Slot: 3, NumPservers: 2}); !errors.Is(err, ErrInvalid) {
		t.Fatalf("bad slot: %v", err)
	}
	down := errors.New("no leader")
	c.meta.Fail("Range", down)
	if _, rec, err := mgr.Restore(ctx, RestoreRequest{Job: testJob, Slot: 0, NumPservers: 2}); !errors.Is(err, down) || rec != nil {
		t.Fatalf("meta down: %v %v", rec, err)
	}
	c.meta.Fail("Range", nil)
	// A Txn failure leaves the pointer where it was.
	c.meta.Fail("Txn", down)
	_, err := c.nodes[0].mgr.Writer(testJob, 0).Checkpoint(ctx, WriteRequest{Job: testJob, Slot: 0, NumPservers: 2, Version: 5,
		Incarnation: 1, Blobs: slotBlobs(5, 0, 2, testNV, testSize), Policy: &pb.CheckpointPolicy{Replicas: 2}})
	if !errors.Is(err, down) {
		t.Fatalf("txn down: %v", err)
	}
	c.meta.Fail("Txn", nil)
	if p := mustPointer(t, c.meta, testJob, 0); p.GetVersion() != 1 {
		t.Fatalf("pointer moved to %d", p.GetVersion())
	}
	// A vshard that is not the slot's, a stale version.
	w := c.nodes[0].mgr.Writer(testJob, 0)
	if _, err := w.Checkpoint(ctx, WriteRequest{Job: testJob, Slot: 0, NumPservers: 2, Version: 6, Incarnation: 1,
		Blobs: map[int32][]byte{1: {1}}}); !errors.Is(err, ErrInvalid) {
		t.Fatalf("foreign vshard: %v", err)
	}
	if _, err := w.Checkpoint(ctx, WriteRequest{Job: testJob, Slot: 0, NumPservers: 2, Version: 1, Incarnation: 1,
		Blobs: slotBlobs(1, 0, 2, testNV, testSize)}); !errors.Is(err, ErrStaleVersion) {
		t.Fatalf("stale version: %v", err)
	}
}

func TestDeadPeerIsSkipped(t *testing.T) {
	// A replica address that accepts nothing: replication moves on to the
	// next peer, restore to the next source.
	c := mustCluster(t, 2)
	ctx := context.Background()
	c.cli.ProbeTimeout = 500 * time.Millisecond
	dead := Peer{ID: "dead", Addr: "127.0.0.1:1", Host: "hx"}
	mgr, err := New(Config{NodeID: "n0", Host: "h0", Store: c.nodes[0].store, Meta: c.meta, Client: c.cli, Logger: testLogger(t),
		Peers: StaticPeers{dead, {ID: "n1", Addr: c.nodes[1].addr, Host: "h1"}}})
	if err != nil {
		t.Fatal(err)
	}
	c.claim(testJob, 0, c.nodes[0], 1)
	p, err := mgr.Writer(testJob, 0).Checkpoint(ctx, WriteRequest{Job: testJob, Slot: 0, NumPservers: 1, Version: 1, Incarnation: 1,
		Blobs: slotBlobs(1, 0, 1, testNV, testSize), Policy: &pb.CheckpointPolicy{Replicas: 2}})
	if err != nil || !equalStrings(p.GetReplicas(), []string{"n0", "n1"}) {
		t.Fatalf("pointer %v %v", p, err)
	}
	c.restart(c.nodes[0], true)
	mgr2, _ := New(Config{NodeID: "n0", Store: c.nodes[0].store, Meta: c.meta, Client: c.cli, Logger: testLogger(t),
		Peers: StaticPeers{dead, {ID: "n1", Addr: c.nodes[1].addr}}})
	blobs, rec, err := mgr2.Restore(ctx, RestoreRequest{Job: testJob, Slot: 0, NumPservers: 1})
	if err != nil || rec.GetSource() != "n1" {
		t.Fatalf("restore: %v %v", rec, err)
	}
	checkWhole(t, blobs, vshardsOf(0, 1, testNV), testSize)
}

func equalStrings(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}
