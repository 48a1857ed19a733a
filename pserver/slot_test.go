package pserver

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	pb "github.com/raftps/raftps/api/raftpspb"
	"github.com/raftps/raftps/pserver/optim"
	"github.com/raftps/raftps/pserver/psclient"
	"github.com/raftps/raftps/pserver/wire"
)

func syncSpec() *pb.JobSpec {
	return &pb.JobSpec{Name: "job", Mode: pb.UpdateMode_UPDATE_MODE_SYNC, Seed: 1, DenseBlockSize: 4, NumVirtualShards: 8,
		Optimizer: &pb.OptimizerSpec{Name: "sgd", LearningRate: 0.1},
		Params:    []*pb.ParamSpec{{Name: "w", Shape: []int64{10}}}}
}

func pushW(ctx context.Context, s *Slot, trainer string, step int64, g []float32, examples int64) (*pb.PushResponse, error) {
	return s.Push(ctx, &pb.PushRequest{Trainer: trainer, Step: step, Version: step, Examples: examples,
		Grads: denseTensors(s.Layout(), s.Index(), map[string][]float32{"w": g})})
}

// waitPushed waits until trainer's push is counted in the current step.
func waitPushed(tb testing.TB, s *Slot, trainer string) {
	tb.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		s.mu.RLock()
		ok := s.cur.pushed[trainer]
		s.mu.RUnlock()
		if ok {
			return
		}
		time.Sleep(time.Millisecond)
	}
	tb.Fatalf("push of %s never arrived", trainer)
}

func ones(n int, v float32) []float32 {
	f := make([]float32, n)
	for i := range f {
		f[i] = v
	}
	return f
}

