package pserver

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/encoding"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	pb "github.com/raftps/raftps/api/raftpspb"
	"github.com/raftps/raftps/pserver/psclient"
	"github.com/raftps/raftps/pserver/vshard"
	"github.com/raftps/raftps/pserver/wire"
)

// TestLayoutShapeOverflow: a shape whose product overflows int64 ([3, 1<<62]
// wraps negative, [4, 1<<62] to zero) is ErrBadSpec from NewLayout,
// NewSlot and NewClient, never a negative size that panics in make.
func TestLayoutShapeOverflow(t *testing.T) {
	for _, shp := range [][]int64{{3, 1 << 62}, {4, 1 << 62}, {1 << 32, 1 << 32}, {-1}} {
		for _, emb := range []bool{false, true} {
			spec := &pb.JobSpec{Name: "j", NumPservers: 1, Params: []*pb.ParamSpec{{Name: "p", Shape: shp, Embedding: emb}}}
			if _, err := wire.NewLayout(spec, 1); !errors.Is(err, wire.ErrBadSpec) {
				t.Errorf("NewLayout(%v, embedding=%v) = %v, want wire.ErrBadSpec", shp, emb, err)
			}
			if _, err := NewSlot(spec, 0, 1); !errors.Is(err, wire.ErrBadSpec) {
				t.Errorf("NewSlot(%v, embedding=%v) = %v, want wire.ErrBadSpec", shp, emb, err)
			}
			if _, err := psclient.NewClient(spec, "t", psclient.StaticResolver{}); !errors.Is(err, wire.ErrBadSpec) {
				t.Errorf("NewClient(%v, embedding=%v) = %v, want wire.ErrBadSpec", shp, emb, err)
			}
		}
	}
}

// heapAlloc returns the bytes fn allocated on the heap (all goroutines;
// tests using it do not run in parallel).
func heapAlloc(fn func()) uint64 {
	var a, b runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&a)
	fn()
	runtime.ReadMemStats(&b)
	return b.TotalAlloc - a.TotalAlloc
}

func requestBytes(m proto.Message) int { return proto.Size(m) }

// TestPullRefusesDuplicates: a 2 KB pull naming one dense block 400 times
// (100 MiB of response before the fix) or one row 5000 times is
// InvalidArgument, and the pserver allocates less than 64× the request.
func TestPullRefusesDuplicates(t *testing.T) {
	spec := &pb.JobSpec{Name: "j", Seed: 1, NumVirtualShards: 4,
		Params: []*pb.ParamSpec{{Name: "w", Shape: []int64{1 << 16}}, {Name: "emb", Shape: []int64{1000, 64}, Embedding: true}}}
	s := mustSlot(t, spec, 0, 1)
	blocks := &pb.PullRequest{}
	for range 400 {
		blocks.Tensors = append(blocks.Tensors, &pb.Tensor{Name: "w"})
	}
	rows := &pb.PullRequest{Tensors: []*pb.Tensor{{Name: "emb", Rows: make([]int64, 5000)}}}
	for _, req := range []*pb.PullRequest{blocks, rows} {
		var err error
		n := heapAlloc(func() { _, err = s.Pull(context.Background(), req) })
		if status.Code(err) != codes.InvalidArgument || !errors.Is(err, wire.ErrInvalid) {
			t.Fatalf("pull with duplicates: %v, want InvalidArgument", err)
		}
		if lim := 64 * uint64(requestBytes(req)); n > lim {
			t.Fatalf("a %d-byte pull allocated %d bytes (limit %d)", requestBytes(req), n, lim)
		}
	}
	// Distinct names are still fine, in one message.
	ok := &pb.PullRequest{Tensors: []*pb.Tensor{{Name: "w"}, {Name: "emb", Rows: []int64{1, 2}}, {Name: "emb", Rows: []int64{3}}}}
	if _, err := s.Pull(context.Background(), ok); err != nil {
		t.Fatal(err)
	}
	// A row named in two tensors of the same param is a duplicate too.
	dup := &pb.PullRequest{Tensors: []*pb.Tensor{{Name: "emb", Rows: []int64{1, 2}}, {Name: "emb", Rows: []int64{2}}}}
	if _, err := s.Pull(context.Background(), dup); !errors.Is(err, wire.ErrInvalid) {
		t.Fatalf("row in two tensors: %v", err)
	}
}

