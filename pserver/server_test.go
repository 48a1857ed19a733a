package pserver

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	pb "github.com/raftps/raftps/api/raftpspb"
	"github.com/raftps/raftps/pserver/psclient"
	"github.com/raftps/raftps/pserver/wire"
)

func TestServerUnhostedIsUnavailable(t *testing.T) {
	srv := NewServer()
	_, err := srv.Push(context.Background(), &pb.PushRequest{Job: "j", Slot: 0})
	if status.Code(err) != codes.Unavailable {
		t.Fatalf("unknown slot: %v", err)
	}
	s := mustSlot(t, syncSpec(), 0, 1)
	srv.Host("job", 0, s)
	if _, err := srv.Pull(context.Background(), &pb.PullRequest{Job: "job"}); err != nil {
		t.Fatal(err)
	}
	if got := srv.Unhost("job", 0); got != s || !s.Fenced() {
		t.Fatal("Unhost did not return and fence the slot")
	}
	if _, err := srv.Pull(context.Background(), &pb.PullRequest{Job: "job"}); status.Code(err) != codes.Unavailable {
		t.Fatalf("after Unhost: %v", err)
	}
}

// movingResolver points at a stale address first, then at the live one.
type movingResolver struct {
	calls       atomic.Int32
	stale, live string
}

func (r *movingResolver) Slots(context.Context, string) (map[int32]string, error) {
	if r.calls.Add(1) == 1 {
		return map[int32]string{0: r.stale}, nil
	}
	return map[int32]string{0: r.live}, nil
}

