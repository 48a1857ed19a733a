package pserver

import (
	"context"
	"net"
	"sync/atomic"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"

	pb "github.com/raftps/raftps/api/raftpspb"
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
				gs := grpc.NewServer(ServerOptions()...)
				pb.RegisterPServerServer(gs, srv)
				lis, err := net.Listen("tcp", "127.0.0.1:0")
				if err != nil {
					t.Fatal(err)
				}
				go gs.Serve(lis)
				t.Cleanup(gs.Stop)
				addrs, srvs, slots = append(addrs, lis.Addr().String()), append(srvs, srv), append(slots, s)
			}
			c, err := NewClient(spec, "t", resolverOf(addrs), WithStreamThreshold(tc.threshold))
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			ctx := context.Background()
			params := map[string][]float32{} // PushPull allocates what is missing
			for step := range 3 {
				g := &Grads{Dense: map[string][]float32{"w": ones(10, float32(step+1)), "b": ones(15, -1)}, Examples: 2}
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