// TestPullResponseCapped: a pull of distinct rows whose response would
// exceed MaxPullBytes is refused before anything is allocated.
func TestPullResponseCapped(t *testing.T) {
	spec := &pb.JobSpec{Name: "j", Seed: 1, NumVirtualShards: 1,
		Params: []*pb.ParamSpec{{Name: "emb", Shape: []int64{1 << 14, 1 << 20}, Embedding: true}}} // 64 GiB, the bound
	s := mustSlot(t, spec, 0, 1)
	req := &pb.PullRequest{Tensors: []*pb.Tensor{{Name: "emb"}}}
	for r := range int64(300) { // 300 rows of 4 MiB: 1.2 GiB
		req.Tensors[0].Rows = append(req.Tensors[0].Rows, r)
	}
	var err error
	n := heapAlloc(func() { _, err = s.Pull(context.Background(), req) })
	if !errors.Is(err, wire.ErrInvalid) {
		t.Fatalf("1.2 GiB pull: %v, want wire.ErrInvalid", err)
	}
	if n > 1<<20 {
		t.Fatalf("refused pull allocated %d bytes", n)
	}
}

// TestPullDoesNotCreateRows: pulling rows never pushed returns their
// initial values but stores nothing (pulls cannot grow a slot); the first
// push starts from exactly those values.
func TestPullDoesNotCreateRows(t *testing.T) {
	spec := &pb.JobSpec{Name: "j", Seed: 5, NumVirtualShards: 1, Mode: pb.UpdateMode_UPDATE_MODE_ASYNC,
		Optimizer: &pb.OptimizerSpec{Name: "sgd", LearningRate: 0.5},
		Params:    []*pb.ParamSpec{{Name: "emb", Shape: []int64{1 << 20, 2}, Embedding: true, Init: pb.Initializer_INIT_UNIFORM, Scale: 1}}}
	s := mustSlot(t, spec, 0, 1)
	before := snapshotBytes(t, s)
	req := &pb.PullRequest{Tensors: []*pb.Tensor{{Name: "emb", Rows: []int64{7, 1 << 19, 99}}}}
	first, err := s.Pull(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(before, snapshotBytes(t, s)) {
		t.Fatal("a pull changed the slot")
	}
	again, err := s.Pull(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(first.Tensors[0].Data, again.Tensors[0].Data) {
		t.Fatal("initial row values differ between pulls")
	}
	v0 := wire.ViewFloat32s(first.Tensors[0].Data)[4:6] // row 99
	if _, err := s.Push(context.Background(), &pb.PushRequest{Grads: []*pb.Tensor{{Name: "emb", Rows: []int64{99}, Data: packed(1, -2)}}}); err != nil {
		t.Fatal(err)
	}
	got, err := s.Pull(context.Background(), &pb.PullRequest{Tensors: []*pb.Tensor{{Name: "emb", Rows: []int64{99}}}})
	if err != nil {
		t.Fatal(err)
	}
	w := wire.ViewFloat32s(got.Tensors[0].Data)
	if want := []float32{v0[0] - 0.5, v0[1] + 1}; w[0] != want[0] || w[1] != want[1] {
		t.Fatalf("row 99 after push = %v, want %v", w, want)
	}
	s.mu.RLock()
	n := len(s.rows)
	s.mu.RUnlock()
	if n != 1 {
		t.Fatalf("slot stores %d rows, want 1 (the pushed one)", n)
	}
}

func denseSpec(mode pb.UpdateMode, opt *pb.OptimizerSpec) *pb.JobSpec {
	return &pb.JobSpec{Name: "j", Mode: mode, Seed: 1, DenseBlockSize: 4, NumVirtualShards: 4, Optimizer: opt,
		Params: []*pb.ParamSpec{{Name: "w", Shape: []int64{8}, Init: pb.Initializer_INIT_NORMAL}}}
}

// TestFiniteGradientsCannotPoison: gradients that are finite but would
// overflow the update are refused with InvalidArgument and leave the slot
// byte-identical: |g| = 1e21 under Adam (v = (1-β2)g² is +Inf in float32),
// the same block twice in one push (3e38 + 3e38 = +Inf when summed), and
// an update whose result overflows (lr 1e30) even though g is small.
func TestFiniteGradientsCannotPoison(t *testing.T) {
	async := pb.UpdateMode_UPDATE_MODE_ASYNC
	cases := []struct {
		name string
		spec *pb.JobSpec
		ts   []*pb.Tensor
	}{
		{"adam 1e21", denseSpec(async, &pb.OptimizerSpec{Name: "adam"}),
			[]*pb.Tensor{{Name: "w", Block: 0, Data: packed(1e21, 0, 0, 0)}}},
		{"duplicate block", denseSpec(async, &pb.OptimizerSpec{Name: "sgd"}),
			[]*pb.Tensor{{Name: "w", Block: 1, Data: packed(1, 1, 1, 1)}, {Name: "w", Block: 1, Data: packed(1, 1, 1, 1)}}},
		{"duplicate 3e38", denseSpec(async, &pb.OptimizerSpec{Name: "sgd"}),
			[]*pb.Tensor{{Name: "w", Block: 0, Data: packed(3e38, 0, 0, 0)}, {Name: "w", Block: 0, Data: packed(3e38, 0, 0, 0)}}},
		{"overflowing result", denseSpec(async, &pb.OptimizerSpec{Name: "sgd", LearningRate: 1e30}),
			[]*pb.Tensor{{Name: "w", Block: 0, Data: packed(0.5, 0.5, 0.5, 0.5)}, {Name: "w", Block: 1, Data: packed(1e12, 0, 0, 0)}}},
		{"adagrad overflow", denseSpec(async, &pb.OptimizerSpec{Name: "adagrad", LearningRate: 1e39}),
			[]*pb.Tensor{{Name: "w", Block: 1, Data: packed(1e12, 0, 0, 0)}}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s := mustSlot(t, tc.spec, 0, 1)
			before := snapshotBytes(t, s)
			_, err := s.Push(context.Background(), &pb.PushRequest{Grads: tc.ts})
			if status.Code(err) != codes.InvalidArgument || !errors.Is(err, wire.ErrInvalid) {
				t.Fatalf("push: %v, want InvalidArgument", err)
			}
			if !bytes.Equal(before, snapshotBytes(t, s)) {
				t.Fatal("refused push changed the slot")
			}
			for _, v := range pullAll(t, s)["w"] {
				if v-v != 0 {
					t.Fatalf("parameter poisoned: %v", v)
				}
			}
		})
	}
}

// TestSyncExamplesCannotFlipSign: two trainers claiming examples = 2^62
// overflowed Σ nᵢ to a negative int64 and flipped the update's sign; such a
// push is now refused, and two pushes of MaxExamples average correctly.
func TestSyncExamplesCannotFlipSign(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	spec := denseSpec(pb.UpdateMode_UPDATE_MODE_SYNC, &pb.OptimizerSpec{Name: "sgd", LearningRate: 1})
	spec.Params[0].Init = pb.Initializer_INIT_ZEROS
	s := mustSlot(t, spec, 0, 1)
	s.SetTrainers([]string{"a", "b"})
	push := func(trainer string, examples int64) error {
		_, err := s.Push(ctx, &pb.PushRequest{Trainer: trainer, Step: 0, Examples: examples,
			Grads: denseTensors(s.Layout(), 0, map[string][]float32{"w": ones(8, 1)})})
		return err
	}
	before := snapshotBytes(t, s)
	for _, tr := range []string{"a", "b"} {
		if err := push(tr, 1<<62); status.Code(err) != codes.InvalidArgument {
			t.Fatalf("examples 2^62: %v, want InvalidArgument", err)
		}
	}
	if !bytes.Equal(before, snapshotBytes(t, s)) || s.Version() != 0 {
		t.Fatal("refused pushes changed the slot")
	}
	errs := make(chan error, 2)
	for _, tr := range []string{"a", "b"} {
		go func() { errs <- push(tr, MaxExamples) }()
	}
	for range 2 {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	for i, v := range pullAll(t, s)["w"] {
		if v != -1 {
			t.Fatalf("w[%d] = %v after averaging g = 1 with lr 1, want -1", i, v)
		}
	}
}

// TestSyncStepRefusedWhole: a sync step whose averaged update would
// overflow is refused for every pusher (InvalidArgument); the slot is
// byte-identical and stays at the same step, and the next step works.
func TestSyncStepRefusedWhole(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	spec := denseSpec(pb.UpdateMode_UPDATE_MODE_SYNC, &pb.OptimizerSpec{Name: "sgd", LearningRate: 1e30})
	s := mustSlot(t, spec, 0, 1)
	s.SetTrainers([]string{"a", "b"})
	before := snapshotBytes(t, s)
	errs := make(chan error, 2)
	for i, tr := range []string{"a", "b"} {
		g := ones(8, 0)
		g[i] = 1e10 // lr·g = 1e40: not a float32
		go func() {
			_, err := s.Push(ctx, &pb.PushRequest{Trainer: tr, Examples: 1,
				Grads: denseTensors(s.Layout(), 0, map[string][]float32{"w": g})})
			errs <- err
		}()
	}
	for range 2 {
		if err := <-errs; status.Code(err) != codes.InvalidArgument {
			t.Fatalf("overflowing step: %v, want InvalidArgument", err)
		}
	}
	if !bytes.Equal(before, snapshotBytes(t, s)) || s.Step() != 0 {
		t.Fatal("refused step changed the slot")
	}
	for _, tr := range []string{"a", "b"} {
		go func() {
			_, err := s.Push(ctx, &pb.PushRequest{Trainer: tr, Examples: 1,
				Grads: denseTensors(s.Layout(), 0, map[string][]float32{"w": ones(8, 0)})})
			errs <- err
		}()
	}
	for range 2 {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	if s.Step() != 1 {
		t.Fatalf("step %d after a good step, want 1", s.Step())
	}
}

// fakePushStream feeds messages to Server.PushStream and counts how many
// the server read.
type fakePushStream struct {
	grpc.ServerStream
	ctx  context.Context
	next func(i int) *pb.PushRequest // nil ends the stream
	read int
	sent []*pb.PushResponse
}

func (f *fakePushStream) Context() context.Context { return f.ctx }
func (f *fakePushStream) Recv() (*pb.PushRequest, error) {
	m := f.next(f.read)
	if m == nil {
		return nil, io.EOF
	}
	f.read++
	return m, nil
}
func (f *fakePushStream) Send(r *pb.PushResponse) error { f.sent = append(f.sent, r); return nil }

// TestPushStreamValidatesEachMessage: a push stream for a job or param
// that does not exist, or naming a block twice across messages, ends at
// the first bad message with the right code instead of buffering all 64
// messages (256 MiB before the fix); a good stream still applies whole.
func TestPushStreamValidatesEachMessage(t *testing.T) {
	spec := &pb.JobSpec{Name: "j", Mode: pb.UpdateMode_UPDATE_MODE_ASYNC, Seed: 1, DenseBlockSize: 4, NumVirtualShards: 4,
		Optimizer: &pb.OptimizerSpec{Name: "sgd", LearningRate: 1},
		Params:    []*pb.ParamSpec{{Name: "w", Shape: []int64{8}, Init: pb.Initializer_INIT_ZEROS}}}
	srv := NewServer()
	s := mustSlot(t, spec, 0, 1)
	srv.Host("j", 0, s)
	const msgs = 64
	block := func(b int64) []*pb.Tensor { return []*pb.Tensor{{Name: "w", Block: b, Data: packed(1, 1, 1, 1)}} }
	cases := []struct {
		name  string
		first *pb.PushRequest
		later func(i int) []*pb.Tensor
		code  codes.Code
		read  int
	}{
		{"unknown job", &pb.PushRequest{Job: "nope", Grads: block(0)}, func(int) []*pb.Tensor { return block(1) }, codes.Unavailable, 1},
		{"unknown param", &pb.PushRequest{Job: "j", Grads: []*pb.Tensor{{Name: "x", Data: make([]byte, 4<<20)}}}, func(int) []*pb.Tensor { return block(1) }, codes.InvalidArgument, 1},
		{"block twice", &pb.PushRequest{Job: "j", Grads: block(0)}, func(int) []*pb.Tensor { return block(1) }, codes.InvalidArgument, 3},
		{"other job later", &pb.PushRequest{Job: "j", Grads: block(0)}, func(i int) []*pb.Tensor { return nil }, codes.InvalidArgument, 2},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			before := snapshotBytes(t, s)
			f := &fakePushStream{ctx: context.Background(), next: func(i int) *pb.PushRequest {
				switch {
				case i == 0:
					return tc.first
				case i >= msgs:
					return nil
				case tc.name == "other job later":
					return &pb.PushRequest{Job: "k"}
				}
				return &pb.PushRequest{Grads: tc.later(i)}
			}}
			err := srv.PushStream(f)
			if status.Code(err) != tc.code {
				t.Fatalf("PushStream: %v, want %v", err, tc.code)
			}
			if f.read != tc.read {
				t.Fatalf("server read %d messages before refusing, want %d", f.read, tc.read)
			}
			if !bytes.Equal(before, snapshotBytes(t, s)) {
				t.Fatal("refused stream changed the slot")
			}
		})
	}
	f := &fakePushStream{ctx: context.Background(), next: func(i int) *pb.PushRequest {
		if i < 2 {
			return &pb.PushRequest{Job: "j", Grads: block(int64(i))}
		}
		return nil
	}}
	if err := srv.PushStream(f); err != nil || len(f.sent) != 1 || f.sent[0].GetVersion() != 1 {
		t.Fatalf("good stream: %v, %v", err, f.sent)
	}
	for i, v := range pullAll(t, s)["w"] {
		if v != -1 {
			t.Fatalf("w[%d] = %v, want -1", i, v)
		}
	}
}

// TestSyncNonMemberPushBounded: a sync push from a trainer never added by
// SetTrainers no longer waits (holding its gradients) until the client
// gives up: after MemberWait it fails with FailedPrecondition.
func TestSyncNonMemberPushBounded(t *testing.T) {
	old := MemberWait
	MemberWait = 200 * time.Millisecond
	defer func() { MemberWait = old }()
	s := mustSlot(t, syncSpec(), 0, 1)
	s.SetTrainers([]string{"a"})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	start := time.Now()
	_, err := pushW(ctx, s, "stranger", 0, ones(10, 1), 1)
	if status.Code(err) != codes.FailedPrecondition || !errors.Is(err, wire.ErrStale) {
		t.Fatalf("non-member push: %v after %v, want FailedPrecondition", err, time.Since(start))
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("non-member push waited %v", d)
	}
}

// mutateBlobs snapshots s, lets fn change the snapshot, and encodes every vshard.
func mutateBlobs(tb testing.TB, s *Slot, fn func(*SlotSnapshot)) map[int32][]byte {
	tb.Helper()
	snap := s.Snapshot()
	fn(snap)
	blobs := map[int32][]byte{}
	for v := range snap.VShards {
		b, err := EncodeVShard(snap, v)
		if err != nil {
			tb.Fatal(err)
		}
		blobs[v] = b
	}
	return blobs
}

// TestRestoreRefusesPoisonedState: a blob with a valid CRC whose optimizer
// state is non-finite, whose Adam second moment is negative, whose update
// count is negative (T = -1 made Adam divide by zero: NaN) or whose
// embedding row appears twice (silently overwritten before) is refused.
func TestRestoreRefusesPoisonedState(t *testing.T) {
	spec := restoreSpec()
	s := mustSlot(t, spec, 0, 1)
	trainSlots(t, []*Slot{s}, 3, 1)
	first := func(snap *SlotSnapshot, emb bool) *vshard.Entry {
		for v := range s.Layout().NumVShards {
			vs, ok := snap.VShards[v]
			if !ok {
				continue
			}
			for i := range vs.Entries {
				if vs.Params[vs.Entries[i].Param].Embedding == emb {
					return &vs.Entries[i]
				}
			}
		}
		t.Fatal("no entry")
		return nil
	}
	nan := float32(math.NaN())
	cases := []struct {
		name string
		fn   func(*SlotSnapshot)
		want error
	}{
		{"t = -1", func(snap *SlotSnapshot) { first(snap, false).T = -1 }, wire.ErrCorrupt},
		{"t = MaxInt64", func(snap *SlotSnapshot) { first(snap, true).T = math.MaxInt64 }, wire.ErrCorrupt},
		{"NaN value", func(snap *SlotSnapshot) { first(snap, false).Values[0] = nan }, wire.ErrCorrupt},
		{"Inf m", func(snap *SlotSnapshot) { first(snap, true).State[0][0] = float32(math.Inf(1)) }, wire.ErrCorrupt},
		{"negative v", func(snap *SlotSnapshot) { first(snap, false).State[1][0] = -1 }, wire.ErrCorrupt},
		{"row twice", func(snap *SlotSnapshot) {
			e := first(snap, true)
			vs := snap.VShards[s.Layout().VShardOfRow(s.Layout().Params[e.Param], e.Index)]
			vs.Entries = append(vs.Entries, *e)
		}, wire.ErrIncompatible},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			blobs := mutateBlobs(t, s, tc.fn)
			if _, err := RestoreSlot(spec, 0, 1, blobs); !errors.Is(err, tc.want) {
				t.Fatalf("RestoreSlot: %v, want %v", err, tc.want)
			}
		})
	}
	if _, err := RestoreSlot(spec, 0, 1, mutateBlobs(t, s, func(*SlotSnapshot) {})); err != nil {
		t.Fatalf("unchanged blobs: %v", err)
	}
}

