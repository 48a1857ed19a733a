package concurrency

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/raftps/raftps/api/errs"
	pb "github.com/raftps/raftps/api/raftpspb"
	"github.com/raftps/raftps/api/rpctypes"
)

// fakeLeases is a LeaseAPI with leases in a map. grantErr and
// keepAliveErr, when set, are returned instead. Errors come as gRPC
// statuses when wire is set (as from raftstore/client or a forwarded call).
type fakeLeases struct {
	mu           sync.Mutex
	next         int64
	live         map[int64]bool
	grants       int
	keepAlives   int
	revoked      []int64
	grantErr     error
	keepAliveErr error
	wire         bool
}

func newFake() *fakeLeases { return &fakeLeases{live: map[int64]bool{}} }

func (f *fakeLeases) out(err error) error {
	if f.wire {
		return rpctypes.ToStatus(err)
	}
	return err
}

func (f *fakeLeases) LeaseGrant(_ context.Context, req *pb.LeaseGrantRequest) (*pb.LeaseGrantResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.grants++
	if f.grantErr != nil {
		return nil, f.grantErr
	}
	f.next++
	f.live[f.next] = true
	return &pb.LeaseGrantResponse{Id: f.next, Ttl: req.Ttl}, nil
}

func (f *fakeLeases) LeaseKeepAlive(_ context.Context, id int64) (int64, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.keepAlives++
	if f.keepAliveErr != nil {
		return 0, f.keepAliveErr
	}
	if !f.live[id] {
		return 0, f.out(fmt.Errorf("%w: %d", errs.ErrLeaseNotFound, id))
	}
	return 9, nil
}

func (f *fakeLeases) LeaseRevoke(_ context.Context, req *pb.LeaseRevokeRequest) (*pb.LeaseRevokeResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	id := req.Id
	if !f.live[id] {
		return nil, f.out(fmt.Errorf("%w: %d", errs.ErrLeaseNotFound, id))
	}
	delete(f.live, id)
	f.revoked = append(f.revoked, id)
	return &pb.LeaseRevokeResponse{}, nil
}

func (f *fakeLeases) expire(id int64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	delete(f.live, id)
}

func (f *fakeLeases) set(fn func(f *fakeLeases)) {
	f.mu.Lock()
	defer f.mu.Unlock()
	fn(f)
}

func (f *fakeLeases) counts() (grants, keepAlives int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.grants, f.keepAlives
}

// clock is a manual clock for a Session.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *clock) advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

func newTestSession(api LeaseAPI, ttl int64) (*Session, *clock) {
	c := &clock{t: time.Unix(1_000_000, 0)}
	s := NewSession(api, ttl)
	s.now = c.now
	return s, c
}

func mustEnsure(t *testing.T, s *Session) (int64, bool) {
	t.Helper()
	id, lost, err := s.Ensure(context.Background())
	if err != nil {
		t.Fatalf("Ensure: %v", err)
	}
	return id, lost
}

// TestSessionGrantAndRenew: the first Ensure grants; Ensure within a third
// of the TTL calls nothing; after it, one keepalive keeps the same lease.
func TestSessionGrantAndRenew(t *testing.T) {
	f := newFake()
	s, c := newTestSession(f, 9)
	id, lost := mustEnsure(t, s)
	if id == 0 || lost {
		t.Fatalf("first Ensure: id %d lost %v", id, lost)
	}
	c.advance(2 * time.Second)
	if id2, _ := mustEnsure(t, s); id2 != id {
		t.Fatalf("id changed to %d", id2)
	}
	if g, k := f.counts(); g != 1 || k != 0 {
		t.Fatalf("within TTL/3: %d grants, %d keepalives; want 1, 0", g, k)
	}
	c.advance(2 * time.Second) // 4 s > 9 s / 3
	if id2, lost := mustEnsure(t, s); id2 != id || lost {
		t.Fatalf("renew: id %d lost %v, want %d false", id2, lost, id)
	}
	if g, k := f.counts(); g != 1 || k != 1 {
		t.Fatalf("after TTL/3: %d grants, %d keepalives; want 1, 1", g, k)
	}
	if s.ID() != id {
		t.Fatalf("ID %d, want %d", s.ID(), id)
	}
}

// TestSessionLeaseNotFound: a keepalive that finds the lease gone reports
// lost=true and a new lease, whether the error is the sentinel (in
// process) or a gRPC NotFound status (a client or a forwarded call).
func TestSessionLeaseNotFound(t *testing.T) {
	for _, wire := range []bool{false, true} {
		t.Run(fmt.Sprintf("wire=%v", wire), func(t *testing.T) {
			f := newFake()
			f.wire = wire
			s, c := newTestSession(f, 3)
			id, _ := mustEnsure(t, s)
			f.expire(id)
			c.advance(time.Second)
			id2, lost := mustEnsure(t, s)
			if !lost || id2 == id || id2 == 0 {
				t.Fatalf("after the lease expired: id %d lost %v (old %d)", id2, lost, id)
			}
			c.advance(time.Second)
			if _, lost := mustEnsure(t, s); lost {
				t.Fatal("lost reported twice for one lost lease")
			}
		})
	}
}

