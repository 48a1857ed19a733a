package replica_test

import (
	"context"
	"errors"
	"net"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/raftps/raftps/api/errs"
	pb "github.com/raftps/raftps/api/raftpspb"
	"github.com/raftps/raftps/api/rpctypes"
	"github.com/raftps/raftps/pserver"
	"github.com/raftps/raftps/pserver/replica"
)

// serveInstaller starts a Replica service on loopback whose Installer
// builds backups of spec (nil: no Installer) and returns a client and the
// last backup it built.
func serveInstaller(t *testing.T, spec *pb.JobSpec) (pb.ReplicaClient, func() *replica.Backup) {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gs := grpc.NewServer()
	svc := replica.NewService()
	var mu sync.Mutex
	var last *replica.Backup
	if spec != nil {
		svc.SetInstaller(func(hdr *pb.InstallHeader, blobs map[int32][]byte) (*replica.Backup, error) {
			s, err := pserver.RestoreSlot(spec, hdr.GetSlot(), spec.NumPservers, blobs)
			if err != nil {
				return nil, err
			}
			if err := s.InstallState(hdr.GetPushIds(), hdr.GetIncarnation()); err != nil {
				return nil, err
			}
			b := replica.NewBackup(hdr.GetJob(), s, hdr.GetEpoch())
			mu.Lock()
			last = b
			mu.Unlock()
			return b, nil
		})
	}
	pb.RegisterReplicaServer(gs, svc)
	go gs.Serve(lis)
	t.Cleanup(gs.Stop)
	cc, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cc.Close() })
	return pb.NewReplicaClient(cc), func() *replica.Backup { mu.Lock(); defer mu.Unlock(); return last }
}

// TestInstallThenReplicate (re-replication): with every optimizer, a new
// backup installed from a primary's ReplicaSnapshot after 10 updates
// (Install over gRPC: values, optimizer state, update counts, push-id
// memory, incarnation: version 10, incarnation 42), then sent updates 11-15 on a Replicate stream,
// ends byte-identical to a primary that made all 15, at the same
// version, and answers a retry of push 3 (applied before the snapshot)
// with version 3, not applied again.
func TestInstallThenReplicate(t *testing.T) {
	for _, opt := range optimizers {
		t.Run(optName(opt), func(t *testing.T) {
			spec := testSpec(pb.UpdateMode_UPDATE_MODE_ASYNC, opt)
			p, _ := primaryAndUpdates(t, spec, 10)
			p.SetIncarnation(42)
			full, us := primaryAndUpdates(t, spec, 15)
			snap, ids, inc := p.ReplicaSnapshot()
			blobs, err := pserver.EncodeSnapshot(snap)
			if err != nil {
				t.Fatal(err)
			}
			c, installed := serveInstaller(t, spec)
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			resp, err := replica.Install(ctx, c, &pb.InstallHeader{Job: "rep", Slot: 0, Epoch: 3, Primary: "n1",
				Version: snap.Version, Step: snap.Step, Incarnation: inc, PushIds: ids}, blobs)
			if err != nil || resp.GetApplied() != 10 || resp.GetEpoch() != 3 {
				t.Fatalf("install: %v %v, want applied 10 at epoch 3", resp, err)
			}
			if pr, err := installed().Slot().Pull(ctx, &pb.PullRequest{}); err != nil || pr.GetIncarnation() != 42 || pr.GetVersion() != 10 {
				t.Fatalf("installed slot: %v, pull %v, want version 10, incarnation 42", err, pr.GetVersion())
			}
			st, err := replica.NewStream(ctx, c)
			if err != nil {
				t.Fatal(err)
			}
			replicateAll(t, replica.NewReplicator(3, map[string]replica.Peer{"n2": st}), us[10:])
			b := installed().Slot()
			assertSame(t, full, b, "installed backup")
			if b.Version() != 15 {
				t.Fatalf("installed backup at version %d, want 15", b.Version())
			}
			r, err := b.Push(ctx, &pb.PushRequest{Job: "rep", Trainer: "t", PushId: 3, Grads: us[2].GetGrads()})
			if err != nil || r.GetVersion() != 3 || b.Version() != 15 {
				t.Fatalf("retry of push 3 on the installed backup: %v %v (slot at %d), want version 3, not applied", r, err, b.Version())
			}
		})
	}
}

// TestInstallRefused: an Install stream without a header first is
// InvalidArgument, one announcing fewer bytes than it sends too, and one
// to a node with no Installer is ErrWrongSlot (FailedPrecondition); no
// backup is served. A push-id ring of the wrong size is ErrInvalid.
func TestInstallRefused(t *testing.T) {
	spec := testSpec(pb.UpdateMode_UPDATE_MODE_ASYNC, optimizers[0])
	p, _ := primaryAndUpdates(t, spec, 2)
	snap, ids, inc := p.ReplicaSnapshot()
	blobs, err := pserver.EncodeSnapshot(snap)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c, installed := serveInstaller(t, spec)
	st, err := c.Install(ctx)
	if err != nil {
		t.Fatal(err)
	}
	_ = st.Send(&pb.InstallChunk{Vshard: 0, Data: []byte{1}})
	if _, err := st.CloseAndRecv(); !errors.Is(mapStatus(err), errs.ErrInvalid) {
		t.Fatalf("install without a header: %v, want InvalidArgument", err)
	}
	st, err = c.Install(ctx)
	if err != nil {
		t.Fatal(err)
	}
	_ = st.Send(&pb.InstallChunk{Header: &pb.InstallHeader{Job: "rep", Bytes: 1}})
	_ = st.Send(&pb.InstallChunk{Vshard: 0, Data: []byte{1, 2}})
	if _, err := st.CloseAndRecv(); !errors.Is(mapStatus(err), errs.ErrInvalid) {
		t.Fatalf("install of more bytes than announced: %v, want InvalidArgument", err)
	}
	if installed() != nil {
		t.Fatal("a refused install built a backup")
	}
	none, _ := serveInstaller(t, nil)
	hdr := &pb.InstallHeader{Job: "rep", Version: snap.Version, Step: snap.Step, Incarnation: inc, PushIds: ids}
	if _, err := replica.Install(ctx, none, hdr, blobs); !errors.Is(err, replica.ErrWrongSlot) {
		t.Fatalf("install on a node with no installer: %v, want ErrWrongSlot", err)
	}
	bad := &pb.PushIDState{Rings: []*pb.PushIDRing{{Trainer: "t", Ids: []uint64{1}, Versions: []int64{1}}}}
	if err := mustSlot(t, spec).InstallState(bad, 1); !errors.Is(err, errs.ErrInvalid) {
		t.Fatalf("push-id ring of 1 entry: %v, want ErrInvalid", err)
	}
}

func mapStatus(err error) error { return rpctypes.FromStatus(err) }
