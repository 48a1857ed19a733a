package pserver

import (
	"context"
	"fmt"
	"sync"
	"testing"

	pb "github.com/raftps/raftps/api/raftpspb"
	"github.com/raftps/raftps/pserver/psclient"
	"github.com/raftps/raftps/pserver/wire"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

// TestLentReplyBuffers: whole-slot replies reuse pooled buffers, and a
// buffer goes back to the pool only after its reply is on the wire. Four
// trainers push and pull concurrently (async SGD, lr 2^-10, every gradient
// 1, zero init), so every reply of version v must hold exactly -v/1024 in
// every element: a buffer returned early and refilled for another reply
// would show another version's values. No lent entry may be left behind.
func TestLentReplyBuffers(t *testing.T) {
	const n = 3 * wire.MinPooled / 4 // float32s: a 192 KiB reply
	spec := &pb.JobSpec{Name: "j", Mode: pb.UpdateMode_UPDATE_MODE_ASYNC, NumPservers: 1,
		Optimizer: &pb.OptimizerSpec{Name: "sgd", LearningRate: 1.0 / 1024},
		Params:    []*pb.ParamSpec{{Name: "w", Shape: []int64{n}}}}
	addrs, _, _ := startServers(t, spec, 1)
	before, _ := wire.LentBuffers()
	const trainers, steps = 4, 50
	var wg sync.WaitGroup
	for i := range trainers {
		c, err := psclient.NewClient(spec, fmt.Sprint("t", i), resolverOf(addrs))
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		wg.Add(1)
		go func() {
			defer wg.Done()
			ones := make([]float32, n)
			for j := range ones {
				ones[j] = 1
			}
			dst := c.NewParams()
			for range steps {
				if err := c.PushPull(context.Background(), &psclient.Grads{Dense: map[string][]float32{"w": ones}, Examples: 1}, dst); err != nil {
					t.Error(err)
					return
				}
				want := -float32(c.Versions()[0]) / 1024
				for j, x := range dst["w"] {
					if x != want {
						t.Errorf("version %d: w[%d] = %g, want %g", c.Versions()[0], j, x, want)
						return
					}
				}
			}
		}()
	}
	wg.Wait()
	returned, left := wire.LentBuffers()
	if got := returned - before; got < trainers*steps/2 {
		t.Errorf("%d reply buffers returned to the pool after %d pushes with pull, want most of them", got, trainers*steps)
	}
	if left != 0 {
		t.Errorf("%d lent buffers never taken back", left)
	}
}

// TestLentReplyBuffersProtobufClient: a client that asks for no codec (the
// default protobuf codec, as Python's grpcio, which cannot send a
// content-subtype) is served by the tensor codec too (wire.ServerOptions
// forces it): its whole-slot pull replies reuse pooled buffers (they were
// model-sized allocations per call) and read back as protobuf.
func TestLentReplyBuffersProtobufClient(t *testing.T) {
	const n = 3 * wire.MinPooled / 4
	spec := &pb.JobSpec{Name: "j", Mode: pb.UpdateMode_UPDATE_MODE_ASYNC, NumPservers: 1,
		Optimizer: &pb.OptimizerSpec{Name: "sgd", LearningRate: 1},
		Params:    []*pb.ParamSpec{{Name: "w", Shape: []int64{n}}}}
	addrs, _, slots := startServers(t, spec, 1)
	cc, err := grpc.NewClient(addrs[0], grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(wire.MaxMessageSize)))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	before, _ := wire.LentBuffers()
	const pulls = 20
	for range pulls {
		resp, err := pb.NewPServerClient(cc).Pull(context.Background(), &pb.PullRequest{Job: "j", Slot: 0})
		if err != nil {
			t.Fatal(err)
		}
		if len(resp.GetTensors()) != 1 || len(resp.GetTensors()[0].GetData()) != 4*n || resp.GetIncarnation() != slots[0].incarnation {
			t.Fatalf("pull reply: %d tensors, incarnation %d, want 1 of %d bytes at incarnation %d",
				len(resp.GetTensors()), resp.GetIncarnation(), 4*n, slots[0].incarnation)
		}
	}
	returned, left := wire.LentBuffers()
	if got := returned - before; got < pulls/2 {
		t.Errorf("%d of %d protobuf-codec pull replies returned their buffer to the pool, want most", got, pulls)
	}
	if left != 0 {
		t.Errorf("%d lent buffers never taken back", left)
	}
}