// TestSessionLostSurvivesFailedGrant: when the lease is gone and the new
// grant fails, lost is reported with the error and again with the next
// lease, so a caller that skips rounds with an error still fences.
func TestSessionLostSurvivesFailedGrant(t *testing.T) {
	f := newFake()
	f.wire = true
	s, c := newTestSession(f, 3)
	id, _ := mustEnsure(t, s)
	f.expire(id)
	f.set(func(f *fakeLeases) { f.grantErr = status.Error(codes.Unavailable, "no leader") })
	c.advance(time.Second)
	_, lost, err := s.Ensure(context.Background())
	if err == nil || !lost {
		t.Fatalf("grant failing: lost %v err %v, want true and an error", lost, err)
	}
	f.set(func(f *fakeLeases) { f.grantErr = nil })
	id2, lost := mustEnsure(t, s)
	if !lost || id2 == id {
		t.Fatalf("next successful Ensure: id %d lost %v, want a new lease and lost", id2, lost)
	}
}

// TestSessionLostWhenNotRenewedForTTL: keepalives that fail without an
// answer (a partition) are errors with lost=false until a whole TTL has
// passed since the last renewal; then the lease counts as lost, and the
// old one is revoked once the cluster answers again.
func TestSessionLostWhenNotRenewedForTTL(t *testing.T) {
	f := newFake()
	s, c := newTestSession(f, 3)
	id, _ := mustEnsure(t, s)
	unavailable := status.Error(codes.Unavailable, "leader unreachable")
	f.set(func(f *fakeLeases) { f.keepAliveErr = unavailable; f.grantErr = unavailable })
	c.advance(1500 * time.Millisecond)
	if _, lost, err := s.Ensure(context.Background()); err == nil || lost {
		t.Fatalf("within the TTL: lost %v err %v, want false and an error", lost, err)
	}
	c.advance(1500 * time.Millisecond) // 3 s since the grant
	if _, lost, err := s.Ensure(context.Background()); err == nil || !lost {
		t.Fatalf("a TTL without renewal: lost %v err %v, want true and an error", lost, err)
	}
	f.set(func(f *fakeLeases) { f.keepAliveErr = nil; f.grantErr = nil })
	id2, lost := mustEnsure(t, s)
	if !lost || id2 == id {
		t.Fatalf("healed: id %d lost %v, want a new lease and lost", id2, lost)
	}
	f.mu.Lock()
	revoked := append([]int64(nil), f.revoked...)
	f.mu.Unlock()
	if len(revoked) != 1 || revoked[0] != id {
		t.Fatalf("revoked %v, want the stale lease %d", revoked, id)
	}
}

// TestSessionCloseRevokes: Close revokes the live lease and forgets it; a
// second Close does nothing; closing over a lease that is gone is not an error.
func TestSessionCloseRevokes(t *testing.T) {
	f := newFake()
	s, _ := newTestSession(f, 3)
	id, _ := mustEnsure(t, s)
	if err := s.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	if s.ID() != 0 || len(f.revoked) != 1 || f.revoked[0] != id {
		t.Fatalf("after Close: ID %d, revoked %v (want %d)", s.ID(), f.revoked, id)
	}
	if err := s.Close(context.Background()); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	f.wire = true
	id, _ = mustEnsure(t, s)
	f.expire(id)
	if err := s.Close(context.Background()); err != nil {
		t.Fatalf("Close over a gone lease: %v", err)
	}
	boom := errors.New("boom")
	s2 := NewSession(revokeErr{newFake(), boom}, 3)
	if _, _, err := s2.Ensure(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := s2.Close(context.Background()); !errors.Is(err, boom) {
		t.Fatalf("Close with a failing revoke: %v, want it to wrap %v", err, boom)
	}
}

type revokeErr struct {
	*fakeLeases
	err error
}

func (r revokeErr) LeaseRevoke(context.Context, *pb.LeaseRevokeRequest) (*pb.LeaseRevokeResponse, error) {
	return nil, r.err
}

// TestSessionConcurrentEnsure: concurrent Ensures (run with -race) share
// one lease: one grant, every caller gets its id.
func TestSessionConcurrentEnsure(t *testing.T) {
	f := newFake()
	s := NewSession(f, 30)
	const n = 16
	ids := make([]int64, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 20 {
				id, _, err := s.Ensure(context.Background())
				if err != nil {
					t.Error(err)
					return
				}
				ids[i] = id
			}
		}()
	}
	wg.Wait()
	if g, _ := f.counts(); g != 1 {
		t.Fatalf("%d grants, want 1", g)
	}
	for i, id := range ids {
		if id != ids[0] || id == 0 {
			t.Fatalf("caller %d got lease %d, caller 0 got %d", i, id, ids[0])
		}
	}
}

