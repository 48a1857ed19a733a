package pserver

import (
	"context"
	"sync"
	"testing"
	"time"

	pb "github.com/raftps/raftps/api/raftpspb"
	"github.com/raftps/raftps/pserver/wire"
)

// TestSnapshotEveryExactStep: with two trainers pushing concurrently, the
// hook snapshots exactly steps 3 and 6, and the snapshot holds the state of
// that step (equal to a Snapshot taken when the slot stood at that step).
func TestSnapshotEveryExactStep(t *testing.T) {
	spec := &pb.JobSpec{Name: "hook", NumPservers: 1, NumVirtualShards: 4, DenseBlockSize: 8, Mode: pb.UpdateMode_UPDATE_MODE_SYNC,
		Optimizer: &pb.OptimizerSpec{Name: "sgd", LearningRate: 0.1},
		Params:    []*pb.ParamSpec{{Name: "w", Shape: []int64{20}, Init: pb.Initializer_INIT_ZEROS}}}
	s, err := NewSlot(spec, 0, 1)
	if err != nil {
		t.Fatal(err)
	}
	s.SetTrainers([]string{"a", "b"})
	var mu sync.Mutex
	got := map[int64]*SlotSnapshot{}
	s.SnapshotEvery(3, func(snap *SlotSnapshot) { mu.Lock(); got[snap.Step] = snap; mu.Unlock() })
	layout := s.Layout()
	p, _ := layout.Param("w")
	for step := int64(0); step < 7; step++ {
		var wg sync.WaitGroup
		for _, tr := range []string{"a", "b"} {
			wg.Add(1)
			go func(tr string) {
				defer wg.Done()
				var grads []*pb.Tensor
				for b := int64(0); b < p.Blocks; b++ {
					lo, hi := layout.BlockRange(p, b)
					g := make([]float32, hi-lo)
					for i := range g {
						g[i] = 1
					}
					grads = append(grads, &pb.Tensor{Name: "w", Block: b, Data: wire.Float32Bytes(g)})
				}
				if _, err := s.Push(context.Background(), &pb.PushRequest{Job: "hook", Trainer: tr, Version: s.Version(), Step: step, Grads: grads, Examples: 1}); err != nil {
					t.Error(err)
				}
			}(tr)
		}
		wg.Wait()
	}
	deadline := time.Now().Add(2 * time.Second)
	for time.Now().Before(deadline) {
		mu.Lock()
		n := len(got)
		mu.Unlock()
		if n == 2 {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(got) != 2 || got[3] == nil || got[6] == nil {
		t.Fatalf("snapshots at steps %v, want exactly 3 and 6", keys(got))
	}
	// SGD with lr 0.1 on a constant gradient 1: w = -0.1 * step.
	for _, st := range []int64{3, 6} {
		for _, vs := range got[st].VShards {
			for _, e := range vs.Entries {
				for _, x := range e.Values {
					if want := float32(-0.1 * float64(st)); x < want-1e-5 || x > want+1e-5 {
						t.Fatalf("step %d snapshot holds %v, want %v", st, x, want)
					}
				}
			}
		}
	}
}

func keys(m map[int64]*SlotSnapshot) []int64 {
	var out []int64
	for k := range m {
		out = append(out, k)
	}
	return out
}

// TestSnapshotOnPull (issue 33, checkpoint best): a pull that asks for a
// checkpoint (PullRequest.checkpoint, an eval's) hands the hook a snapshot
// of exactly the step and values it reads, once per step however often
// it is asked; a pull that does not ask snapshots nothing.
func TestSnapshotOnPull(t *testing.T) {
	spec := &pb.JobSpec{Name: "eval", NumPservers: 1, NumVirtualShards: 4, DenseBlockSize: 8, Mode: pb.UpdateMode_UPDATE_MODE_SYNC,
		Optimizer: &pb.OptimizerSpec{Name: "sgd", LearningRate: 0.1},
		Params:    []*pb.ParamSpec{{Name: "w", Shape: []int64{20}, Init: pb.Initializer_INIT_ZEROS}}}
	s, err := NewSlot(spec, 0, 1)
	if err != nil {
		t.Fatal(err)
	}
	s.SetTrainers([]string{"a"})
	snaps := make(chan *SlotSnapshot, 8)
	s.SnapshotOnPull(func(snap *SlotSnapshot) { snaps <- snap })
	layout := s.Layout()
	p, _ := layout.Param("w")
	push := func(step int64) {
		t.Helper()
		var grads []*pb.Tensor
		for b := int64(0); b < p.Blocks; b++ {
			lo, hi := layout.BlockRange(p, b)
			g := make([]float32, hi-lo)
			for i := range g {
				g[i] = float32(i + 1)
			}
			grads = append(grads, &pb.Tensor{Name: "w", Block: b, Data: wire.Float32Bytes(g)})
		}
		if _, err := s.Push(context.Background(), &pb.PushRequest{Job: "eval", Trainer: "a", Version: s.Version(), Step: step, Grads: grads, Examples: 1}); err != nil {
			t.Fatal(err)
		}
	}
	pull := func(checkpoint bool) *pb.PullResponse {
		t.Helper()
		resp, err := s.Pull(context.Background(), &pb.PullRequest{Job: "eval", Checkpoint: checkpoint})
		if err != nil {
			t.Fatal(err)
		}
		return resp
	}
	next := func() *SlotSnapshot {
		t.Helper()
		select {
		case snap := <-snaps:
			return snap
		case <-time.After(30 * time.Second):
			t.Fatal("no snapshot within 30 s")
			return nil
		}
	}
	push(0)
	push(1)
	pull(false)
	resp := pull(true)
	pull(true) // the same step: no second snapshot
	snap := next()
	if snap.Step != 2 || snap.Version != resp.GetVersion() {
		t.Fatalf("snapshot of step %d version %d, the pull read version %d at step 2", snap.Step, snap.Version, resp.GetVersion())
	}
	pulled := map[int64][]byte{}
	for _, tn := range resp.GetTensors() {
		pulled[tn.GetBlock()] = tn.GetData()
	}
	n := 0
	for _, vs := range snap.VShards {
		for _, e := range vs.Entries {
			if got, want := wire.Float32Bytes(e.Values), pulled[e.Index]; string(got) != string(want) {
				t.Fatalf("block %d: snapshot %v, pull %v", e.Index, e.Values, want)
			}
			n++
		}
	}
	if int64(n) != p.Blocks {
		t.Fatalf("snapshot holds %d blocks, want %d", n, p.Blocks)
	}
	snap.Release()
	push(2)
	pull(true)
	if snap := next(); snap.Step != 3 {
		t.Fatalf("second snapshot of step %d, want 3", snap.Step)
	}
	select {
	case snap := <-snaps:
		t.Fatalf("an extra snapshot of step %d", snap.Step)
	default:
	}
}