// lyingPServer answers every pull with another slot's blocks.
type lyingPServer struct {
	pb.UnimplementedPServerServer
	other *Slot
}

func (l *lyingPServer) Pull(ctx context.Context, _ *pb.PullRequest) (*pb.PullResponse, error) {
	return l.other.Pull(ctx, &pb.PullRequest{})
}

// TestClientRefusesOtherSlotsBlocks: a pull response from slot 0's address
// carrying slot 1's blocks is an error, not a write into blocks slot 0
// does not serve (and slot 0's own blocks left stale).
func TestClientRefusesOtherSlotsBlocks(t *testing.T) {
	spec := &pb.JobSpec{Name: "j", Mode: pb.UpdateMode_UPDATE_MODE_ASYNC, Seed: 3, DenseBlockSize: 2, NumVirtualShards: 4, NumPservers: 2,
		Params: []*pb.ParamSpec{{Name: "w", Shape: []int64{16}, Init: pb.Initializer_INIT_UNIFORM}}}
	addrs, _, slots := startServers(t, spec, 2)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gs := grpc.NewServer(wire.ServerOptions()...)
	pb.RegisterPServerServer(gs, &lyingPServer{other: slots[1]})
	go gs.Serve(lis)
	defer gs.Stop()
	for _, thr := range []int{-1, 0} { // unary and stream pulls
		c, err := psclient.NewClient(spec, "t", psclient.StaticResolver{0: lis.Addr().String(), 1: addrs[1]}, psclient.WithStreamThreshold(thr), psclient.WithRetries(0, time.Millisecond))
		if err != nil {
			t.Fatal(err)
		}
		if err := c.Pull(context.Background(), c.NewParams()); err == nil {
			t.Fatalf("threshold %d: pull accepted slot 1's blocks from slot 0", thr)
		}
		c.Close()
	}
}

