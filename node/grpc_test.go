package node

import (
	"context"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	pb "github.com/raftps/raftps/api/raftpspb"
	"github.com/raftps/raftps/gossip"
	"github.com/raftps/raftps/pserver"
)

func dial(t *testing.T, addr string) *grpc.ClientConn {
	t.Helper()
	cc, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.MaxCallSendMsgSize(1<<30), grpc.MaxCallRecvMsgSize(1<<30)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cc.Close() })
	return cc
}

// TestServiceClassLimits (issue 19): the client API refuses a 64 MiB KV
// put with ResourceExhausted before any handler runs (so before Raft: the
// key is never written), while the pserver data path accepts a push of the
// same size and applies it; each port refuses the services of the others
// with Unimplemented naming the ports. Before, one server with a 1 GiB
// limit served everything and the put reached the Raft log.
func TestServiceClassLimits(t *testing.T) {
	cfg := testConfig(t, "n1")
	cfg.Roles = []string{gossip.RoleServer, gossip.RolePServer}
	n := mustOpen(t, cfg)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	const size = 64 << 20
	kv := pb.NewKVClient(dial(t, n.GRPCAddr()))
	if _, err := kv.Put(ctx, &pb.PutRequest{Key: []byte("/small"), Value: []byte("ok")}); err != nil {
		t.Fatalf("small put: %v", err)
	}
	_, err := kv.Put(ctx, &pb.PutRequest{Key: []byte("/big"), Value: make([]byte, size)})
	if status.Code(err) != codes.ResourceExhausted || !strings.Contains(err.Error(), "larger than max") {
		t.Fatalf("64 MiB put on the client API: %v, want ResourceExhausted (message larger than max)", err)
	}
	t.Logf("64 MiB put: %v", err)
	rr, err := kv.Range(ctx, &pb.RangeRequest{Key: []byte("/big")})
	if err != nil || len(rr.Kvs) != 0 {
		t.Fatalf("after the refused put: %v %v, want no key", rr, err)
	}

	// The same size on the pserver data path: hosted slot, accepted, applied.
	spec := &pb.JobSpec{Name: "big", Mode: pb.UpdateMode_UPDATE_MODE_ASYNC, Seed: 1,
		DenseBlockSize: 1 << 20, NumVirtualShards: 1, Optimizer: &pb.OptimizerSpec{Name: "sgd", LearningRate: 0.1},
		Params: []*pb.ParamSpec{{Name: "w", Shape: []int64{size / 4}, Init: pb.Initializer_INIT_ZEROS}}}
	slot, err := pserver.NewSlot(spec, 0, 1)
	if err != nil {
		t.Fatal(err)
	}
	n.ps.Host("big", 0, slot)
	var grads []*pb.Tensor
	for b := int64(0); b < size/4/(1<<20); b++ {
		grads = append(grads, &pb.Tensor{Name: "w", Block: b, Data: make([]byte, 4<<20)})
	}
	push := &pb.PushRequest{Job: "big", Slot: 0, Trainer: "t1", Grads: grads, Examples: 1}
	ps := pb.NewPServerClient(dial(t, n.PServerAddr()))
	resp, err := ps.Push(ctx, push)
	if err != nil {
		t.Fatalf("64 MiB push on the pserver port: %v", err)
	}
	if resp.Version != 1 || slot.Version() != 1 {
		t.Fatalf("push applied: response version %d, slot version %d, want 1", resp.Version, slot.Version())
	}

	// Each port serves its class only.
	_, err = pb.NewPServerClient(dial(t, n.GRPCAddr())).Push(ctx, &pb.PushRequest{Job: "big"})
	if status.Code(err) != codes.Unimplemented || !strings.Contains(err.Error(), n.PServerAddr()) {
		t.Fatalf("push on the client port: %v, want Unimplemented naming the pserver port", err)
	}
	_, err = pb.NewKVClient(dial(t, n.PeerAddr())).Put(ctx, &pb.PutRequest{Key: []byte("/p"), Value: []byte("v")})
	if status.Code(err) != codes.Unimplemented || !strings.Contains(err.Error(), n.GRPCAddr()) {
		t.Fatalf("put on the node-to-node port: %v, want Unimplemented naming the client port", err)
	}
	_, err = pb.NewKVClient(dial(t, n.PServerAddr())).Put(ctx, &pb.PutRequest{Key: []byte("/p"), Value: make([]byte, size)})
	if status.Code(err) != codes.Unimplemented {
		t.Fatalf("64 MiB put on the pserver port: %v, want Unimplemented before the message is read", err)
	}
}