// closed reports whether ch is closed.
func closed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

// TestSessionDone: Done and Ctx (etcd's Session.Done/Ctx) belong to the
// current lease: open while it is kept alive, closed when a keepalive
// finds it gone, when it is given up unrenewed for a TTL, and at Close; a
// new lease gets a new, open one. Before the first grant Done is closed.
func TestSessionDone(t *testing.T) {
	f := newFake()
	s, c := newTestSession(f, 3)
	if !closed(s.Done()) {
		t.Fatal("Done open before any lease")
	}
	id, _ := mustEnsure(t, s)
	done, ctx := s.Done(), s.Ctx()
	if closed(done) || ctx.Err() != nil {
		t.Fatal("Done closed with a live lease")
	}
	c.advance(2 * time.Second)
	mustEnsure(t, s) // renewed
	if closed(done) {
		t.Fatal("Done closed after a successful renewal")
	}

	f.expire(id) // the keepalive finds it gone
	c.advance(2 * time.Second)
	id2, lost := mustEnsure(t, s)
	if !lost || !closed(done) || !errors.Is(ctx.Err(), context.Canceled) {
		t.Fatalf("after the lease was found gone: lost %v, Done closed %v, ctx %v", lost, closed(done), ctx.Err())
	}
	done2 := s.Done()
	if id2 == id || closed(done2) {
		t.Fatalf("successor %d: Done closed %v", id2, closed(done2))
	}

	// Not renewed for a whole TTL (the cluster unreachable): given up.
	f.set(func(f *fakeLeases) { f.keepAliveErr = status.Error(codes.Unavailable, "no leader") })
	c.advance(4 * time.Second)
	if _, lost, err := s.Ensure(context.Background()); !lost || err == nil || !closed(done2) {
		t.Fatalf("unrenewed for a TTL: lost %v err %v Done closed %v", lost, err, closed(done2))
	}
	f.set(func(f *fakeLeases) { f.keepAliveErr = nil })
	mustEnsure(t, s)
	done3 := s.Done()
	if closed(done3) {
		t.Fatal("Done of the third lease closed")
	}
	if err := s.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	if !closed(done3) {
		t.Fatal("Done open after Close")
	}
}

// TestSessionKeepAliveAndRenewed: KeepAlive renews at once, whatever the
// lease's age, and Renewed reports the send of the last successful
// renewal; a KeepAlive that finds the lease gone ends it (Done closed, the
// next Ensure reports lost); without a lease it is ErrNoLease.
func TestSessionKeepAliveAndRenewed(t *testing.T) {
	f := newFake()
	s, c := newTestSession(f, 9)
	if _, err := s.KeepAlive(context.Background()); !errors.Is(err, ErrNoLease) {
		t.Fatalf("KeepAlive without a lease: %v, want ErrNoLease", err)
	}
	id, _ := mustEnsure(t, s)
	if rid, sent := s.Renewed(); rid != id || !sent.Equal(c.now()) {
		t.Fatalf("Renewed after the grant: %d %v, want %d %v", rid, sent, id, c.now())
	}
	c.advance(500 * time.Millisecond) // well within TTL/3
	if ttl, err := s.KeepAlive(context.Background()); err != nil || ttl != 9 {
		t.Fatalf("KeepAlive: %d %v", ttl, err)
	}
	if _, k := f.counts(); k != 1 {
		t.Fatalf("%d keepalives, want 1", k)
	}
	if _, sent := s.Renewed(); !sent.Equal(c.now()) {
		t.Fatalf("Renewed after KeepAlive: %v, want %v", sent, c.now())
	}
	f.set(func(f *fakeLeases) { f.keepAliveErr = status.Error(codes.Unavailable, "no leader") })
	before := c.now()
	c.advance(time.Second)
	if _, err := s.KeepAlive(context.Background()); err == nil {
		t.Fatal("KeepAlive with the cluster unreachable succeeded")
	}
	if _, sent := s.Renewed(); !sent.Equal(before) {
		t.Fatalf("a failed KeepAlive moved Renewed to %v", sent)
	}
	f.set(func(f *fakeLeases) { f.keepAliveErr = nil })
	done := s.Done()
	f.expire(id)
	if _, err := s.KeepAlive(context.Background()); !errors.Is(err, errs.ErrLeaseNotFound) || !closed(done) {
		t.Fatalf("KeepAlive of a gone lease: %v, Done closed %v", err, closed(done))
	}
	if id2, lost := mustEnsure(t, s); !lost || id2 == id {
		t.Fatalf("Ensure after KeepAlive found the lease gone: %d lost %v", id2, lost)
	}
}
