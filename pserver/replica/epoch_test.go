package replica_test

import (
	"context"
	"errors"
	"math/rand"
	"net"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"

	pb "github.com/raftps/raftps/api/raftpspb"
	"github.com/raftps/raftps/api/rpctypes"
	"github.com/raftps/raftps/pserver"
	"github.com/raftps/raftps/pserver/psclient"
	"github.com/raftps/raftps/pserver/replica"
	"github.com/raftps/raftps/pserver/wire"
)

// targets is a psclient.TargetResolver whose answer the test moves (the
// promotion's Raft commit, as the trainer agent's resolver reads it).
type targets struct {
	mu sync.Mutex
	t  psclient.Target
	n  int // resolutions
}

func (r *targets) set(t psclient.Target) {
	r.mu.Lock()
	r.t = t
	r.mu.Unlock()
}

func (r *targets) Targets(context.Context, string) (map[int32]psclient.Target, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.n++
	return map[int32]psclient.Target{0: r.t}, nil
}

func (r *targets) Slots(ctx context.Context, job string) (map[int32]string, error) {
	ts, _ := r.Targets(ctx, job)
	return map[int32]string{0: ts[0].Addr}, nil
}

// servePServer serves srv on a loopback port with the pserver's options.
func servePServer(t *testing.T, srv *pserver.Server) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	g := grpc.NewServer(wire.ServerOptions()...)
	pb.RegisterPServerServer(g, srv)
	go func() { _ = g.Serve(lis) }()
	t.Cleanup(g.Stop)
	return lis.Addr().String()
}

// replicateOnAck makes p a replicated primary whose every update goes to
// r before it is acknowledged, as pserver/agent's replication does: the
// update is sent from its ack gate, and a refusal of a newer epoch deposes
// p (Slot.Depose) and fails the push with ErrFenced.
func replicateOnAck(p *pserver.Slot, r *replica.Replicator) {
	var mu sync.Mutex
	updates := map[int64]*pb.ReplicateRequest{}
	p.OnUpdate(func(u *pb.ReplicateRequest) {
		mu.Lock()
		updates[u.GetSeq()] = u
		mu.Unlock()
	})
	p.SetAckGate(func(ctx context.Context, version int64) error {
		mu.Lock()
		u := updates[version]
		mu.Unlock()
		if u == nil {
			return nil // a retry answered from the push-id memory: its update was acknowledged before
		}
		err := r.Replicate(ctx, u)
		var be *replica.BackupError
		if errors.As(err, &be) && be.Deposed() {
			p.Depose(0)
			return wire.Errorf(wire.ErrFenced, "deposed: %v", err)
		}
		return err
	})
}

