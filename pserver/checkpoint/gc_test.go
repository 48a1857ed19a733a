package checkpoint

import (
	"slices"
	"testing"
)

// TestGCBlobsOnlyCandidates: the writer's garbage collection (GCBlobs with
// the blobs of the manifests it deleted) deletes a candidate only if no
// manifest references it and it is not pinned, and never touches a blob
// that is not a candidate (an orphan stays for GC, Prune's full scan).
func TestGCBlobsOnlyCandidates(t *testing.T) {
	st, err := Open(t.TempDir(), testLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	put := func(v int64, blobs map[int32][]byte) []VShardRef {
		t.Helper()
		refs, total, err := st.putBlobs(blobs)
		if err != nil {
			t.Fatal(err)
		}
		if _, _, err := st.PutManifest(&Manifest{Job: testJob, Version: v, Slot: 0, NumPservers: 1, VShards: refs, Bytes: total}); err != nil {
			t.Fatal(err)
		}
		return refs
	}
	old := put(1, slotBlobs(1, 0, 1, 2, 64))
	// Version 2 shares vshard 0's bytes with version 1 (content addressed:
	// one blob, two manifests) and has a new vshard 1.
	b2 := slotBlobs(2, 0, 1, 2, 64)
	b2[0] = slotBlobs(1, 0, 1, 2, 64)[0]
	cur := put(2, b2)
	if old[0].MD5 != cur[0].MD5 || old[1].MD5 == cur[1].MD5 {
		t.Fatalf("setup: refs %v and %v", old, cur)
	}
	// An orphan: a blob no manifest names, written long enough ago to be
	// unpinned.
	orphan := slotBlobs(9, 0, 1, 1, 64)
	orefs, _, err := st.putBlobs(orphan)
	if err != nil {
		t.Fatal(err)
	}
	st.unpin(orefs)

	deleted, named, err := st.deleteManifests(testJob, 0, []int64{2})
	if err != nil || !equalInts(deleted, []int64{1}) {
		t.Fatalf("deleteManifests: %v %v", deleted, err)
	}
	if len(named) != 2 || !slices.Contains(named, old[0].MD5) || !slices.Contains(named, old[1].MD5) {
		t.Fatalf("named %v, want the md5s of version 1 %v", named, old)
	}
	n, err := st.GCBlobs(named)
	if err != nil || n != 1 {
		t.Fatalf("GCBlobs deleted %d (%v), want 1: only version 1's own vshard 1", n, err)
	}
	has := func(h string) bool {
		present, _, _, err := st.VerifyBlob(h)
		if err != nil {
			t.Fatal(err)
		}
		return present
	}
	if has(old[1].MD5) {
		t.Fatalf("version 1's vshard 1 (%s) survived GCBlobs", old[1].MD5)
	}
	if !has(cur[0].MD5) || !has(cur[1].MD5) {
		t.Fatal("GCBlobs deleted a blob version 2 references")
	}
	if !has(orefs[0].MD5) {
		t.Fatal("GCBlobs deleted an orphan it was not given")
	}
	// A pinned candidate (a checkpoint in flight wrote it, no manifest yet)
	// stays.
	pinned := slotBlobs(7, 0, 1, 1, 64)
	prefs, _, err := st.putBlobs(pinned)
	if err != nil {
		t.Fatal(err)
	}
	if n, err := st.GCBlobs([]string{prefs[0].MD5}); err != nil || n != 0 || !has(prefs[0].MD5) {
		t.Fatalf("GCBlobs of a pinned blob: deleted %d (%v)", n, err)
	}
	// The full GC still finds the orphan.
	if n, err := st.GC(); err != nil || n != 1 || has(orefs[0].MD5) {
		t.Fatalf("GC deleted %d (%v), want the orphan", n, err)
	}
}
