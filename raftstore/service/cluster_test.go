package service

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/raft"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	pb "github.com/raftps/raftps/api/raftpspb"
	"github.com/raftps/raftps/fsm"
	"github.com/raftps/raftps/internal/testing/testutil"
	"github.com/raftps/raftps/master"
	"github.com/raftps/raftps/raftstore"
	"github.com/raftps/raftps/raftstore/client"
	"github.com/raftps/raftps/raftstore/client/concurrency"
)

// grpcCluster is n in-process stores, each serving this package's gRPC
// services on loopback and forwarding to the leader through a Forwarder:
// the path a node takes, without gossip.
type grpcCluster struct {
	mu     sync.Mutex
	addrs  map[string]string // node id -> gRPC address
	stores []*raftstore.Store
	fwds   []*Forwarder // fwds[i] is stores[i]'s
}

func (c *grpcCluster) resolve(id string) (string, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	a, ok := c.addrs[id]
	return a, ok
}

func (c *grpcCluster) addr(s *raftstore.Store) string {
	a, _ := c.resolve(s.ID())
	return a
}

func ctxT(t testing.TB, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

func startGRPCCluster(t testing.TB, n int) *grpcCluster {
	t.Helper()
	c := &grpcCluster{addrs: map[string]string{}}
	ctx := ctxT(t, 30*time.Second)
	for i := range n {
		id := fmt.Sprintf("n%d", i+1)
		lis, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		c.mu.Lock()
		c.addrs[id] = lis.Addr().String()
		c.mu.Unlock()
		fwd := NewForwarder(c.resolve)
		t.Cleanup(func() { fwd.Close() })
		cfg := raftstore.DefaultConfig()
		cfg.ID, cfg.DataDir, cfg.RaftAddr = id, t.TempDir(), "127.0.0.1:0"
		cfg.Bootstrap = i == 0
		cfg.Logger = testutil.Logger(t).With("node", id)
		s, err := raftstore.New(cfg, fsm.New(nil), fwd)
		if err != nil {
			t.Fatal(err)
		}
		if err := s.Open(); err != nil {
			t.Fatal(err)
		}
		g := grpc.NewServer()
		New(s).Register(g)
		ms := master.NewService(s, nil)
		ms.CheckDataset = nil
		ms.Register(g)
		go g.Serve(lis)
		t.Cleanup(func() { g.Stop(); s.Close() })
		c.stores = append(c.stores, s)
		c.fwds = append(c.fwds, fwd)
		if i == 0 {
			if err := s.WaitForLeader(ctx); err != nil {
				t.Fatal(err)
			}
			continue
		}
		// Join is idempotent: again through the next leader if the leader
		// lost its term while committing it (a loaded test machine).
		for {
			err := c.leader(t, ctx).Join(ctx, id, s.Addr(), true)
			if err == nil {
				break
			}
			if !errors.Is(err, raftstore.ErrNotLeader) && !errors.Is(err, raft.ErrLeadershipLost) || ctx.Err() != nil {
				t.Fatalf("join %s: %v", id, err)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	for _, s := range c.stores {
		if err := s.LinearizableRead(ctx); err != nil {
			t.Fatalf("%s: %v", s.ID(), err)
		}
	}
	return c
}

func (c *grpcCluster) leader(t testing.TB, ctx context.Context) *raftstore.Store {
	t.Helper()
	for {
		for _, s := range c.stores {
			if s.IsLeader() {
				return s
			}
		}
		select {
		case <-ctx.Done():
			t.Fatal("no leader")
		case <-time.After(5 * time.Millisecond):
		}
	}
}

func (c *grpcCluster) follower(t testing.TB, ctx context.Context) *raftstore.Store {
	t.Helper()
	l := c.leader(t, ctx)
	for _, s := range c.stores {
		if s != l {
			return s
		}
	}
	t.Fatal("no follower")
	return nil
}

// TestFollowerSeesLostLease (issue 12, item 1): a lease revoked on the
// leader is fsm.ErrLeaseNotFound on a follower too, whose keepalives and
// time-to-live calls are forwarded over gRPC, and a concurrency.Session
// there, in process (the *raftstore.Store itself) or over the gRPC client, reports lost=true and
// a new lease instead of failing forever.
func TestFollowerSeesLostLease(t *testing.T) {
	c := startGRPCCluster(t, 3)
	ctx := ctxT(t, 60*time.Second)
	l, f := c.leader(t, ctx), c.follower(t, ctx)

	cl, err := client.New([]string{c.addr(f)})
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()

	for _, tc := range []struct {
		name string
		api  concurrency.LeaseAPI
	}{
		{"in process on a follower", f},
		{"gRPC client to a follower", cl.Leases()},
	} {
		t.Run(tc.name, func(t *testing.T) {
			const ttl = 3
			s := concurrency.NewSession(tc.api, ttl)
			id, lost, err := ensure(ctx, t, s)
			if lost {
				t.Fatalf("first Ensure: %d %v %v", id, lost, err)
			}
			if _, err := l.LeaseRevoke(ctx, &pb.LeaseRevokeRequest{Id: id}); err != nil {
				t.Fatal(err)
			}
			// The follower's forwarded calls map the leader's NotFound back.
			if _, err := f.LeaseKeepAlive(ctx, id); !errors.Is(err, fsm.ErrLeaseNotFound) {
				t.Fatalf("follower keepalive of a revoked lease: %v, want ErrLeaseNotFound", err)
			}
			if _, err := f.LeaseTimeToLive(ctx, id); !errors.Is(err, fsm.ErrLeaseNotFound) {
				t.Fatalf("follower time-to-live of a revoked lease: %v, want ErrLeaseNotFound", err)
			}
			if _, err := tc.api.LeaseKeepAlive(ctx, id); !errors.Is(err, fsm.ErrLeaseNotFound) {
				t.Fatalf("keepalive through %s: %v, want ErrLeaseNotFound", tc.name, err)
			}
			time.Sleep(ttl * time.Second / 3) // the next Ensure renews
			id2, lost, err := ensure(ctx, t, s)
			if !lost || id2 == id || id2 == 0 {
				t.Fatalf("Ensure after the revoke: id %d (old %d) lost %v err %v; want a new lease and lost", id2, id, lost, err)
			}
		})
	}
}

// TestClientErrorsMapBack: errors that reach a gRPC client (from the
// node it calls, or from the leader through it) keep their code and wrap
// our sentinels.
func TestClientErrorsMapBack(t *testing.T) {
	c := startGRPCCluster(t, 3)
	ctx := ctxT(t, 30*time.Second)
	f := c.follower(t, ctx)
	cl, err := client.New([]string{c.addr(f)})
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	_, err = cl.KV.Put(ctx, &pb.PutRequest{Key: nil, Value: []byte("v")})
	if status.Code(err) != codes.InvalidArgument || !errors.Is(err, fsm.ErrInvalid) {
		t.Fatalf("put of an empty key: %v", err)
	}
	_, err = cl.Lease.LeaseGrant(ctx, &pb.LeaseGrantRequest{Ttl: fsm.MaxLeaseTTL + 1})
	if status.Code(err) != codes.InvalidArgument || !errors.Is(err, fsm.ErrLeaseTTLTooLarge) {
		t.Fatalf("grant above the maximum TTL: %v", err)
	}
	_, err = cl.Lease.LeaseRevoke(ctx, &pb.LeaseRevokeRequest{Id: 12345})
	if status.Code(err) != codes.NotFound || !errors.Is(err, fsm.ErrLeaseNotFound) {
		t.Fatalf("revoke of an unknown lease: %v", err)
	}
}

// ensure calls s.Ensure until it answers without an error (each call is
// bounded by the Session's own 2 s timeouts, which a loaded test machine
// can exceed) and returns that answer; lost is true if any call said so.
func ensure(ctx context.Context, t *testing.T, s *concurrency.Session) (int64, bool, error) {
	t.Helper()
	anyLost := false
	for {
		id, lost, err := s.Ensure(ctx)
		anyLost = anyLost || lost
		if err == nil {
			return id, anyLost, nil
		}
		if ctx.Err() != nil {
			t.Fatalf("Ensure: %v", err)
		}
		t.Logf("Ensure: %v; again", err)
		time.Sleep(100 * time.Millisecond)
	}
}
