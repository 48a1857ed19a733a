package node

import (
	"context"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	pb "github.com/raftps/raftps/api/raftpspb"
)

// TestDeleteVersionsPeerOnly (issue 19 item 7): CheckpointStore is served
// on the client port for `raftps checkpoint`'s reads, but its
// DeleteVersions and PutBlob only node to node: on the client port they are
// refused with
// Unimplemented naming the node-to-node port before the handler runs,
// while on the node-to-node port it reaches the handler (which refuses
// this one for another reason: no committed pointer), and the client
// port's other CheckpointStore methods still reach theirs. Before, the
// client port served DeleteVersions to any client.
func TestDeleteVersionsPeerOnly(t *testing.T) {
	n := mustOpen(t, testConfig(t, "n1"))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	req := &pb.DeleteVersionsRequest{Job: "j", Slot: 0, Versions: []int64{1}}

	_, err := pb.NewCheckpointStoreClient(dial(t, n.GRPCAddr())).DeleteVersions(ctx, req)
	if status.Code(err) != codes.Unimplemented || !strings.Contains(err.Error(), "only on the node-to-node port") ||
		!strings.Contains(err.Error(), n.PeerAddr()) {
		t.Fatalf("DeleteVersions on the client port: %v, want Unimplemented naming the node-to-node port %s", err, n.PeerAddr())
	}
	t.Logf("client port: %v", err)

	_, err = pb.NewCheckpointStoreClient(dial(t, n.PeerAddr())).DeleteVersions(ctx, req)
	if err == nil || status.Code(err) == codes.Unimplemented {
		t.Fatalf("DeleteVersions on the node-to-node port: %v, want the handler's refusal (no pointer)", err)
	}
	t.Logf("node-to-node port: %v", err)

	// PutBlob is a client stream: the refusal arrives at the first receive.
	put, err := pb.NewCheckpointStoreClient(dial(t, n.GRPCAddr())).PutBlob(ctx)
	if err == nil {
		_, err = put.CloseAndRecv()
	}
	if status.Code(err) != codes.Unimplemented || !strings.Contains(err.Error(), "only on the node-to-node port") {
		t.Fatalf("PutBlob on the client port: %v, want Unimplemented naming the node-to-node port", err)
	}

	_, err = pb.NewCheckpointStoreClient(dial(t, n.GRPCAddr())).GetManifest(ctx, &pb.GetManifestRequest{Key: "j/1/0"})
	if status.Code(err) == codes.Unimplemented {
		t.Fatalf("GetManifest on the client port: %v, want it served", err)
	}
}