// TestTrainerEpochAfterPromotion (issue 34, "trainers carry the epoch they
// resolved"; pserver/DESIGN.md, the old primary and a trainer that keep
// talking after the promotion): primary P serves slot 0 at epoch e with
// backup B; B is promoted (epoch e2 > e) while P, paused or partitioned
// from Raft, does not know it. A trainer that resolved (P, e) pushes to
// P: P applies it locally, B refuses its replication, so the trainer is
// refused, resolves the slot again (B, e2) and lands the push, with the
// same push id, once on B. Two more trainers that resolved (P, e) before
// the promotion then push and pull: P, now knowing it was deposed,
// refuses both before it applies or reads (ErrEpoch), and they push to
// and read from B. Every push is applied once on B, and the deposed P
// applies nothing after the push it could not acknowledge.
func TestTrainerEpochAfterPromotion(t *testing.T) {
	const e, e2 = int64(10), int64(12)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	spec := testSpec(pb.UpdateMode_UPDATE_MODE_ASYNC, optimizers[0])
	p, bs := mustSlot(t, spec), mustSlot(t, spec)
	b := replica.NewBackup(spec.Name, bs, e)
	p.SetEpoch(e)
	replicateOnAck(p, replica.NewReplicator(e, map[string]replica.Peer{"b": b}))
	srvP, srvB := pserver.NewServer(), pserver.NewServer()
	srvP.Host(spec.Name, 0, p)
	addrP, addrB := servePServer(t, srvP), servePServer(t, srvB)
	res := &targets{t: psclient.Target{Addr: addrP, Epoch: e}}
	client := func(id string) *psclient.Client {
		c, err := psclient.NewClient(spec, id, res, psclient.WithRetries(10, 5*time.Millisecond))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = c.Close() })
		return c
	}
	rng := rand.New(rand.NewSource(1))
	push := func(c *psclient.Client) {
		t.Helper()
		g := &psclient.Grads{Sparse: map[string]psclient.SparseGrad{"emb": {Rows: []int64{3}, Values: []float32{float32(rng.Intn(9) + 1), 1, 2}}}}
		if err := c.Push(ctx, g); err != nil {
			t.Fatalf("push: %v", err)
		}
	}
	dst := map[string][]float32{}

	t1, t2, t4 := client("t1"), client("t2"), client("t4")
	for _, c := range []*psclient.Client{t1, t2, t4} {
		if err := c.Pull(ctx, dst); err != nil {
			t.Fatal(err)
		}
	}
	push(t1) // on P at e, replicated to B: version 1 on both
	if p.Version() != 1 || bs.Version() != 1 {
		t.Fatalf("before the promotion: P at version %d, B at %d, want 1 and 1", p.Version(), bs.Version())
	}

	// The promotion: B adopts e2 and serves; the record names (B, e2). P
	// is not told.
	b.SetEpoch(e2)
	bs.SetEpoch(e2)
	srvB.Host(spec.Name, 0, bs)
	res.set(psclient.Target{Addr: addrB, Epoch: e2})
	push(client("t3")) // a trainer that resolved after the promotion: version 2 on B

	push(t1) // resolved (P, e): P applies it, cannot acknowledge it; landed on B
	if got := bs.Version(); got != 3 {
		t.Fatalf("after t1's push through the deposed primary: B at version %d, want 3 (the push applied once)", got)
	}
	if got := p.Version(); got != 2 {
		t.Fatalf("P at version %d, want 2 (t1's push applied locally, not acknowledged)", got)
	}

	// t2 and t4 still resolve to (P, e); P knows it was deposed now.
	push(t2) // refused by P before it applies (ErrEpoch); retried on B with the same push id
	if got := bs.Version(); got != 4 {
		t.Fatalf("after t2's push: B at version %d, want 4", got)
	}
	if err := t4.Pull(ctx, dst); err != nil {
		t.Fatal(err)
	}
	if got := t4.Versions()[0]; got != 4 {
		t.Fatalf("t4 pulled version %d after the promotion, want 4 (the new primary's): a deposed primary served a stale read", got)
	}
	if got := p.Version(); got != 2 {
		t.Fatalf("the deposed primary applied a push after it knew it was deposed: version %d, want 2", got)
	}

	// A request naming the old epoch is refused by the new primary too
	// (Kafka's FENCED_LEADER_EPOCH), one naming none is served.
	cc, err := grpc.NewClient(addrB, wire.DialOptions()...)
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	ps := pb.NewPServerClient(cc)
	_, err = ps.Pull(ctx, &pb.PullRequest{Job: spec.Name, Slot: 0, Epoch: e}, wire.TensorCallOption)
	if err = rpctypes.FromStatus(err); !errors.Is(err, wire.ErrEpoch) {
		t.Fatalf("pull at the old epoch from the new primary: %v, want ErrEpoch", err)
	}
	if _, err := ps.Pull(ctx, &pb.PullRequest{Job: spec.Name, Slot: 0}, wire.TensorCallOption); err != nil {
		t.Fatalf("pull without an epoch (an old client): %v, want it served", err)
	}
}
