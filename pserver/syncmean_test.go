package pserver

import (
	"bytes"
	"context"
	"errors"
	"math"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	pb "github.com/raftps/raftps/api/raftpspb"
)

// meanSpec is a sync slot with a dense param of several blocks, each
// larger than a chunk, and an embedding.
func meanSpec() *pb.JobSpec {
	return &pb.JobSpec{Name: "job", Mode: pb.UpdateMode_UPDATE_MODE_SYNC, Seed: 1, NumVirtualShards: 4,
		DenseBlockSize: 2*chunkElems + 7,
		Optimizer:      &pb.OptimizerSpec{Name: "momentum", LearningRate: 0.01, Momentum: 0.9},
		Params: []*pb.ParamSpec{{Name: "w", Shape: []int64{5*chunkElems + 100}, Init: pb.Initializer_INIT_NORMAL},
			{Name: "emb", Shape: []int64{50, 4}, Embedding: true, Init: pb.Initializer_INIT_UNIFORM}}}
}

// meanGrad is a random gradient with signed zeros, subnormals and
// magnitudes from 1e-9 to 1e3.
func meanGrad(r *rand.Rand, n int) []float32 {
	g := make([]float32, n)
	for i := range g {
		switch r.IntN(7) {
		case 0:
			g[i] = float32(math.Copysign(0, -1))
		case 1:
			g[i] = math.Float32frombits(r.Uint32N(1<<23) | uint32(r.IntN(2))<<31)
		default:
			g[i] = float32(r.NormFloat64() * math.Pow(10, float64(r.IntN(13)-9)))
		}
	}
	return g
}

// meanPush is one trainer's push: the dense gradient, rows of the
// embedding and their gradient, its examples.
type meanPush struct {
	trainer  string
	dense    []float32
	rows     []int64
	rowGrads []float32
	examples int64
}

func (p meanPush) request(s *Slot, step int64) *pb.PushRequest {
	ts := denseTensors(s.Layout(), 0, map[string][]float32{"w": p.dense})
	if len(p.rows) > 0 {
		ts = append(ts, &pb.Tensor{Name: "emb", Rows: p.rows, Data: packed(p.rowGrads...)})
	}
	return &pb.PushRequest{Trainer: p.trainer, Step: step, Version: step, Examples: p.examples, Grads: ts, PushId: uint64(step + 1)}
}

// referenceMean is the weighted mean of pushes computed element by element
// in float64 in push order from zero (what the pserver promises), as one
// push: the dense mean and the union of rows, sorted.
func referenceMean(pushes []meanPush) meanPush {
	var total int64
	for _, p := range pushes {
		total += p.examples
	}
	inv := 1 / float64(total)
	out := meanPush{trainer: "ref", dense: make([]float32, len(pushes[0].dense)), examples: total}
	for i := range out.dense {
		a := 0.0
		for _, p := range pushes {
			a += float64(p.examples) * float64(p.dense[i])
		}
		out.dense[i] = float32(a * inv)
	}
	sums := map[int64][]float64{}
	for _, p := range pushes {
		for j, r := range p.rows {
			if sums[r] == nil {
				sums[r] = make([]float64, 4)
			}
			for d := range 4 {
				sums[r][d] += float64(p.examples) * float64(p.rowGrads[4*j+d])
			}
		}
	}
	for r := range sums {
		out.rows = append(out.rows, r)
	}
	slices.Sort(out.rows)
	for _, r := range out.rows {
		for _, v := range sums[r] {
			out.rowGrads = append(out.rowGrads, float32(v*inv))
		}
	}
	return out
}

// pushInOrder pushes ps to s as one sync step, each counted before the next
// is sent (so the order is known); the last one completes the step.
func pushInOrder(t *testing.T, s *Slot, step int64, ps []meanPush) {
	t.Helper()
	ctx := context.Background()
	errs := make(chan error, len(ps))
	for _, p := range ps[:len(ps)-1] {
		go func() { _, err := s.Push(ctx, p.request(s, step)); errs <- err }()
		waitPushed(t, s, p.trainer)
	}
	if _, err := s.Push(ctx, ps[len(ps)-1].request(s, step)); err != nil {
		t.Fatalf("step %d: last push: %v", step, err)
	}
	for range len(ps) - 1 {
		if err := <-errs; err != nil {
			t.Fatalf("step %d: %v", step, err)
		}
	}
}