// TestSyncEqualsSingleProcess: 3 trainers with batches of 2, 3 and 5
// examples of a linear regression, over 2 gRPC pservers, give the same
// parameters as single-process SGD on the concatenated batch of 10.
func TestSyncEqualsSingleProcess(t *testing.T) {
	spec := &pb.JobSpec{Name: "lr", Mode: pb.UpdateMode_UPDATE_MODE_SYNC, Seed: 3, DenseBlockSize: 2, NumVirtualShards: 8, NumPservers: 2,
		Optimizer: &pb.OptimizerSpec{Name: "sgd", LearningRate: 0.05},
		Params: []*pb.ParamSpec{
			{Name: "w", Shape: []int64{5}, Init: pb.Initializer_INIT_UNIFORM, Scale: 0.1},
			{Name: "b", Shape: []int64{1}},
		}}
	addrs, _, slots := startServers(t, spec, 2)
	trainers := []string{"t0", "t1", "t2"}
	for _, s := range slots {
		s.SetTrainers(trainers)
	}
	// Data: y = x·[1,-2,3,0.5,-1] + 0.3, 10 examples.
	const dim, nex = 5, 10
	x := make([][]float64, nex)
	y := make([]float64, nex)
	truth := []float64{1, -2, 3, 0.5, -1}
	for i := range x {
		x[i] = make([]float64, dim)
		for j := range x[i] {
			x[i][j] = math.Sin(float64(7*i + j))
			y[i] += truth[j] * x[i][j]
		}
		y[i] += 0.3
	}
	batches := [][2]int{{0, 2}, {2, 5}, {5, 10}}
	grad := func(w []float64, b float64, lo, hi int) ([]float64, float64) {
		gw := make([]float64, dim)
		gb := 0.0
		for i := lo; i < hi; i++ {
			r := b - y[i]
			for j := range w {
				r += w[j] * x[i][j]
			}
			for j := range w {
				gw[j] += r * x[i][j] / float64(hi-lo)
			}
			gb += r / float64(hi-lo)
		}
		return gw, gb
	}
	// Reference: single process, float64.
	init := pullAll(t, slots...)
	refW := make([]float64, dim)
	for j := range refW {
		refW[j] = float64(init["w"][j])
	}
	refB := float64(init["b"][0])
	const steps = 8
	for range steps {
		gw, gb := grad(refW, refB, 0, nex)
		for j := range refW {
			refW[j] -= 0.05 * gw[j]
		}
		refB -= 0.05 * gb
	}

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	errs := make(chan error, len(trainers))
	for i, id := range trainers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c, err := psclient.NewClient(spec, id, resolverOf(addrs))
			if err != nil {
				errs <- err
				return
			}
			defer c.Close()
			params := c.NewParams()
			for range steps {
				if err := c.Pull(ctx, params); err != nil {
					errs <- err
					return
				}
				w := make([]float64, dim)
				for j := range w {
					w[j] = float64(params["w"][j])
				}
				gw, gb := grad(w, float64(params["b"][0]), batches[i][0], batches[i][1])
				g32 := make([]float32, dim)
				for j := range gw {
					g32[j] = float32(gw[j])
				}
				n := int64(batches[i][1] - batches[i][0])
				if err := c.Push(ctx, &psclient.Grads{Dense: map[string][]float32{"w": g32, "b": {float32(gb)}}, Examples: n}); err != nil {
					errs <- fmt.Errorf("trainer %s: %w", id, err)
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	got := pullAll(t, slots...)
	for j := range refW {
		if d := math.Abs(float64(got["w"][j]) - refW[j]); d > 1e-6 {
			t.Errorf("w[%d] = %v, single-process %v (|d| = %g)", j, got["w"][j], refW[j], d)
		}
	}
	if d := math.Abs(float64(got["b"][0]) - refB); d > 1e-6 {
		t.Errorf("b = %v, single-process %v", got["b"][0], refB)
	}
	for _, s := range slots {
		if s.Version() != steps {
			t.Errorf("slot %d version %d, want %d", s.Index(), s.Version(), steps)
		}
	}
}

// TestAsyncExactlyOnce: every accepted async gradient is applied exactly once.
func TestAsyncExactlyOnce(t *testing.T) {
	spec := syncSpec()
	spec.Mode = pb.UpdateMode_UPDATE_MODE_ASYNC
	spec.Optimizer.LearningRate = 1
	s := mustSlot(t, spec, 0, 1)
	const workers, pushes = 8, 25
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for k := range pushes {
				if _, err := pushW(context.Background(), s, fmt.Sprint(w), 0, ones(10, float32(w+k)), 1); err != nil {
					t.Error(err)
				}
			}
		}()
	}
	wg.Wait()
	var want float32
	for w := range workers {
		for k := range pushes {
			want -= float32(w + k)
		}
	}
	for i, v := range pullAll(t, s)["w"] {
		if v != want {
			t.Fatalf("w[%d] = %v, want %v", i, v, want)
		}
	}
	if s.Version() != workers*pushes {
		t.Fatalf("version %d, want %d", s.Version(), workers*pushes)
	}
}