// TestSyncAwaySurvivesMembershipFlap: a trainer that left sync steps
// (LeaveStep) and whose lease flaps (SetTrainers drops it, then lists it
// again) is still away: the next step completes with the others. Before,
// SetTrainers forgot it and the step waited for a push that never came.
func TestSyncAwaySurvivesMembershipFlap(t *testing.T) {
	s := mustSlot(t, syncSpec(), 0, 1)
	s.SetTrainers([]string{"a", "b"})
	s.LeaveStep("b")
	s.SetTrainers([]string{"a"})
	s.SetTrainers([]string{"a", "b"})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	resp, err := pushW(ctx, s, "a", 0, ones(10, 1), 1)
	if err != nil {
		t.Fatalf("push of a: %v (the step waited for b, which left before the flap)", err)
	}
	if resp.GetVersion() != 1 {
		t.Fatalf("version %d, want 1", resp.GetVersion())
	}
	// b pushing again makes it a member of later steps.
	errs := make(chan error, 1)
	go func() { _, err := pushW(ctx, s, "b", 1, ones(10, 1), 1); errs <- err }()
	waitPushed(t, s, "b")
	if _, err := pushW(ctx, s, "a", 1, ones(10, 1), 1); err != nil {
		t.Fatal(err)
	}
	if err := <-errs; err != nil {
		t.Fatal(err)
	}
}

