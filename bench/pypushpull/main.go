package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"strings"
	"syscall"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	pb "github.com/raftps/raftps/api/raftpspb"
	"github.com/raftps/raftps/pserver/psclient"
)

func main() {
	endpoints := flag.String("endpoints", "127.0.0.1:7000", "a node's gRPC address")
	job := flag.String("job", "", "job name")
	iters := flag.Int("iters", 5, "push+pull rounds timed")
	flag.Parse()
	if err := run(strings.Split(*endpoints, ",")[0], *job, *iters); err != nil {
		fmt.Fprintln(os.Stderr, "pypushpull:", err)
		os.Exit(1)
	}
}

func run(endpoint, job string, iters int) error {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	cc, err := grpc.NewClient(endpoint, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return err
	}
	defer cc.Close()
	st, err := pb.NewMasterClient(cc).GetJob(ctx, &pb.GetJobRequest{Name: job})
	if err != nil {
		return err
	}
	slots := psclient.StaticResolver{}
	for _, p := range st.GetStatus().GetPservers() {
		slots[p.GetIndex()] = p.GetAddr()
	}
	c, err := psclient.NewClient(st.GetStatus().GetSpec(), "go-bench", slots)
	if err != nil {
		return err
	}
	defer c.Close()
	params := c.NewParams()
	if err := c.Pull(ctx, params); err != nil {
		return err
	}
	grads := map[string][]float32{}
	var n int
	for k, v := range params {
		grads[k] = make([]float32, len(v))
		n += len(v)
	}
	cpu0, err := cpuSeconds()
	if err != nil {
		return err
	}
	start := time.Now()
	for range iters {
		if err := c.Push(ctx, &psclient.Grads{Dense: grads, Examples: 1}); err != nil {
			return err
		}
		if err := c.Pull(ctx, params); err != nil {
			return err
		}
	}
	s := time.Since(start).Seconds()
	cpu1, err := cpuSeconds()
	if err != nil {
		return err
	}
	return json.NewEncoder(os.Stdout).Encode(map[string]any{
		"mb_per_s": float64(2*4*n*iters) / 1e6 / s, "params": n, "iters": iters, "seconds": s,
		"cpu_seconds": cpu1 - cpu0})
}

// cpuSeconds is the user+system CPU time this process has used (all its
// threads), in seconds.
func cpuSeconds() (float64, error) {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0, fmt.Errorf("getrusage: %w", err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano()).Seconds(), nil
}
