package client

import (
	"context"
	"fmt"
	"net"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	pb "github.com/raftps/raftps/api/raftpspb"
	"github.com/raftps/raftps/api/rpctypes"
)

type statusServer struct {
	pb.UnimplementedClusterServer
}

func (statusServer) Status(context.Context, *pb.StatusRequest) (*pb.StatusResponse, error) {
	return &pb.StatusResponse{Id: "up"}, nil
}

// TestDeadEndpointIsSkipped: with one endpoint refusing connections, every
// call still reaches the live one (the CLI's --endpoints promise).
func TestDeadEndpointIsSkipped(t *testing.T) {
	dead, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	deadAddr := dead.Addr().String()
	dead.Close() // nothing listens there now: connection refused

	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	g := grpc.NewServer()
	pb.RegisterClusterServer(g, statusServer{})
	go g.Serve(lis)
	defer g.Stop()

	// Like the CLI: a fresh client per call, so the first RPC races the
	// dead endpoint's immediate refusal against the live one's connect.
	for i := 0; i < 50; i++ {
		c, err := New([]string{deadAddr, lis.Addr().String()})
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		st, err := c.Cluster.Status(ctx, &pb.StatusRequest{})
		cancel()
		c.Close()
		if err != nil || st.Id != "up" {
			t.Fatalf("call %d: %v %v", i, st, err)
		}
	}
}

func TestNoEndpoints(t *testing.T) {
	if _, err := New([]string{" ", ""}); err != ErrNoEndpoints {
		t.Fatalf("New with no endpoints: %v, want ErrNoEndpoints", err)
	}
}

// seqServer records the request ids Status calls carry and fails the
// calls whose number (from 1) is in failAt with Unavailable.
type seqServer struct {
	pb.UnimplementedClusterServer
	mu     sync.Mutex
	ids    []rpctypes.RequestID
	failAt map[int]bool
}

func (s *seqServer) Status(ctx context.Context, _ *pb.StatusRequest) (*pb.StatusResponse, error) {
	ctx, err := rpctypes.IncomingRequestID(ctx)
	if err != nil {
		return nil, rpctypes.ToStatus(err)
	}
	id, _ := rpctypes.RequestIDFrom(ctx)
	s.mu.Lock()
	defer s.mu.Unlock()
	s.ids = append(s.ids, id)
	if s.failAt[len(s.ids)] {
		return nil, status.Error(codes.Unavailable, "try again")
	}
	return &pb.StatusResponse{Id: "up"}, nil
}

// TestRequestIDs: every call carries the client's id and a new sequence
// number; Retry reuses the numbers of its calls (k-th call of a method,
// per attempt) across attempts; acked rises once calls are settled.
func TestRequestIDs(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	// Calls: 1 plain; attempt 1: 2 ok, 3 fails; attempt 2: 4 fails;
	// attempt 3: 5, 6 ok; 7 plain.
	srv := &seqServer{failAt: map[int]bool{3: true, 4: true}}
	g := grpc.NewServer()
	pb.RegisterClusterServer(g, srv)
	go g.Serve(lis)
	defer g.Stop()
	c, err := New([]string{lis.Addr().String()})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	if _, err := c.Cluster.Status(ctx, &pb.StatusRequest{}); err != nil {
		t.Fatal(err)
	}
	if err := Retry(ctx, func(ctx context.Context) error {
		for range 2 {
			if _, err := c.Cluster.Status(ctx, &pb.StatusRequest{}); err != nil {
				return err
			}
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Cluster.Status(ctx, &pb.StatusRequest{}); err != nil {
		t.Fatal(err)
	}
	srv.mu.Lock()
	ids := append([]rpctypes.RequestID(nil), srv.ids...)
	srv.mu.Unlock()
	var seqs []uint64
	for _, id := range ids {
		if id.Client != c.ID() || id.Client == "" {
			t.Fatalf("request id %+v does not carry the client id %q", id, c.ID())
		}
		seqs = append(seqs, id.Seq)
	}
	want := []uint64{1, 2, 3, 2, 2, 3, 4}
	if fmt.Sprint(seqs) != fmt.Sprint(want) {
		t.Fatalf("sequence numbers %v, want %v", seqs, want)
	}
	if a := ids[len(ids)-1].Acked; a != 4 {
		t.Fatalf("acked %d on the last call, want 4 (1-3 settled)", a)
	}
	if a := ids[1].Acked; a != 2 {
		t.Fatalf("acked %d inside Retry, want 2", a)
	}
}
