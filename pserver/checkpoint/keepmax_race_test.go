package checkpoint

import (
	"context"
	"fmt"
	"sync"
	"testing"

	pb "github.com/raftps/raftps/api/raftpspb"
)

// completeVersions lists the versions every slot 0..p-1 of job names.
func completeVersions(tb testing.TB, meta Meta, job string, p int32) []int64 {
	tb.Helper()
	ptrs, _, err := Pointers(context.Background(), meta, job)
	if err != nil {
		tb.Fatal(err)
	}
	var out []int64
	for _, v := range candidateVersions(ptrs) {
		all := true
		for s := int32(0); s < p; s++ {
			all = all && holds(ptrs[s], v)
		}
		if all {
			out = append(out, v)
		}
	}
	return out
}

// TestKeepMaxRaceKeepsACompleteVersion is issue 12 item 3: with keep_max 1,
// slot 0 decides what to keep from slot 1's pointer as read, and slot 1
// commits in between. Before the fix slot 0 committed {v3, kept v1} on its
// stale read while slot 1 had moved to {v2} (dropping v1): no version was
// complete and a sync restore fell back to the initializer. The commit now
// compares the other slots' pointer revisions, so slot 0 re-decides on
// slot 1's committed pointer and keeps v2.
func TestKeepMaxRaceKeepsACompleteVersion(t *testing.T) {
	c := mustCluster(t, 1)
	nd := c.nodes[0]
	const job, p, nv, size = "race", 2, 4, 64
	pol := &pb.CheckpointPolicy{KeepMax: 1, Replicas: 1}
	c.claim(job, 0, nd, 1)
	c.claim(job, 1, nd, 1)
	w0, w1 := nd.mgr.Writer(job, 0), nd.mgr.Writer(job, 1)
	req := func(slot int32, v int64) WriteRequest {
		return WriteRequest{Job: job, Slot: slot, NumPservers: p, Version: v, Step: v, Incarnation: 1,
			Blobs: slotBlobs(v, slot, p, nv, size), Policy: pol}
	}
	mustCheckpoint(t, w0, req(0, 1))
	mustCheckpoint(t, w1, req(1, 1))
	mustCheckpoint(t, w0, req(0, 2)) // slot 0 {v2, kept v1}: v1 is complete
	// Slot 0 writes v3 (its writer skipped nothing; slot 1's lags): after it
	// has read slot 1's pointer ({v1}) and before it commits, slot 1
	// commits v2, seeing slot 0 at v2 and so keeping nothing but v2.
	var once sync.Once
	w0.hook = func(stage string) error {
		if stage == StageBeforePointer {
			once.Do(func() { mustCheckpoint(t, w1, req(1, 2)) })
		}
		return nil
	}
	mustCheckpoint(t, w0, req(0, 3))
	if got := completeVersions(t, c.meta, job, p); len(got) == 0 {
		t.Fatalf("no globally complete version left: slot 0 %v, slot 1 %v",
			mustPointer(t, c.meta, job, 0), mustPointer(t, c.meta, job, 1))
	}
	blobs, rec, err := nd.mgr.Restore(context.Background(), RestoreRequest{Job: job, Slot: 0, NumPservers: p})
	if err != nil || blobs == nil || rec.GetVersion() != 2 {
		t.Fatalf("restore: version %d reason %q err %v", rec.GetVersion(), rec.GetReason(), err)
	}
	checkWhole(t, blobs, vshardsOf(0, p, nv), size)
}

// TestKeepMaxConcurrentCommits: slots committing concurrently with
// keep_max 1, each version in a random order across slots, always leave a
// globally complete version after every round.
func TestKeepMaxConcurrentCommits(t *testing.T) {
	c := mustCluster(t, 1)
	nd := c.nodes[0]
	const job, p, nv, size = "conc", 3, 6, 32
	pol := &pb.CheckpointPolicy{KeepMax: 1, Replicas: 1}
	ws := make([]*Writer, p)
	for s := int32(0); s < p; s++ {
		c.claim(job, s, nd, 1)
		ws[s] = nd.mgr.Writer(job, s)
	}
	for round := int64(1); round <= 30; round++ {
		var wg sync.WaitGroup
		errs := make([]error, p)
		for s := int32(0); s < p; s++ {
			// Slot s skips some versions (a lagging writer), so slots do
			// not always hold the same ones.
			if round > 1 && (round+int64(s))%3 == 0 {
				continue
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				_, errs[s] = ws[s].Checkpoint(context.Background(), WriteRequest{Job: job, Slot: s, NumPservers: p,
					Version: round, Step: round, Incarnation: 1, Blobs: slotBlobs(round, s, p, nv, size), Policy: pol})
			}()
		}
		wg.Wait()
		for s, err := range errs {
			if err != nil {
				t.Fatalf("round %d slot %d: %v", round, s, err)
			}
		}
		if got := completeVersions(t, c.meta, job, p); len(got) == 0 {
			var desc string
			for s := int32(0); s < p; s++ {
				pp := mustPointer(t, c.meta, job, s)
				desc += fmt.Sprintf(" slot %d {v%d kept %v}", s, pp.GetVersion(), pp.GetKeptVersions())
			}
			t.Fatalf("round %d: no globally complete version:%s", round, desc)
		}
	}
}