// TestClientReResolves: a fenced slot answers Unavailable; the client
// re-resolves and reaches the new owner.
func TestClientReResolves(t *testing.T) {
	spec := syncSpec()
	spec.Mode = pb.UpdateMode_UPDATE_MODE_ASYNC
	oldAddrs, _, oldSlots := startServers(t, spec, 1)
	oldSlots[0].Fence()
	newAddrs, _, newSlots := startServers(t, spec, 1)
	r := &movingResolver{stale: oldAddrs[0], live: newAddrs[0]}
	c, err := psclient.NewClient(spec, "t", r, psclient.WithRetries(5, time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx := context.Background()
	params := c.NewParams()
	if err := c.Pull(ctx, params); err != nil {
		t.Fatal(err)
	}
	if err := c.Push(ctx, &psclient.Grads{Dense: map[string][]float32{"w": ones(10, 1)}}); err != nil {
		t.Fatal(err)
	}
	if newSlots[0].Version() != 1 || r.calls.Load() < 2 {
		t.Fatalf("version %d after %d resolves", newSlots[0].Version(), r.calls.Load())
	}
	// Client-side errors map back to sentinels.
	err = c.Push(ctx, &psclient.Grads{Dense: map[string][]float32{"w": ones(3, 1)}})
	if !errors.Is(err, wire.ErrInvalid) {
		t.Fatalf("bad length: %v", err)
	}
}

// TestClientStreamsAndRows: PullStream/PushStream (forced by a tiny
// threshold) and sparse rows over two pservers.
func TestClientStreamsAndRows(t *testing.T) {
	spec := &pb.JobSpec{Name: "s", Mode: pb.UpdateMode_UPDATE_MODE_ASYNC, Seed: 5, DenseBlockSize: 1000, NumPservers: 2,
		Optimizer: &pb.OptimizerSpec{Name: "sgd", LearningRate: 1},
		Params: []*pb.ParamSpec{{Name: "big", Shape: []int64{300_000}, Init: pb.Initializer_INIT_UNIFORM},
			{Name: "emb", Shape: []int64{1000, 8}, Embedding: true, Init: pb.Initializer_INIT_NORMAL}}}
	addrs, _, slots := startServers(t, spec, 2)
	for _, thr := range []int{-1, 10_000} {
		c, err := psclient.NewClient(spec, "t", resolverOf(addrs), psclient.WithStreamThreshold(thr))
		if err != nil {
			t.Fatal(err)
		}
		ctx := context.Background()
		params := c.NewParams()
		if err := c.Pull(ctx, params); err != nil {
			t.Fatal(err)
		}
		want := pullAll(t, slots...)["big"]
		for i := range want {
			if params["big"][i] != want[i] {
				t.Fatalf("threshold %d: big[%d] = %v, want %v", thr, i, params["big"][i], want[i])
			}
		}
		if err := c.Push(ctx, &psclient.Grads{Dense: map[string][]float32{"big": ones(300_000, 0.5)}}); err != nil {
			t.Fatal(err)
		}
		after := pullAll(t, slots...)["big"]
		for i := range want {
			if after[i] != want[i]-0.5 {
				t.Fatalf("after push big[%d] = %v, want %v", i, after[i], want[i]-0.5)
			}
		}
		rows := []int64{3, 999, 3, 0, 512}
		v1, err := c.PullRows(ctx, "emb", rows)
		if err != nil {
			t.Fatal(err)
		}
		g := make([]float32, 8*len(rows))
		for i := range g {
			g[i] = 1
		}
		if err := c.PushRows(ctx, "emb", rows, g, 1); err != nil {
			t.Fatal(err)
		}
		v2, err := c.PullRows(ctx, "emb", rows)
		if err != nil {
			t.Fatal(err)
		}
		for j, r := range rows {
			dup := 1.0
			if r == 3 {
				dup = 2 // row 3 appears twice: gradients sum
			}
			for k := range 8 {
				if d := float64(v1[j*8+k]-v2[j*8+k]) - dup; d > 1e-6 || d < -1e-6 {
					t.Fatalf("row %d: %v -> %v", r, v1[j*8+k], v2[j*8+k])
				}
			}
		}
		c.Close()
	}
}

func TestServerOnRealListener(t *testing.T) {
	// LeaveStep over gRPC completes a sync step.
	spec := syncSpec()
	addrs, _, slots := startServers(t, spec, 1)
	slots[0].SetTrainers([]string{"a", "b"})
	ca, _ := psclient.NewClient(spec, "a", resolverOf(addrs))
	cb, _ := psclient.NewClient(spec, "b", resolverOf(addrs))
	defer ca.Close()
	defer cb.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	done := make(chan error, 1)
	go func() {
		done <- ca.Push(ctx, &psclient.Grads{Dense: map[string][]float32{"w": ones(10, 1)}, Examples: 1})
	}()
	time.Sleep(50 * time.Millisecond)
	if err := cb.LeaveStep(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// watchResolver pushes a new slot map on demand.
type watchResolver struct {
	psclient.StaticResolver
	ch chan map[int32]string
}

func (w *watchResolver) WatchSlots(ctx context.Context, job string) (<-chan map[int32]string, error) {
	out := make(chan map[int32]string)
	go func() {
		defer close(out)
		for {
			select {
			case m := <-w.ch:
				out <- m
			case <-ctx.Done():
				return
			}
		}
	}()
	return out, nil
}

func TestClientFollowsWatch(t *testing.T) {
	spec := syncSpec()
	spec.Mode = pb.UpdateMode_UPDATE_MODE_ASYNC
	a, _, slotsA := startServers(t, spec, 1)
	b, _, slotsB := startServers(t, spec, 1)
	w := &watchResolver{StaticResolver: resolverOf(a), ch: make(chan map[int32]string)}
	c, err := psclient.NewClient(spec, "t", w)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx := context.Background()
	g := &psclient.Grads{Dense: map[string][]float32{"w": ones(10, 1)}}
	if err := c.Push(ctx, g); err != nil {
		t.Fatal(err)
	}
	w.ch <- map[int32]string{0: b[0]}
	deadline := time.Now().Add(5 * time.Second)
	for slotsB[0].Version() == 0 && time.Now().Before(deadline) {
		if err := c.Push(ctx, g); err != nil {
			t.Fatal(err)
		}
	}
	if slotsB[0].Version() == 0 || slotsA[0].Fenced() {
		t.Fatalf("client did not follow the watch (A %d, B %d)", slotsA[0].Version(), slotsB[0].Version())
	}
}