// TestSyncMeanOfTrainers: a sync step of three trainers (examples 3, 1 and
// 7; different embedding rows, one trainer with none) applies exactly the
// weighted mean summed in float64 in push order: the slot's values and
// optimizer state match, bit for bit, a slot given that mean by one
// trainer, step after step (the mean buffers are reused from step 2 on),
// with the mean computed on every core and on one.
func TestSyncMeanOfTrainers(t *testing.T) {
	for _, serial := range []bool{false, true} {
		name := map[bool]string{false: "parallel", true: "serial"}[serial]
		t.Run(name, func(t *testing.T) {
			serialChunks.Store(serial)
			defer serialChunks.Store(false)
			r := rand.New(rand.NewPCG(7, 8))
			s, ref := mustSlot(t, meanSpec(), 0, 1), mustSlot(t, meanSpec(), 0, 1)
			s.SetTrainers([]string{"a", "b", "c"})
			ref.SetTrainers([]string{"ref"})
			n := int(s.Layout().Params[0].Size)
			for step := int64(0); step < 4; step++ {
				ps := []meanPush{
					{trainer: "a", dense: meanGrad(r, n), rows: []int64{1, 2, 3}, rowGrads: meanGrad(r, 12), examples: 3},
					{trainer: "b", dense: meanGrad(r, n), rows: []int64{40, 2}, rowGrads: meanGrad(r, 8), examples: 1},
					{trainer: "c", dense: meanGrad(r, n), examples: 7},
				}
				if step%2 == 1 {
					ps[0], ps[2] = ps[2], ps[0] // another order
				}
				pushInOrder(t, s, step, ps)
				if _, err := ref.Push(context.Background(), referenceMean(ps).request(ref, step)); err != nil {
					t.Fatalf("reference push %d: %v", step, err)
				}
				if !bytes.Equal(snapshotBytes(t, s), snapshotBytes(t, ref)) {
					t.Fatalf("step %d: the slot of three trainers differs from one given their weighted mean", step)
				}
				if s.Version() != step+1 {
					t.Fatalf("version %d after step %d", s.Version(), step)
				}
			}
			if len(s.meanFree) == 0 {
				t.Fatal("no mean buffers kept after steps of three trainers")
			}
			// A step of one trainer drops them.
			s.SetTrainers([]string{"a"})
			pushInOrder(t, s, 4, []meanPush{{trainer: "a", dense: meanGrad(r, n), examples: 2}})
			if s.meanFree != nil {
				t.Fatalf("%d mean buffers kept after a step of one trainer", len(s.meanFree))
			}
		})
	}
}

// TestSyncCancelledPushKeepsItsGradient: pushes counted in a sync step
// whose callers give up waiting (context cancelled) still count with the
// gradients they carried, even though their requests' buffers are reused
// once they have returned (the server pools them): the step applies, bit
// for bit, the in-order mean of the original gradients. Of four pushes,
// the second and third give up: each folds the pushes up to its own into
// one float64 sum per key, so the step holds one buffer per key however
// many give up.
func TestSyncCancelledPushKeepsItsGradient(t *testing.T) {
	r := rand.New(rand.NewPCG(9, 10))
	s, ref := mustSlot(t, meanSpec(), 0, 1), mustSlot(t, meanSpec(), 0, 1)
	s.SetTrainers([]string{"a", "b", "c", "d"})
	ref.SetTrainers([]string{"ref"})
	n := int(s.Layout().Params[0].Size)
	ps := []meanPush{
		{trainer: "a", dense: meanGrad(r, n), rows: []int64{5}, rowGrads: meanGrad(r, 4), examples: 2},
		{trainer: "b", dense: meanGrad(r, n), rows: []int64{5, 6}, rowGrads: meanGrad(r, 8), examples: 5},
		{trainer: "c", dense: meanGrad(r, n), rows: []int64{7}, rowGrads: meanGrad(r, 4), examples: 1},
		{trainer: "d", dense: meanGrad(r, n), rows: []int64{6}, rowGrads: meanGrad(r, 4), examples: 3},
	}
	ctx := context.Background()
	aDone := make(chan error, 1)
	go func() { _, err := s.Push(ctx, ps[0].request(s, 0)); aDone <- err }()
	waitPushed(t, s, "a")
	for _, p := range ps[1:3] {
		req := p.request(s, 0)
		cctx, cancel := context.WithCancel(ctx)
		done := make(chan error, 1)
		go func() { _, err := s.Push(cctx, req); done <- err }()
		waitPushed(t, s, p.trainer)
		cancel()
		select {
		case err := <-done:
			if !errors.Is(err, context.Canceled) {
				t.Fatalf("%s: cancelled push: %v", p.trainer, err)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("%s: cancelled push did not return", p.trainer)
		}
		for _, tn := range req.Grads { // the buffers' next use
			copy(tn.Data, packed(ones(len(tn.Data)/4, 1e6)...))
		}
	}
	s.mu.RLock()
	folded, sums := s.cur.folded, len(s.cur.prefix)
	s.mu.RUnlock()
	if folded != 3 || sums != int(s.Layout().Params[0].Blocks)+3 {
		t.Fatalf("after b and c gave up: %d pushes folded into %d sums (want 3 into %d: the dense blocks and rows 5, 6, 7)", folded, sums, s.Layout().Params[0].Blocks+3)
	}
	if _, err := s.Push(ctx, ps[3].request(s, 0)); err != nil {
		t.Fatal(err)
	}
	if err := <-aDone; err != nil {
		t.Fatalf("a: %v", err)
	}
	if _, err := ref.Push(ctx, referenceMean(ps).request(ref, 0)); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(snapshotBytes(t, s), snapshotBytes(t, ref)) {
		t.Fatal("the step applied something else than the in-order mean of the pushes' gradients as sent")
	}
}
