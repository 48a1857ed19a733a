package pserver

import (
	"context"
	"errors"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	pb "github.com/raftps/raftps/api/raftpspb"
	"github.com/raftps/raftps/pserver/psclient"
	"github.com/raftps/raftps/pserver/wire"
)

// countingServer counts Pull and PullStream calls; with old set it answers Push as a
// pserver that predates PushRequest.pull (no tensors in the reply).
type countingServer struct {
	*Server
	old   bool
	pulls atomic.Int32
}

func (s *countingServer) Pull(ctx context.Context, req *pb.PullRequest) (*pb.PullResponse, error) {
	s.pulls.Add(1)
	return s.Server.Pull(ctx, req)
}

func (s *countingServer) PullStream(stream pb.PServer_PullStreamServer) error {
	s.pulls.Add(1)
	return s.Server.PullStream(stream)
}

func (s *countingServer) Push(ctx context.Context, req *pb.PushRequest) (*pb.PushResponse, error) {
	resp, err := s.Server.Push(ctx, req)
	if s.old && resp != nil {
		resp = &pb.PushResponse{Version: resp.GetVersion()}
	}
	return resp, err
}

// TestClientPushPull: PushPull leaves dst and the client's versions as
// Push then Pull would, over two sync pservers, for unary slots (one
// round trip: no Pull call), streamed slots, pservers that predate the
// pull field and slots too large for a push's reply (all pull after the
// push).
func TestClientPushPull(t *testing.T) {
	for _, tc := range []struct {
		name      string
		old       bool
		threshold int
		wantPulls int32 // Pull or PullStream calls per slot per PushPull
		replyMax  int   // Slot.maxReplyBytes (0: NewSlot's)
	}{{"unary", false, -1, 0, 0}, {"stream", false, 4, 1, 0}, {"old-pserver", true, -1, 1, 0},
		{"too-large-for-reply", false, -1, 1, 16}} {
		t.Run(tc.name, func(t *testing.T) {
			spec := syncSpec()
			spec.NumPservers = 2
			spec.Params = append(spec.Params, &pb.ParamSpec{Name: "b", Shape: []int64{3, 5}, Init: pb.Initializer_INIT_UNIFORM})
			var addrs []string
			var srvs []*countingServer
			var slots []*Slot
			for i := range int32(2) {
				s := mustSlot(t, spec, i, 2)
				s.SetTrainers([]string{"t"})
				if tc.replyMax > 0 {
					s.maxReplyBytes = tc.replyMax
				}
				srv := &countingServer{Server: NewServer(), old: tc.old}
				srv.Host(spec.GetName(), i, s)
				gs := grpc.NewServer(wire.ServerOptions()...)
				pb.RegisterPServerServer(gs, srv)
				lis, err := net.Listen("tcp", "127.0.0.1:0")
				if err != nil {
					t.Fatal(err)
				}
				go gs.Serve(lis)
				t.Cleanup(gs.Stop)
				addrs, srvs, slots = append(addrs, lis.Addr().String()), append(srvs, srv), append(slots, s)
			}
			c, err := psclient.NewClient(spec, "t", resolverOf(addrs), psclient.WithStreamThreshold(tc.threshold))
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			ctx := context.Background()
			params := map[string][]float32{} // PushPull allocates what is missing
			for step := range 3 {
				g := &psclient.Grads{Dense: map[string][]float32{"w": ones(10, float32(step+1)), "b": ones(15, -1)}, Examples: 2}
				before := [2]int32{srvs[0].pulls.Load(), srvs[1].pulls.Load()}
				if err := c.PushPull(ctx, g, params); err != nil {
					t.Fatal(err)
				}
				want := pullAll(t, slots...)
				for name, w := range want {
					for i := range w {
						if params[name][i] != w[i] {
							t.Fatalf("step %d: %s[%d] = %v, want %v (a Pull's)", step, name, i, params[name][i], w[i])
						}
					}
				}
				for i, s := range slots {
					if got := c.Versions()[i]; got != s.Version() || got != int64(step+1) {
						t.Fatalf("step %d: client has slot %d at version %d, slot is at %d, want %d", step, i, got, s.Version(), step+1)
					}
					if n := srvs[i].pulls.Load() - before[i]; n != tc.wantPulls {
						t.Fatalf("step %d: slot %d got %d pulls, want %d", step, i, n, tc.wantPulls)
					}
				}
			}
		})
	}
}

// TestSlotPushWithPull: a push with pull answers what a Pull right after
// it returns (version, incarnation, every dense block); without pull the
// reply carries no tensors.
func TestSlotPushWithPull(t *testing.T) {
	s := mustSlot(t, syncSpec(), 0, 1)
	s.SetTrainers([]string{"a"})
	ctx := context.Background()
	for step, pull := range []bool{true, false} {
		req := &pb.PushRequest{Trainer: "a", Step: int64(step), Version: int64(step), Examples: 1, Pull: pull,
			Grads: denseTensors(s.Layout(), s.Index(), map[string][]float32{"w": ones(10, 1)})}
		resp, err := s.Push(ctx, req)
		if err != nil {
			t.Fatal(err)
		}
		pr, err := s.Pull(ctx, &pb.PullRequest{})
		if err != nil {
			t.Fatal(err)
		}
		if !pull {
			if len(resp.GetTensors()) != 0 || resp.GetVersion() != pr.GetVersion() {
				t.Fatalf("push without pull: %d tensors, version %d (slot at %d)", len(resp.GetTensors()), resp.GetVersion(), pr.GetVersion())
			}
			continue
		}
		got := &pb.PullResponse{Version: resp.GetVersion(), Incarnation: resp.GetIncarnation(), Tensors: resp.GetTensors()}
		if !proto.Equal(got, pr) {
			t.Fatalf("push with pull answered\n%v\na Pull after it\n%v", got, pr)
		}
	}
}