// TestPushRetryAppliedOnce: the first reply of every Push is lost after
// the slot applied it (the server answers Unavailable, as a broken
// connection would); the Client retries with the same push id and the
// gradient is applied once, in async and in sync mode.
func TestPushRetryAppliedOnce(t *testing.T) {
	for _, mode := range []pb.UpdateMode{pb.UpdateMode_UPDATE_MODE_ASYNC, pb.UpdateMode_UPDATE_MODE_SYNC} {
		t.Run(mode.String(), func(t *testing.T) {
			spec := &pb.JobSpec{Name: "j", Mode: mode, Seed: 1, DenseBlockSize: 4, NumVirtualShards: 4, NumPservers: 1,
				Optimizer: &pb.OptimizerSpec{Name: "sgd", LearningRate: 1},
				Params:    []*pb.ParamSpec{{Name: "w", Shape: []int64{8}, Init: pb.Initializer_INIT_ZEROS}}}
			var calls atomic.Int32
			lose := func(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
				resp, err := h(ctx, req)
				if info.FullMethod == pb.PServer_Push_FullMethodName && calls.Add(1) == 1 {
					return nil, status.Error(codes.Unavailable, "reply lost")
				}
				return resp, err
			}
			lis, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			gs := grpc.NewServer(append(wire.ServerOptions(), grpc.UnaryInterceptor(lose))...)
			srv := NewServer()
			s := mustSlot(t, spec, 0, 1)
			s.SetTrainers([]string{"t"})
			srv.Host("j", 0, s)
			pb.RegisterPServerServer(gs, srv)
			go gs.Serve(lis)
			defer gs.Stop()
			c, err := psclient.NewClient(spec, "t", psclient.StaticResolver{0: lis.Addr().String()}, psclient.WithRetries(3, time.Millisecond), psclient.WithStreamThreshold(-1))
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			if err := c.Pull(ctx, c.NewParams()); err != nil {
				t.Fatal(err)
			}
			if err := c.Push(ctx, &psclient.Grads{Dense: map[string][]float32{"w": ones(8, 1)}, Examples: 1}); err != nil {
				t.Fatal(err)
			}
			if n := calls.Load(); n != 2 {
				t.Fatalf("%d push calls, want 2 (the lost one and its retry)", n)
			}
			if s.Version() != 1 {
				t.Fatalf("version %d after one push retried once, want 1", s.Version())
			}
			for i, v := range pullAll(t, s)["w"] {
				if v != -1 {
					t.Fatalf("w[%d] = %v, want -1 (applied once)", i, v)
				}
			}
		})
	}
}

