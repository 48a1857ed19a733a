package replica_test

import (
	"context"
	"net"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	pb "github.com/raftps/raftps/api/raftpspb"
	"github.com/raftps/raftps/pserver/replica"
)

// TestBrokenStreamReported (issue 34, fast detection): a Replicate
// stream whose primary's connection breaks (a SIGKILLed primary: its
// connection closes without the stream's end) is reported to OnBroken
// with the slot it replicated; a stream the primary ends (CloseSend) is
// not.
func TestBrokenStreamReported(t *testing.T) {
	spec := testSpec(pb.UpdateMode_UPDATE_MODE_ASYNC, optimizers[0])
	us := primaryUpdates(t, spec, 2)
	b := replica.NewBackup("rep", mustSlot(t, spec), 1)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	broken := make(chan string, 10)
	svc := replica.NewService()
	svc.Add("rep", b)
	svc.OnBroken = func(job string, slot int32) { broken <- job + "/" + string(rune('0'+slot)) }
	gs := grpc.NewServer()
	pb.RegisterReplicaServer(gs, svc)
	go gs.Serve(lis)
	t.Cleanup(gs.Stop)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	// open sends us[i] on a new connection's stream and waits for its ack.
	open := func(i int) (*grpc.ClientConn, pb.Replica_ReplicateClient) {
		cc, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			t.Fatal(err)
		}
		st, err := pb.NewReplicaClient(cc).Replicate(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if err := st.Send(withEpoch(us[i], 1)); err != nil {
			t.Fatal(err)
		}
		if _, err := st.Recv(); err != nil {
			t.Fatal(err)
		}
		return cc, st
	}
	// The primary ends its stream: no report.
	cc, st := open(0)
	if err := st.CloseSend(); err != nil {
		t.Fatal(err)
	}
	if _, err := st.Recv(); err == nil {
		t.Fatal("stream went on after CloseSend")
	}
	cc.Close()
	select {
	case s := <-broken:
		t.Fatalf("a stream its primary closed was reported broken: %s", s)
	case <-time.After(200 * time.Millisecond):
	}
	// The primary's connection breaks mid-stream: reported.
	cc, _ = open(1)
	cc.Close()
	select {
	case s := <-broken:
		if s != "rep/0" {
			t.Fatalf("reported %s, want rep/0", s)
		}
	case <-ctx.Done():
		t.Fatal("a broken stream was not reported")
	}
}
