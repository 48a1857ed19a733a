package replica_test

import (
	"context"
	"errors"
	"net"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	pb "github.com/raftps/raftps/api/raftpspb"
	"github.com/raftps/raftps/pserver/replica"
)

// serve starts a Replica service on loopback holding b and returns a
// client connection to it.
func serve(t *testing.T, b *replica.Backup) pb.ReplicaClient {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gs := grpc.NewServer()
	svc := replica.NewService()
	svc.Add("rep", b)
	pb.RegisterReplicaServer(gs, svc)
	go gs.Serve(lis)
	t.Cleanup(gs.Stop)
	cc, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cc.Close() })
	return pb.NewReplicaClient(cc)
}

// TestStreamOverGRPC: updates replicated over the Replicate stream,
// concurrently and out of order, leave the backup byte-identical to the
// primary; once the backup knows a newer epoch, the primary's next update
// ends the stream FailedPrecondition, recognized as ErrStaleEpoch (the
// primary learns it was deposed), and is not applied.
func TestStreamOverGRPC(t *testing.T) {
	spec := testSpec(pb.UpdateMode_UPDATE_MODE_ASYNC, optimizers[3])
	p, _ := primaryAndUpdates(t, spec, 10)
	us := primaryUpdates(t, spec, 12) // the same first 10 (same seed)
	b := replica.NewBackup("rep", mustSlot(t, spec), 1)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	st, err := replica.NewStream(ctx, serve(t, b))
	if err != nil {
		t.Fatal(err)
	}
	r := replica.NewReplicator(1, map[string]replica.Peer{"n2": st})
	replicateAll(t, r, us[:10])
	assertSame(t, p, b.Slot(), "backup")
	// The backup learns a newer epoch.
	b.SetEpoch(2)
	err = r.Replicate(ctx, us[10])
	var be *replica.BackupError
	if !errors.As(err, &be) || !be.Deposed() || status.Code(err) != codes.FailedPrecondition ||
		!strings.Contains(err.Error(), "epoch 1") || !strings.Contains(err.Error(), "epoch 2") {
		t.Fatalf("update at a stale epoch over gRPC: %v, want a deposed BackupError naming epochs 1 and 2", err)
	}
	if b.Applied() != 10 {
		t.Fatalf("backup applied %d, want 10", b.Applied())
	}
	// The stream is over: later calls fail with the same error.
	if _, err := st.Replicate(ctx, withEpoch(us[11], 1)); !errors.Is(err, replica.ErrStaleEpoch) {
		t.Fatalf("call on a failed stream: %v", err)
	}
}

// TestStreamWrongSlot: a request for a slot the node does not back up ends
// the stream FailedPrecondition (ErrWrongSlot).
func TestStreamWrongSlot(t *testing.T) {
	spec := testSpec(pb.UpdateMode_UPDATE_MODE_ASYNC, optimizers[0])
	us := primaryUpdates(t, spec, 1)
	b := replica.NewBackup("rep", mustSlot(t, spec), 1)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	st, err := replica.NewStream(ctx, serve(t, b))
	if err != nil {
		t.Fatal(err)
	}
	u := withEpoch(us[0], 1)
	u.Job = "other"
	if _, err := st.Replicate(ctx, u); !errors.Is(err, replica.ErrWrongSlot) || status.Code(err) != codes.FailedPrecondition {
		t.Fatalf("request for job other: %v, want ErrWrongSlot", err)
	}
	if b.Applied() != 0 {
		t.Fatalf("applied %d", b.Applied())
	}
}