// TestPushIDsBounded: the push-id memory keeps pushIDWindow ids per trainer
// and maxPushIDTrainers trainers, whatever the number of pushes.
func TestPushIDsBounded(t *testing.T) {
	var p pushIDs
	for i := range uint64(3 * maxPushIDTrainers) {
		p.record(fmt.Sprint(i%(2*maxPushIDTrainers)), i+1, int64(i))
	}
	if n := len(p.by); n > maxPushIDTrainers || n < maxPushIDTrainers/2 {
		t.Fatalf("%d trainers remembered, want (%d, %d]", n, maxPushIDTrainers/2, maxPushIDTrainers)
	}
	if _, ok := p.lookup(fmt.Sprint((3*maxPushIDTrainers-1)%(2*maxPushIDTrainers)), 3*maxPushIDTrainers); !ok {
		t.Fatal("a recent trainer was forgotten")
	}
	for i := range uint64(10 * pushIDWindow) {
		p.record("x", 1_000_000+i, int64(i))
	}
	if _, ok := p.lookup("x", 1_000_000); ok {
		t.Fatal("oldest id still remembered past the window")
	}
	if v, ok := p.lookup("x", 1_000_000+10*pushIDWindow-1); !ok || v != 10*pushIDWindow-1 {
		t.Fatalf("newest id: %d, %v", v, ok)
	}
}