func TestAsyncStaleness(t *testing.T) {
	spec := syncSpec()
	spec.Mode = pb.UpdateMode_UPDATE_MODE_ASYNC
	spec.Staleness = 2
	s := mustSlot(t, spec, 0, 1)
	for v := range int64(3) {
		if _, err := pushW(context.Background(), s, "a", v, ones(10, 1), 1); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := pushW(context.Background(), s, "a", 1, ones(10, 1), 1); err != nil {
		t.Fatalf("version 1 at 3 with bound 2: %v", err)
	}
	_, err := pushW(context.Background(), s, "a", 1, ones(10, 1), 1)
	if status.Code(err) != codes.FailedPrecondition || !errors.Is(err, wire.ErrStale) {
		t.Fatalf("version 1 at 4 with bound 2: %v, want FailedPrecondition", err)
	}
}

// TestSyncRemovedTrainer: a trainer removed mid-step never hangs the others.
func TestSyncRemovedTrainer(t *testing.T) {
	s := mustSlot(t, syncSpec(), 0, 1)
	s.SetTrainers([]string{"a", "b", "dead"})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	res := make(chan error, 2)
	for _, id := range []string{"a", "b"} {
		go func() {
			resp, err := pushW(ctx, s, id, 0, ones(10, 1), 1)
			if err == nil && resp.Version != 1 {
				err = fmt.Errorf("version %d", resp.Version)
			}
			res <- err
		}()
	}
	time.Sleep(100 * time.Millisecond)
	select {
	case err := <-res:
		t.Fatalf("push returned before the step completed: %v", err)
	default:
	}
	start := time.Now()
	s.SetTrainers([]string{"a", "b"})
	for range 2 {
		if err := <-res; err != nil {
			t.Fatal(err)
		}
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Fatalf("pushes returned %v after removal", d)
	}
}

// TestSyncLeaveStep: a trainer out of data leaves; the other goes on alone.
func TestSyncLeaveStep(t *testing.T) {
	s := mustSlot(t, syncSpec(), 0, 1)
	s.SetTrainers([]string{"a", "b"})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { // b: one step, then out of data
		defer wg.Done()
		if _, err := pushW(ctx, s, "b", 0, ones(10, 1), 1); err != nil {
			t.Error(err)
		}
		s.LeaveStep("b")
	}()
	go func() {
		defer wg.Done()
		for step := int64(0); step < 5; step++ {
			if _, err := pushW(ctx, s, "a", step, ones(10, 1), 1); err != nil {
				t.Errorf("step %d: %v", step, err)
				return
			}
		}
	}()
	wg.Wait()
	if s.Version() != 5 {
		t.Fatalf("version %d, want 5", s.Version())
	}
	// b comes back: it takes part from the next step it starts.
	done := make(chan error, 1)
	go func() { _, err := pushW(ctx, s, "b", 5, ones(10, 1), 1); done <- err }()
	waitPushed(t, s, "b")
	if _, err := pushW(ctx, s, "a", 5, ones(10, 1), 1); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// TestSyncJoinMidStep: a trainer added during a step waits for the step's end
// and is told to re-pull; it takes part in the next step.
func TestSyncJoinMidStep(t *testing.T) {
	s := mustSlot(t, syncSpec(), 0, 1)
	s.SetTrainers([]string{"a", "b"})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	resA := make(chan error, 1)
	go func() { _, err := pushW(ctx, s, "a", 0, ones(10, 1), 1); resA <- err }()
	waitPushed(t, s, "a")
	s.SetTrainers([]string{"a", "b", "c"})
	resC := make(chan error, 1)
	go func() { _, err := pushW(ctx, s, "c", 0, ones(10, 1), 1); resC <- err }()
	time.Sleep(50 * time.Millisecond)
	if _, err := pushW(ctx, s, "b", 0, ones(10, 1), 1); err != nil {
		t.Fatal(err)
	}
	if err := <-resA; err != nil {
		t.Fatal(err)
	}
	if err := <-resC; !errors.Is(err, wire.ErrStale) {
		t.Fatalf("joined mid-step: %v, want wire.ErrStale", err)
	}
	// Step 1 has three members.
	var wg sync.WaitGroup
	for _, id := range []string{"a", "b", "c"} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := pushW(ctx, s, id, 1, ones(10, 1), 1); err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	if s.Version() != 2 {
		t.Fatalf("version %d", s.Version())
	}
	// Duplicate (retried) push of a finished step is refused as stale.
	if _, err := pushW(ctx, s, "a", 1, ones(10, 1), 1); !errors.Is(err, wire.ErrStale) {
		t.Fatalf("old step: %v", err)
	}
}

func TestSyncWeightedAverageAndScaleLR(t *testing.T) {
	spec := syncSpec()
	spec.ScaleLrWithTrainers = true
	s := mustSlot(t, spec, 0, 1)
	s.SetTrainers([]string{"a", "b"})
	ctx := context.Background()
	go pushW(ctx, s, "a", 0, ones(10, 1), 1)
	if _, err := pushW(ctx, s, "b", 0, ones(10, 4), 3); err != nil {
		t.Fatal(err)
	}
	// avg = (1·1 + 3·4)/4 = 3.25; lr = 0.1 × 2 trainers.
	want := float32(-0.2 * 3.25)
	for _, v := range pullAll(t, s)["w"] {
		if math.Abs(float64(v-want)) > 1e-6 {
			t.Fatalf("w = %v, want %v", v, want)
		}
	}
}

func TestFencedSlotRefuses(t *testing.T) {
	s := mustSlot(t, syncSpec(), 0, 1)
	s.SetTrainers([]string{"a", "b"})
	blocked := make(chan error, 1)
	go func() { _, err := pushW(context.Background(), s, "a", 0, ones(10, 1), 1); blocked <- err }()
	time.Sleep(50 * time.Millisecond)
	s.Fence()
	select {
	case err := <-blocked:
		if status.Code(err) != codes.Unavailable {
			t.Fatalf("blocked push: %v", err)
		}
	case <-time.After(2 * time.Second):
		t.Fatal("blocked push did not return after Fence")
	}
	_, err := pushW(context.Background(), s, "b", 0, ones(10, 1), 1)
	if status.Code(err) != codes.Unavailable || !strings.Contains(err.Error(), "slot lost its lease; re-resolve") {
		t.Fatalf("push on fenced slot: %v", err)
	}
	if _, err := s.Pull(context.Background(), &pb.PullRequest{}); status.Code(err) != codes.Unavailable {
		t.Fatalf("pull on fenced slot: %v", err)
	}
}

func snapshotBytes(tb testing.TB, s *Slot) []byte {
	tb.Helper()
	snap := s.Snapshot()
	var buf bytes.Buffer
	for v := range s.Layout().NumVShards {
		if _, ok := snap.VShards[v]; ok {
			b, err := EncodeVShard(snap, v)
			if err != nil {
				tb.Fatal(err)
			}
			buf.Write(b)
		}
	}
	return buf.Bytes()
}

func TestRejectedPushLeavesParamsUnchanged(t *testing.T) {
	spec := &pb.JobSpec{Name: "j", Mode: pb.UpdateMode_UPDATE_MODE_ASYNC, Seed: 1, DenseBlockSize: 4, NumVirtualShards: 4,
		Optimizer: &pb.OptimizerSpec{Name: "adam"},
		Params: []*pb.ParamSpec{{Name: "w", Shape: []int64{10}, Init: pb.Initializer_INIT_NORMAL},
			{Name: "emb", Shape: []int64{100, 3}, Embedding: true, Init: pb.Initializer_INIT_UNIFORM}}}
	s := mustSlot(t, spec, 0, 1)
	if _, err := s.Pull(context.Background(), &pb.PullRequest{Tensors: []*pb.Tensor{{Name: "emb", Rows: []int64{1, 2}}}}); err != nil {
		t.Fatal(err)
	}
	good := &pb.Tensor{Name: "w", Block: 0, Data: packed(1, 1, 1, 1)}
	nan := float32(math.NaN())
	cases := []struct {
		name, param string
		ts          []*pb.Tensor
	}{
		{"nan", "w", []*pb.Tensor{good, {Name: "w", Block: 1, Data: packed(1, nan, 1, 1)}}},
		{"inf", "emb", []*pb.Tensor{good, {Name: "emb", Rows: []int64{1}, Data: packed(1, float32(math.Inf(1)), 0)}}},
		{"wrong length", "w", []*pb.Tensor{good, {Name: "w", Block: 2, Data: packed(1, 1, 1, 1)}}},
		{"odd bytes", "w", []*pb.Tensor{good, {Name: "w", Block: 1, Data: []byte{1, 2, 3}}}},
		{"unknown param", "nope", []*pb.Tensor{good, {Name: "nope", Data: packed(1)}}},
		{"block out of range", "w", []*pb.Tensor{good, {Name: "w", Block: 3, Data: packed(1, 1)}}},
		{"row out of range", "emb", []*pb.Tensor{good, {Name: "emb", Rows: []int64{100}, Data: packed(1, 1, 1)}}},
		{"rows length", "emb", []*pb.Tensor{good, {Name: "emb", Rows: []int64{1, 2}, Data: packed(1, 1, 1)}}},
	}
	before := snapshotBytes(t, s)
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := s.Push(context.Background(), &pb.PushRequest{Grads: tc.ts})
			if status.Code(err) != codes.InvalidArgument || !errors.Is(err, wire.ErrInvalid) || !strings.Contains(err.Error(), tc.param) {
				t.Fatalf("err = %v, want InvalidArgument naming %q", err, tc.param)
			}
			if !bytes.Equal(before, snapshotBytes(t, s)) {
				t.Fatal("rejected push changed the slot")
			}
		})
	}
	if s.Version() != 0 {
		t.Fatalf("version %d", s.Version())
	}
}

