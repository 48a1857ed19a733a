package raftstore_test

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"time"

	pb "github.com/raftps/raftps/api/raftpspb"
	"github.com/raftps/raftps/fsm"
	"github.com/raftps/raftps/raftstore"
)

// A single server bootstraps its own cluster, writes a key and reads it
// back linearizably.
func Example() {
	dir, _ := os.MkdirTemp("", "raftstore-example")
	defer os.RemoveAll(dir)

	cfg := raftstore.DefaultConfig()
	cfg.ID, cfg.DataDir, cfg.RaftAddr = "n1", dir, "127.0.0.1:0"
	cfg.Bootstrap = true
	cfg.Logger = slog.New(slog.DiscardHandler)
	s, err := raftstore.New(cfg, fsm.New(nil), nil)
	if err != nil {
		fmt.Println(err)
		return
	}
	if err := s.Open(); err != nil {
		fmt.Println(err)
		return
	}
	defer s.Close()

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cmd, _ := fsm.NewCommand(pb.CommandType_COMMAND_PUT, &pb.PutRequest{Key: []byte("/jobs/mnist/spec"), Value: []byte("mlp")})
	if _, err := s.Apply(ctx, cmd); err != nil { // waits for the election
		fmt.Println(err)
		return
	}
	resp, err := s.Range(ctx, &pb.RangeRequest{Key: []byte("/jobs/mnist/spec")})
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Printf("%s = %s\n", resp.Kvs[0].Key, resp.Kvs[0].Value)
	// Output: /jobs/mnist/spec = mlp
}