// TestCodecDecodeAllocationsBounded: whatever a push or pull message
// announces (a 1 GiB data field, 64k rows, thousands of empty tensors),
// decoding allocates at most a fixed multiple of its bytes: 128×, the cost
// of a 2-byte empty tensor entry decoded into a ~112-byte pb.Tensor (as
// proto.Unmarshal would).
func TestCodecDecodeAllocationsBounded(t *testing.T) {
	huge := protowire.AppendTag(nil, 6, protowire.BytesType) // grads
	huge = protowire.AppendVarint(huge, 20)
	huge = protowire.AppendTag(huge, 4, protowire.BytesType) // data
	huge = protowire.AppendVarint(huge, 1<<30)
	huge = append(huge, make([]byte, 16)...)
	rows := make([]byte, 0, 64<<10)
	for range 64 << 10 {
		rows = protowire.AppendVarint(rows, 1)
	}
	packedRows := protowire.AppendTag(nil, 6, protowire.BytesType)
	tensor := protowire.AppendTag(nil, 3, protowire.BytesType)
	tensor = protowire.AppendBytes(tensor, rows)
	packedRows = protowire.AppendBytes(packedRows, tensor)
	var empties []byte
	for range 4096 {
		empties = protowire.AppendTag(empties, 6, protowire.BytesType)
		empties = protowire.AppendVarint(empties, 0)
	}
	c := encoding.GetCodecV2(wire.TensorCodecName)
	for name, in := range map[string][]byte{"1 GiB data field": huge, "64k packed rows": packedRows, "4096 empty tensors": empties} {
		for _, m := range []any{&pb.PushRequest{}, &pb.PullResponse{}} {
			n := heapAlloc(func() { _ = c.Unmarshal(framesOf(in), m) })
			if lim := 128*uint64(len(in)) + 64<<10; n > lim {
				t.Errorf("%s into %T: %d bytes allocated for %d input bytes (limit %d)", name, m, n, len(in), lim)
			}
		}
	}
}

// TestSlotMemoryOfTrainersBounded: LeaveStep with ever new trainer names
// (the away set) and pushes with ever new trainer ids (push ids) cannot
// grow a slot without bound, and a huge trainer id is refused.
func TestSlotMemoryOfTrainersBounded(t *testing.T) {
	s := mustSlot(t, syncSpec(), 0, 1)
	s.SetTrainers([]string{"a"})
	for i := range 3 * maxAway {
		s.LeaveStep(fmt.Sprint("ghost-", i))
	}
	s.mu.RLock()
	n := len(s.away)
	s.mu.RUnlock()
	if n > maxAway+1 {
		t.Fatalf("%d trainers remembered as away, want at most %d", n, maxAway+1)
	}
	long := string(make([]byte, MaxTrainerIDLen+1))
	if _, err := pushW(context.Background(), s, long, 0, ones(10, 1), 1); !errors.Is(err, wire.ErrInvalid) {
		t.Fatalf("push with a %d-byte trainer id: %v", len(long), err)
	}
	srv := NewServer()
	srv.Host("job", 0, s)
	if _, err := srv.LeaveStep(context.Background(), &pb.LeaveStepRequest{Job: "job", Trainer: long}); status.Code(err) != codes.InvalidArgument {
		t.Fatalf("LeaveStep with a %d-byte trainer id: %v", len(long), err)
	}
}