// TestInitIndependentOfPartition: any number of pservers gives the same
// initial model, dense and embedding.
func TestInitIndependentOfPartition(t *testing.T) {
	spec := &pb.JobSpec{Name: "j", Seed: 42, DenseBlockSize: 5, NumVirtualShards: 16,
		Params: []*pb.ParamSpec{
			{Name: "u", Shape: []int64{33}, Init: pb.Initializer_INIT_UNIFORM, Scale: 0.2},
			{Name: "n", Shape: []int64{4, 9}, Init: pb.Initializer_INIT_NORMAL, Scale: 1},
			{Name: "g", Shape: []int64{6, 7}, Init: pb.Initializer_INIT_GLOROT},
			{Name: "z", Shape: []int64{3}},
			{Name: "emb", Shape: []int64{1000, 4}, Embedding: true, Init: pb.Initializer_INIT_NORMAL},
		}}
	one := pullAll(t, mustSlot(t, spec, 0, 1))
	var three []*Slot
	for i := range int32(3) {
		three = append(three, mustSlot(t, spec, i, 3))
	}
	got := pullAll(t, three...)
	for name, v := range one {
		for i := range v {
			if v[i] != got[name][i] {
				t.Fatalf("%s[%d]: %v with 1 pserver, %v with 3", name, i, v[i], got[name][i])
			}
		}
	}
	lim := float32(math.Sqrt(6.0 / 13))
	for _, v := range one["g"] {
		if v < -lim || v > lim || v == 0 {
			t.Fatalf("glorot value %v outside ±%v", v, lim)
		}
	}
	// Embedding rows: same on either partitioning, same on every pull.
	c1, _ := psclient.NewClient(spec, "x", nil)
	l3, _ := wire.NewLayout(spec, 3)
	for _, r := range []int64{0, 7, 999} {
		p, _ := l3.Param("emb")
		a, err := mustSlot(t, spec, 0, 1).Pull(context.Background(), &pb.PullRequest{Tensors: []*pb.Tensor{{Name: "emb", Rows: []int64{r}}}})
		if err != nil {
			t.Fatal(err)
		}
		b, err := three[l3.SlotOfRow(p, r)].Pull(context.Background(), &pb.PullRequest{Tensors: []*pb.Tensor{{Name: "emb", Rows: []int64{r}}}})
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(a.Tensors[0].Data, b.Tensors[0].Data) {
			t.Fatalf("row %d differs across partitionings", r)
		}
	}
	_ = c1
}

