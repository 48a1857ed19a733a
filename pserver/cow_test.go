package pserver

import (
	"context"
	"sync"
	"testing"

	pb "github.com/raftps/raftps/api/raftpspb"
	"github.com/raftps/raftps/pserver/vshard"
	"github.com/raftps/raftps/pserver/wire"
)

// cowSlot is a sync Adam slot of 3 dense blocks of 8 and an embedding, with
// trainer "t".
func cowSlot(t *testing.T) *Slot {
	t.Helper()
	spec := &pb.JobSpec{Name: "cow", NumPservers: 1, NumVirtualShards: 4, DenseBlockSize: 8, Mode: pb.UpdateMode_UPDATE_MODE_SYNC,
		Optimizer: &pb.OptimizerSpec{Name: "adam", LearningRate: 0.1},
		Params: []*pb.ParamSpec{{Name: "w", Shape: []int64{24}, Init: pb.Initializer_INIT_ZEROS},
			{Name: "emb", Shape: []int64{100, 4}, Embedding: true, Init: pb.Initializer_INIT_ZEROS}}}
	s, err := NewSlot(spec, 0, 1)
	if err != nil {
		t.Fatal(err)
	}
	s.SetTrainers([]string{"t"})
	return s
}

// cowPush pushes gradient g to every dense block and to embedding row 7.
func cowPush(t *testing.T, s *Slot, g float32) {
	t.Helper()
	var grads []*pb.Tensor
	for b := int64(0); b < 3; b++ {
		grads = append(grads, &pb.Tensor{Name: "w", Block: b, Data: wire.Float32Bytes([]float32{g, g, g, g, g, g, g, g})})
	}
	grads = append(grads, &pb.Tensor{Name: "emb", Rows: []int64{7}, Data: wire.Float32Bytes([]float32{g, g, g, g})})
	if _, err := s.Push(context.Background(), &pb.PushRequest{Job: "cow", Trainer: "t", Version: s.Version(), Step: s.Step(), Grads: grads, Examples: 1}); err != nil {
		t.Fatal(err)
	}
}

// snapValues flattens a snapshot's values and state (sorted entries).
func snapValues(snap *SlotSnapshot) []float32 {
	var out []float32
	for v := int32(0); v < 4; v++ {
		for _, e := range snap.VShards[v].Entries {
			out = append(out, e.Values...)
			for _, st := range e.State {
				out = append(out, st...)
			}
		}
	}
	return out
}

// TestStepSnapshotFreezesWithoutCopy: a step snapshot shares the slot's
// buffers at the freeze (nothing is copied under the lock); an update that
// comes before the copier writes a copy, never the frozen buffers, so the
// snapshot keeps the state of its step while the slot moves on; the copier
// then leaves the snapshot its own buffers. Before copy-on-write the hook
// copied under the lock and the buffers were never shared.
func TestStepSnapshotFreezesWithoutCopy(t *testing.T) {
	s := cowSlot(t)
	cowPush(t, s, 1)
	// The hook freezes (a step snapshot adds a freeze, not a copy).
	hooked := make(chan *SlotSnapshot, 1)
	s.SnapshotEvery(2, func(snap *SlotSnapshot) { hooked <- snap })
	f0 := s.freezes.Load()
	cowPush(t, s, 1)
	hs := <-hooked
	if s.freezes.Load() != f0+1 {
		t.Fatal("the step snapshot did not freeze")
	}
	s.SnapshotEvery(0, nil)
	want := snapValues(hs)
	if got := snapValues(s.Snapshot()); !equalFloats(got, want) {
		t.Fatal("hook snapshot differs from Snapshot at the same step")
	}

	snap := s.newSnapshot()
	s.mu.Lock()
	h := s.freezeLocked(snap)
	// No copy under the lock: the snapshot refers to the slot's buffers.
	for _, vs := range snap.VShards {
		for _, es := range vs.Entries {
			e := s.dense[key{es.Param, es.Index}]
			if e == nil {
				e = s.rows[key{es.Param, es.Index}]
			}
			if &e.values[0] != &es.Values[0] || e.hold != h {
				t.Errorf("entry %d/%d: not frozen in place", es.Param, es.Index)
			}
		}
	}
	s.mu.Unlock()
	s.finishSnapshot(snap)

	cowPush(t, s, -3) // before the copier: copies what it writes
	if got := snapValues(snap); !equalFloats(got, want) {
		t.Fatalf("frozen snapshot changed under an update:\n got %v\nwant %v", got, want)
	}
	s.copyAway(h)
	if s.hold != nil {
		t.Fatal("hold not ended after copyAway")
	}
	cowPush(t, s, 2)
	if got := snapValues(snap); !equalFloats(got, want) {
		t.Fatalf("snapshot changed after copyAway:\n got %v\nwant %v", got, want)
	}
	if after := snapValues(s.Snapshot()); equalFloats(after, want) {
		t.Fatal("slot did not move on")
	}
}

// TestSnapshotReleaseReusesBuffers: a released hook snapshot's buffers are
// the next copy's (no allocation), and what the slot holds after many
// hook snapshots (released or not) with pushes racing each copier equals
// a slot that never took one.
func TestSnapshotReleaseReusesBuffers(t *testing.T) {
	s, ref := cowSlot(t), cowSlot(t)
	snaps := make(chan *SlotSnapshot, 1)
	s.SnapshotEvery(2, func(snap *SlotSnapshot) { snaps <- snap })
	var mu sync.Mutex
	var frozen [][]float32
	for i := 0; i < 10; i++ {
		g := float32(i%3) - 1
		cowPush(t, s, g)
		cowPush(t, ref, g)
		if s.Step()%2 == 0 {
			snap := <-snaps
			if want := snapValues(ref.Snapshot()); !equalFloats(snapValues(snap), want) {
				t.Fatalf("step %d snapshot differs from the reference slot", snap.Step)
			}
			mu.Lock()
			frozen = append(frozen, firstEntry(snap).Values)
			mu.Unlock()
			if i%4 == 1 {
				snap.Release()
			}
		}
	}
	if got, want := snapValues(s.Snapshot()), snapValues(ref.Snapshot()); !equalFloats(got, want) {
		t.Fatalf("slot after snapshots differs from the reference:\n got %v\nwant %v", got, want)
	}
	// Snapshot 0 was released: snapshot 1 was copied into its buffers, so
	// the slot's buffer after snapshot 1 is snapshot 0's.
	if len(frozen) < 3 || &frozen[0][0] == &frozen[1][0] {
		t.Fatalf("%d snapshots, first two share buffers", len(frozen))
	}
	if &frozen[2][0] != &frozen[0][0] {
		t.Error("snapshot 2 does not reuse the buffers released by snapshot 0")
	}
}

func firstEntry(snap *SlotSnapshot) vshard.Entry {
	for v := int32(0); ; v++ {
		if es := snap.VShards[v].Entries; len(es) > 0 {
			return es[0]
		}
	}
}

func equalFloats(a, b []float32) bool {
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
