package service

import (
	"context"
	"errors"
	"fmt"
	"net"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	pb "github.com/raftps/raftps/api/raftpspb"
	"github.com/raftps/raftps/api/rpctypes"
	"github.com/raftps/raftps/fsm"
	"github.com/raftps/raftps/raftstore"
)

// fakeLeader answers every Internal call with err.
type fakeLeader struct {
	pb.UnimplementedInternalServer
	err error
}

func (f fakeLeader) ForwardApply(context.Context, *pb.ForwardApplyRequest) (*pb.ForwardApplyResponse, error) {
	return nil, f.err
}
func (f fakeLeader) ForwardApplyBatch(_ context.Context, req *pb.ForwardApplyBatchRequest) (*pb.ForwardApplyBatchResponse, error) {
	out := make([]*pb.ForwardOutcome, len(req.Commands))
	for i := range out {
		out[i] = outcome(nil, f.err) // each command fails as ForwardApply would
	}
	return &pb.ForwardApplyBatchResponse{Outcomes: out}, nil
}
func (f fakeLeader) ReadIndex(context.Context, *pb.ReadIndexRequest) (*pb.ReadIndexResponse, error) {
	return nil, f.err
}
func (f fakeLeader) LeaseKeepAliveOnce(context.Context, *pb.LeaseKeepAliveRequest) (*pb.LeaseKeepAliveResponse, error) {
	return nil, f.err
}
func (f fakeLeader) LeaseTimeToLive(context.Context, *pb.LeaseTimeToLiveRequest) (*pb.LeaseTimeToLiveResponse, error) {
	return nil, f.err
}

// serveLeader serves fakeLeader{err} on loopback and returns its address.
func serveLeader(t *testing.T, err error) string {
	t.Helper()
	lis, lerr := net.Listen("tcp", "127.0.0.1:0")
	if lerr != nil {
		t.Fatal(lerr)
	}
	g := grpc.NewServer()
	pb.RegisterInternalServer(g, fakeLeader{err: err})
	go g.Serve(lis)
	t.Cleanup(g.Stop)
	return lis.Addr().String()
}

// deadAddr is a loopback address where nothing listens.
func deadAddr(t *testing.T) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := lis.Addr().String()
	lis.Close()
	return addr
}

// forwardAll makes each of the four forwarded calls to the leader at addr
// and returns their errors by name.
func forwardAll(t *testing.T, addr string) map[string]error {
	t.Helper()
	f := NewForwarder(func(string) (string, bool) { return addr, true })
	t.Cleanup(func() { f.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	cmd, err := fsm.NewCommand(pb.CommandType_COMMAND_PUT, &pb.PutRequest{Key: []byte("k")})
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]error{}
	_, out["ForwardApply"] = f.ForwardApply(ctx, "leader", "", cmd)
	_, out["ReadIndex"] = f.ReadIndex(ctx, "leader", "")
	_, out["LeaseKeepAlive"] = f.LeaseKeepAlive(ctx, "leader", "", 7)
	_, out["LeaseTimeToLive"] = f.LeaseTimeToLive(ctx, "leader", "", 7)
	return out
}

// TestForwarderMapsErrorsBack: every forwarded call maps the leader's
// status back to our sentinels (fromStatus), and only answers that prove
// nothing was applied become raftstore.ErrNotLeader (retried against the
// next leader). No grpc-go message text is matched.
func TestForwarderMapsErrorsBack(t *testing.T) {
	for _, tc := range []struct {
		name  string
		addr  func(t *testing.T) string
		want  error // errors.Is target; nil: no sentinel
		code  codes.Code
		retry bool
	}{
		{"leader lost leadership", func(t *testing.T) string {
			return serveLeader(t, rpctypes.ToStatus(fmt.Errorf("%w: stepped down", raftstore.ErrNotLeader)))
		}, raftstore.ErrNotLeader, codes.Unavailable, true},
		{"leader has no leader", func(t *testing.T) string {
			return serveLeader(t, rpctypes.ToStatus(raftstore.ErrNoLeader))
		}, raftstore.ErrNoLeader, codes.Unavailable, true},
		{"leader dead: nothing sent", deadAddr, raftstore.ErrNotLeader, codes.Unavailable, true},
		{"lease not found", func(t *testing.T) string {
			return serveLeader(t, rpctypes.ToStatus(fmt.Errorf("%w: 7", fsm.ErrLeaseNotFound)))
		}, fsm.ErrLeaseNotFound, codes.NotFound, false},
		{"lease not found from a peer without details", func(t *testing.T) string {
			return serveLeader(t, status.Error(codes.NotFound, "fsm: lease not found: 7"))
		}, fsm.ErrLeaseNotFound, codes.NotFound, false},
		{"invalid argument", func(t *testing.T) string {
			return serveLeader(t, rpctypes.ToStatus(fmt.Errorf("%w: empty key", fsm.ErrInvalid)))
		}, fsm.ErrInvalid, codes.InvalidArgument, false},
		{"unavailable after the call reached the leader: outcome unknown", func(t *testing.T) string {
			return serveLeader(t, status.Error(codes.Unavailable, "raft: leadership lost while committing log"))
		}, nil, codes.Unavailable, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for call, err := range forwardAll(t, tc.addr(t)) {
				if err == nil {
					t.Fatalf("%s: no error", call)
				}
				if got := errors.Is(err, raftstore.ErrNotLeader); got != tc.retry {
					t.Errorf("%s: retried as not leader = %v, want %v (err %v)", call, got, tc.retry, err)
				}
				if tc.want != nil && !errors.Is(err, tc.want) {
					t.Errorf("%s: %v does not wrap %v", call, err, tc.want)
				}
				if errors.Is(err, fsm.ErrLeaseNotFound) != (tc.want == fsm.ErrLeaseNotFound) {
					t.Errorf("%s: %v: lease-not-found mismatch", call, err)
				}
				if c := status.Code(err); c != tc.code {
					t.Errorf("%s: code %v, want %v", call, c, tc.code)
				}
			}
		})
	}
}