// TestSyncPushOfAnotherIncarnation: a sync push computed on another
// incarnation of the slot (a retry after the slot was restored elsewhere or
// rolled back) is stale at once instead of joining the new life's step: its
// trainer may have moved past that step on the other slots, and joining
// would make it and another trainer wait for each other on two slots.
// Incarnation 0 (a client that does not send it) is not checked. Over gRPC,
// the Client sends the incarnation it pulled, so after the slot is
// replaced its push is refused as stale, and after a re-pull it applies.
func TestSyncPushOfAnotherIncarnation(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	s := mustSlot(t, syncSpec(), 0, 1)
	s.SetIncarnation(3)
	s.SetTrainers([]string{"a", "b"})
	push := func(trainer string, inc int64) error {
		_, err := s.Push(ctx, &pb.PushRequest{Trainer: trainer, Step: 0, Incarnation: inc, Examples: 1,
			Grads: denseTensors(s.Layout(), 0, map[string][]float32{"w": ones(10, 1)})})
		return err
	}
	if err := push("b", 1); !errors.Is(err, wire.ErrStale) || status.Code(err) != codes.FailedPrecondition {
		t.Fatalf("push of incarnation 1 to incarnation 3: %v, want wire.ErrStale (FailedPrecondition)", err)
	}
	if w, ok := s.Waiting(); ok {
		t.Fatalf("the refused push opened the step: %+v", w)
	}
	done := make(chan error, 1)
	go func() { done <- push("a", 3) }()
	waitPushed(t, s, "a")
	if err := push("b", 0); err != nil { // unchecked: joins and completes the step
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if s.Step() != 1 {
		t.Fatalf("step %d, want 1", s.Step())
	}

	// Over gRPC: the client's pushes carry the incarnation of its pull,
	// in a unary Push and in the first message of a PushStream alike.
	for _, streamed := range []bool{false, true} {
		t.Run(map[bool]string{false: "unary", true: "stream"}[streamed], func(t *testing.T) {
			pushReplacedSlot(ctx, t, streamed)
		})
	}
}

// pushReplacedSlot is TestSyncPushOfAnotherIncarnation over gRPC: a
// client's push after its slot was replaced by a new life at the same step
// is stale, and applies after a re-pull; streamed sends every push on
// PushStream (a 0-byte stream threshold).
func pushReplacedSlot(ctx context.Context, t *testing.T, streamed bool) {
	spec := syncSpec()
	addrs, srvs, slots := startServers(t, spec, 1)
	slots[0].SetIncarnation(5)
	slots[0].SetTrainers([]string{"t"})
	var opts []psclient.ClientOption
	if streamed {
		opts = append(opts, psclient.WithStreamThreshold(0))
	}
	c, err := psclient.NewClient(spec, "t", resolverOf(addrs), opts...)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	dst := c.NewParams()
	if err := c.Pull(ctx, dst); err != nil {
		t.Fatal(err)
	}
	g := &psclient.Grads{Dense: map[string][]float32{"w": ones(10, 1)}, Examples: 1}
	if err := c.Push(ctx, g); err != nil {
		t.Fatal(err)
	}
	// Restored elsewhere, steps restart; the new life reaches the client's
	// step 1 too, so only the incarnation tells them apart.
	fresh := mustSlot(t, spec, 0, 1)
	fresh.SetIncarnation(9)
	fresh.SetTrainers([]string{"t"})
	first := &pb.PushRequest{Job: spec.GetName(), Trainer: "t", Incarnation: 9, Examples: 1,
		Grads: denseTensors(fresh.Layout(), 0, map[string][]float32{"w": ones(10, 1)})}
	if _, err := fresh.Push(ctx, first); err != nil || fresh.Step() != 1 {
		t.Fatalf("the new life's first step: %v (step %d)", err, fresh.Step())
	}
	srvs[0].Host(spec.GetName(), 0, fresh)
	if err := c.Push(ctx, g); !errors.Is(err, wire.ErrStale) {
		t.Fatalf("push after the slot was replaced: %v, want wire.ErrStale", err)
	}
	if fresh.Step() != 1 {
		t.Fatalf("the stale push was applied (step %d)", fresh.Step())
	}
	if err := c.Pull(ctx, dst); err != nil {
		t.Fatal(err)
	}
	if err := c.Push(ctx, g); err != nil {
		t.Fatalf("push after a re-pull: %v", err)
	}
	if fresh.Step() != 2 {
		t.Fatalf("step %d after the re-pulled push, want 2", fresh.Step())
	}
}