// TestSyncWaiting: Waiting names the trainers an open step waits for and
// those that pushed, and reports nothing before the first push, after the
// step completes, or in async mode.
func TestSyncWaiting(t *testing.T) {
	s := mustSlot(t, syncSpec(), 0, 1)
	s.SetTrainers([]string{"b", "a", "c"})
	if w, ok := s.Waiting(); ok {
		t.Fatalf("Waiting before any push = %+v, want none", w)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	res := make(chan error, 3)
	push := func(id string) {
		go func() { _, err := pushW(ctx, s, id, 0, ones(10, 1), 1); res <- err }()
	}
	push("b")
	waitPushed(t, s, "b")
	time.Sleep(20 * time.Millisecond)
	w, ok := s.Waiting()
	if !ok || w.Step != 0 || !slices.Equal(w.Waiting, []string{"a", "c"}) || !slices.Equal(w.Pushed, []string{"b"}) || w.For < 20*time.Millisecond {
		t.Fatalf("Waiting after b pushed = %+v, %v; want step 0 waiting [a c] pushed [b] for >= 20ms", w, ok)
	}
	s.LeaveStep("c")
	if w, ok = s.Waiting(); !ok || !slices.Equal(w.Waiting, []string{"a"}) {
		t.Fatalf("Waiting after c left = %+v, %v; want waiting [a]", w, ok)
	}
	push("a") // completes the step
	for range 2 {
		if err := <-res; err != nil {
			t.Fatal(err)
		}
	}
	if w, ok := s.Waiting(); ok {
		t.Fatalf("Waiting after the step completed = %+v, want none", w)
	}
	as := syncSpec()
	as.Mode = pb.UpdateMode_UPDATE_MODE_ASYNC
	a := mustSlot(t, as, 0, 1)
	a.SetTrainers([]string{"a", "b"})
	if _, err := pushW(ctx, a, "a", 0, ones(10, 1), 1); err != nil {
		t.Fatal(err)
	}
	if w, ok := a.Waiting(); ok {
		t.Fatalf("async Waiting = %+v, want none", w)
	}
}

// TestCheckGrad: every bad element (NaN of either sign, ±Inf, beyond
// ±MaxGradient) is refused wherever it sits (before, in or after the
// 64-bit words anyAbove reads, at any alignment), naming the param;
// ±MaxGradient itself passes; maxAbs returns max |g| exactly, and +Inf
// with a NaN.
func TestCheckGrad(t *testing.T) {
	p := &wire.ParamLayout{Spec: &pb.ParamSpec{Name: "w"}}
	negNaN := math.Float32frombits(math.Float32bits(float32(math.NaN())) | 1<<31)
	bad := []float32{float32(math.NaN()), negNaN, float32(math.Inf(1)), float32(math.Inf(-1)), 2 * MaxGradient, -1.5 * MaxGradient,
		math.Nextafter32(MaxGradient, float32(math.Inf(1)))}
	buf := make([]float32, 40)
	for off := range 3 { // off 1: the slice starts mid-word
		for _, n := range []int{1, 2, 3, 4, 5, 8, 9, 17, 18, 35} {
			g := buf[off : off+n]
			for pos := range n {
				for i := range g {
					g[i] = float32(i%5) - 2 // |g| <= 2
				}
				for _, b := range bad {
					g[pos] = b
					if err := checkGrad(p, g); !errors.Is(err, wire.ErrInvalid) || !strings.Contains(err.Error(), `"w"`) {
						t.Fatalf("off %d n=%d: %g at %d: err %v, want wire.ErrInvalid naming the param", off, n, b, pos, err)
					}
					if b != b && !math.IsInf(optim.MaxAbs(g), 1) {
						t.Fatalf("off %d n=%d: NaN at %d: maxAbs %g, want +Inf", off, n, pos, optim.MaxAbs(g))
					}
				}
				g[pos] = -MaxGradient
				if err := checkGrad(p, g); err != nil || optim.MaxAbs(g) != float64(float32(MaxGradient)) {
					t.Fatalf("off %d n=%d: -MaxGradient at %d: max %g, err %v", off, n, pos, optim.MaxAbs(g), err)
				}
				g[pos] = -2.5
				if err := checkGrad(p, g); err != nil || optim.MaxAbs(g) != 2.5 {
					t.Fatalf("off %d n=%d: -2.5 at %d: max %g, err %v", off, n, pos, optim.MaxAbs(g), err)
				}
			}
		}
	}
	if optim.MaxAbs(nil) != 0 || checkGrad(p, nil) != nil {
		t.Fatal("empty gradient")
	}
}

// TestAnyAbove: anyAbove agrees with a comparison per element for random
// bit patterns (every sign, NaN, Inf) and limits, at every alignment.
func TestAnyAbove(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	buf := make([]float32, 24)
	for trial := range 20000 {
		off, n := r.IntN(2), r.IntN(23)
		g := buf[off : off+n]
		limit := r.Uint32() & optim.AbsMask
		for i := range g {
			g[i] = math.Float32frombits(r.Uint32())
			if r.IntN(2) == 0 { // near the limit, where the carry decides
				g[i] = math.Float32frombits(limit + uint32(r.IntN(3)) - 1)
			}
		}
		want := false
		for _, x := range g {
			want = want || math.Float32bits(x)&optim.AbsMask > limit
		}
		if got := optim.AnyAbove(g, limit); got != want {
			t.Fatalf("trial %d: optim.AnyAbove(%v, %#x) = %v, want %v", trial, g, limit, got, want)
		}
	}
}
