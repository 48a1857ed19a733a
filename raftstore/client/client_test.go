package client

import (
	"context"
	"net"
	"testing"
	"time"

	"google.golang.org/grpc"

	pb "github.com/raftps/raftps/api/raftpspb"
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
