package replica_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	pb "github.com/raftps/raftps/api/raftpspb"
	"github.com/raftps/raftps/pserver"
	"github.com/raftps/raftps/pserver/replica"
	"github.com/raftps/raftps/pserver/wire"
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

// bigSpec is testSpec with a dense param whose blocks (64 KiB each) are
// large enough for the data pool: the tensor codec reads them into pooled
// buffers, which the service returns once each update is applied.
func bigSpec() *pb.JobSpec {
	spec := testSpec(pb.UpdateMode_UPDATE_MODE_ASYNC, optimizers[3])
	spec.DenseBlockSize = wire.MinPooled / 4
	spec.Params[0].Shape = []int64{3 * wire.MinPooled / 4}
	return spec
}

// replayed is a slot of spec with the first n of us applied, as a backup
// applies them.
func replayed(t *testing.T, spec *pb.JobSpec, us []*pb.ReplicateRequest, n int) *pserver.Slot {
	t.Helper()
	s := mustSlot(t, spec)
	for _, u := range us[:n] {
		if err := s.ApplyReplicated(u); err != nil {
			t.Fatal(err)
		}
	}
	return s
}

// TestStreamPipelineInOrder: many updates in flight on one stream (the
// primary sends concurrent pushes' updates without waiting for acks),
// sent in seq order and, on a second stream, in reverse, over the
// pserver's transport (tensor codec, pooled gradient buffers): every call
// is acknowledged, each update is applied once in seq order, and the
// backup ends byte-identical to the primary.
func TestStreamPipelineInOrder(t *testing.T) {
	spec := bigSpec()
	p, us := primaryAndUpdates(t, spec, 24)
	for _, reverse := range []bool{false, true} {
		b := replica.NewBackup("rep", mustSlot(t, spec), 1)
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		c, _ := serveWire(t, b)
		st, err := replica.NewStream(ctx, c)
		if err != nil {
			t.Fatal(err)
		}
		order := make([]int, len(us))
		for i := range order {
			order[i] = i
		}
		if reverse {
			slices.Reverse(order)
		}
		errs := make([]error, len(us))
		var wg sync.WaitGroup
		for _, i := range order {
			u := withEpoch(us[i], 1)
			if err := st.Send(u); err != nil { // in this order on the wire
				t.Fatal(err)
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				_, errs[i] = st.Wait(ctx, u.GetSeq(), nil)
			}()
		}
		wg.Wait()
		cancel()
		if err := errors.Join(errs...); err != nil {
			t.Fatalf("reverse %v: %v", reverse, err)
		}
		if b.Applied() != int64(len(us)) {
			t.Fatalf("reverse %v: applied %d, want %d", reverse, b.Applied(), len(us))
		}
		assertSame(t, p, b.Slot(), fmt.Sprintf("backup (reverse %v)", reverse))
	}
}

// TestStreamPipelineBackupFails: the backup's server stops while updates
// are in flight, seq 1-10 applied and acknowledged and 12-30 waiting for
// seq 11, which is sent only after the stop: 1-10 are acknowledged, no later update is,
// and the backup holds exactly updates 1-10, each applied once (byte
// equality with a replay of 1-10): no acknowledged update lost, none
// doubled, none applied from a buffer returned to the pool early.
func TestStreamPipelineBackupFails(t *testing.T) {
	spec := bigSpec()
	_, us := primaryAndUpdates(t, spec, 30)
	b := replica.NewBackup("rep", mustSlot(t, spec), 1)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c, gs := serveWire(t, b)
	st, err := replica.NewStream(ctx, c)
	if err != nil {
		t.Fatal(err)
	}
	r := replica.NewReplicator(1, map[string]replica.Peer{"n2": st})
	errs := make([]error, len(us))
	var wg sync.WaitGroup
	var acked atomic.Int32
	call := func(i int) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if errs[i] = r.Replicate(ctx, us[i]); errs[i] == nil {
				acked.Add(1)
			}
		}()
	}
	for i := len(us) - 1; i >= 0; i-- {
		if i != 10 {
			call(i)
		}
	}
	waitFor(t, func() bool { return acked.Load() == 10 && b.Waiting() == len(us)-11 })
	gs.Stop()
	call(10)
	wg.Wait()
	for i, err := range errs {
		if acked := err == nil; acked != (i < 10) {
			t.Errorf("seq %d: %v (acknowledged %v, want %v)", i+1, err, acked, i < 10)
		}
	}
	if b.Applied() != 10 {
		t.Fatalf("backup applied %d after the stop, want 10", b.Applied())
	}
	assertSame(t, replayed(t, spec, us, 10), b.Slot(), "backup")
}