// TestPushRowsLengthOverflow: len(rows)·dim overflowing int64 (2^18 rows of
// an embedding of dim 2^46) made the length check pass on empty data and
// the slicing of the gradient panic. Such an embedding is now refused by
// the layout (over jobspec.MaxJobBytes); at the bound (dim 2^34), 2^18 rows
// with no data are InvalidArgument.
func TestPushRowsLengthOverflow(t *testing.T) {
	huge := &pb.JobSpec{Name: "j", Mode: pb.UpdateMode_UPDATE_MODE_ASYNC, NumVirtualShards: 1,
		Params: []*pb.ParamSpec{{Name: "e", Shape: []int64{4, 1 << 46}, Embedding: true}}}
	if _, err := NewSlot(huge, 0, 1); !errors.Is(err, wire.ErrBadSpec) {
		t.Fatalf("NewSlot with an embedding of dim 2^46: %v, want wire.ErrBadSpec", err)
	}
	spec := &pb.JobSpec{Name: "j", Mode: pb.UpdateMode_UPDATE_MODE_ASYNC, NumVirtualShards: 1,
		Params: []*pb.ParamSpec{{Name: "e", Shape: []int64{1, 1 << 34}, Embedding: true}}}
	s := mustSlot(t, spec, 0, 1)
	rows := make([]int64, 1<<18)
	_, err := s.Push(context.Background(), &pb.PushRequest{Grads: []*pb.Tensor{{Name: "e", Rows: rows}}})
	if !errors.Is(err, wire.ErrInvalid) {
		t.Fatalf("push of 2^18 rows of dim 2^34 with no data: %v, want wire.ErrInvalid", err)
	}
	c, err := psclient.NewClient(spec, "t", psclient.StaticResolver{})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Push(context.Background(), &psclient.Grads{Sparse: map[string]psclient.SparseGrad{"e": {Rows: rows}}}); !errors.Is(err, wire.ErrInvalid) {
		t.Fatalf("client push: %v, want wire.ErrInvalid", err)
	}
	if _, err := c.PullRows(context.Background(), "e", rows); !errors.Is(err, wire.ErrInvalid) {
		t.Fatalf("client pull rows: %v, want wire.ErrInvalid", err)
	}
}

// TestLayoutRefusesJobsOverMaxJobBytes (issue 33, layout bound): a spec
// whose parameters and optimizer state exceed jobspec.MaxJobBytes (64 GiB),
// as a job accepted under older, looser bounds may hold, is ErrBadSpec
// from NewLayout naming the limit, and so from NewClient, RestoreSlot and
// NewSlot before they allocate anything; a spec at the limit has a layout.
// Before, NewLayout bounded only each tensor (2^48 elements) and a 128 GiB
// job was laid out and allocated.
func TestLayoutRefusesJobsOverMaxJobBytes(t *testing.T) {
	at := &pb.JobSpec{Name: "at", NumPservers: 1, Optimizer: &pb.OptimizerSpec{Name: "sgd"},
		Params: []*pb.ParamSpec{{Name: "w", Shape: []int64{1 << 33}}, {Name: "emb", Shape: []int64{1 << 27, 64}, Embedding: true}}}
	if _, err := wire.NewLayout(at, 1); err != nil {
		t.Fatalf("NewLayout of a 64 GiB job (the limit): %v", err)
	}
	for _, spec := range []*pb.JobSpec{
		// 2^35 float32 with sgd: 128 GiB.
		{Name: "dense", NumPservers: 4, Optimizer: &pb.OptimizerSpec{Name: "sgd"},
			Params: []*pb.ParamSpec{{Name: "w", Shape: []int64{1 << 35}}}},
		// 2^32 float32 embedding rows with Adam (x3): 48 GiB, plus a 2^31
		// dense tensor (x3): 24 GiB more, 72 GiB in all.
		{Name: "adam", NumPservers: 4, Optimizer: &pb.OptimizerSpec{Name: "adam"},
			Params: []*pb.ParamSpec{{Name: "emb", Shape: []int64{1 << 26, 64}, Embedding: true}, {Name: "w", Shape: []int64{1 << 31}}}},
	} {
		_, err := wire.NewLayout(spec, spec.NumPservers)
		if !errors.Is(err, wire.ErrBadSpec) || !strings.Contains(err.Error(), "MaxJobBytes") {
			t.Fatalf("NewLayout(%s) = %v, want wire.ErrBadSpec naming MaxJobBytes", spec.Name, err)
		}
		t.Logf("%s: %v", spec.Name, err)
		if _, err := psclient.NewClient(spec, "t", psclient.StaticResolver{}); !errors.Is(err, wire.ErrBadSpec) {
			t.Errorf("NewClient(%s) = %v, want wire.ErrBadSpec", spec.Name, err)
		}
		if _, err := RestoreSlot(spec, 0, spec.NumPservers, nil); !errors.Is(err, wire.ErrBadSpec) {
			t.Errorf("RestoreSlot(%s) = %v, want wire.ErrBadSpec", spec.Name, err)
		}
		if _, err := NewSlot(spec, 0, spec.NumPservers); !errors.Is(err, wire.ErrBadSpec) {
			t.Errorf("NewSlot(%s) = %v, want wire.ErrBadSpec", spec.Name, err)
		}
	}
}
