package pserver

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"reflect"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	pb "github.com/raftps/raftps/api/raftpspb"
	"github.com/raftps/raftps/pserver/wire"
)

// TestRunChunks: every chunk runs exactly once and its writes are seen
// when runChunks returns, also with many callers at once (helpers busy:
// callers do the chunks themselves) and with 0 or 1 chunk.
func TestRunChunks(t *testing.T) {
	var wg sync.WaitGroup
	for c := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for round := range 200 {
				n := (c*7 + round) % 40
				out := make([]int, n)
				var calls atomic.Int64
				runChunks(n, func(i int) {
					calls.Add(1)
					out[i] += i + 1
				})
				if calls.Load() != int64(n) {
					t.Errorf("caller %d round %d: %d calls for %d chunks", c, round, calls.Load(), n)
					return
				}
				for i, v := range out {
					if v != i+1 {
						t.Errorf("caller %d round %d: chunk %d wrote %d, want %d", c, round, i, v, i+1)
						return
					}
				}
			}
		}()
	}
	wg.Wait()
}

// TestChunkSpans: the spans cover every element of every listed item once,
// in item order, none longer than chunkElems; an empty item still gets a
// span (its update is counted); chunks partition the spans, each at most
// chunkElems elements unless it is one span.
func TestChunkSpans(t *testing.T) {
	lens := []int{0, 1, chunkElems, chunkElems + 1, 3*chunkElems - 5, 16, 16, 16, 100}
	items := make([]gradItem, len(lens))
	for i, n := range lens {
		items[i].g = make([]float32, n)
	}
	for _, only := range [][]int{nil, {1, 3, 5}, {4}} {
		spans, chunks := chunkSpans(items, only)
		want := only
		if want == nil {
			for i := range items {
				want = append(want, i)
			}
		}
		j := 0
		for _, i := range want {
			next := 0
			for first := true; j < len(spans) && spans[j].item == i; j++ {
				x := spans[j]
				if x.lo != next || x.hi < x.lo || x.hi-x.lo > chunkElems || (x.hi == x.lo && !first) {
					t.Fatalf("only %v: item %d span %+v after %d", only, i, x, next)
				}
				next, first = x.hi, false
			}
			if next != lens[i] {
				t.Fatalf("only %v: item %d covered to %d of %d", only, i, next, lens[i])
			}
		}
		if j != len(spans) {
			t.Fatalf("only %v: %d spans, %d expected items' worth", only, len(spans), j)
		}
		if chunks[0] != 0 || chunks[len(chunks)-1] != len(spans) {
			t.Fatalf("only %v: chunks %v for %d spans", only, chunks, len(spans))
		}
		for k := 0; k+1 < len(chunks); k++ {
			size := 0
			for _, x := range spans[chunks[k]:chunks[k+1]] {
				size += x.hi - x.lo
			}
			if chunks[k+1] <= chunks[k] || (size > chunkElems && chunks[k+1]-chunks[k] > 1) {
				t.Fatalf("only %v: chunk %d = spans [%d, %d) of %d elements", only, k, chunks[k], chunks[k+1], size)
			}
		}
	}
}

// TestParallelUpdateMatchesSerial: an update cut into chunks on every core
// stores exactly what the same update on one goroutine stores (values,
// state, update count and magnitude bound), for entries larger and smaller
// than a chunk and for every optimizer; a push refused by the dry run
// because of one element in a late chunk leaves the slot byte-identical
// and names the entry.
func TestParallelUpdateMatchesSerial(t *testing.T) {
	for _, oc := range []*pb.OptimizerSpec{
		{Name: "sgd", LearningRate: 0.1, WeightDecay: 0.01},
		{Name: "momentum", LearningRate: 0.05, Momentum: 0.9, Nesterov: true, WeightDecay: 0.01},
		{Name: "adam", LearningRate: 0.01},
		{Name: "adagrad", LearningRate: 0.1},
	} {
		t.Run(oc.Name, func(t *testing.T) {
			spec := &pb.JobSpec{Name: "j", Mode: pb.UpdateMode_UPDATE_MODE_ASYNC, Optimizer: oc, Seed: 3, DenseBlockSize: 3*chunkElems + 5,
				Params: []*pb.ParamSpec{
					{Name: "w", Shape: []int64{3*chunkElems + 5}, Init: pb.Initializer_INIT_NORMAL},
					{Name: "b", Shape: []int64{100}, Init: pb.Initializer_INIT_UNIFORM},
				}}
			par, ser := mustSlot(t, spec, 0, 1), mustSlot(t, spec, 0, 1)
			r := rand.New(rand.NewPCG(7, 8))
			for step := range 4 {
				grads := map[string][]float32{}
				for _, p := range par.Layout().Params {
					g := make([]float32, p.Size)
					for i := range g {
						g[i] = float32(r.NormFloat64() * math.Pow(10, float64(r.IntN(6)-4)))
					}
					grads[p.Spec.GetName()] = g
				}
				for _, s := range []*Slot{par, ser} {
					serialChunks.Store(s == ser)
					_, err := s.Push(context.Background(), &pb.PushRequest{Version: s.Version(), Grads: denseTensors(s.Layout(), 0, grads)})
					serialChunks.Store(false)
					if err != nil {
						t.Fatal(err)
					}
				}
				assertSameEntries(t, fmt.Sprintf("step %d", step), par, ser)
			}
			// A huge learning rate makes the bound useless (dry run); a
			// large gradient element in the last chunk of w overflows (for
			// SGD and momentum only it: its gradient is 0 elsewhere).
			for _, s := range []*Slot{par, ser} {
				s.opt.LR, s.opt.WeightDecay = 1e39, 0
			}
			g := make([]float32, 3*chunkElems+5)
			g[len(g)-2] = 1e9
			before := pullAll(t, par)
			_, err := par.Push(context.Background(), &pb.PushRequest{Version: par.Version(), Grads: denseTensors(par.Layout(), 0, map[string][]float32{"w": g})})
			if !errors.Is(err, wire.ErrInvalid) || !strings.Contains(err.Error(), `"w"`) {
				t.Fatalf("overflowing push: err %v, want wire.ErrInvalid naming w", err)
			}
			if !reflect.DeepEqual(before, pullAll(t, par)) {
				t.Fatal("refused push changed the slot")
			}
			assertSameEntries(t, "after the refused push", par, ser)
		})
	}
}

// assertSameEntries fails unless a and b hold bit-identical entries.
func assertSameEntries(t *testing.T, when string, a, b *Slot) {
	t.Helper()
	a.mu.Lock()
	defer a.mu.Unlock()
	b.mu.Lock()
	defer b.mu.Unlock()
	for k, ea := range a.dense {
		eb := b.dense[k]
		if ea.t != eb.t || ea.amax != eb.amax || !slices.Equal(bitsOf(ea.values), bitsOf(eb.values)) {
			t.Fatalf("%s: entry %v: t %d/%d, amax %g/%g, values equal %v", when, k, ea.t, eb.t, ea.amax, eb.amax, slices.Equal(bitsOf(ea.values), bitsOf(eb.values)))
		}
		for i := range ea.state {
			if !slices.Equal(bitsOf(ea.state[i]), bitsOf(eb.state[i])) {
				t.Fatalf("%s: entry %v: state %d differs", when, k, i)
			}
		}
	}
}

func bitsOf(f []float32) []uint32 {
	out := make([]uint32, len(f))
	for i, x := range f {
		out[i] = math.Float32bits(x)
	}
	return out
}
