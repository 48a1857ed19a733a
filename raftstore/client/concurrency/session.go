package concurrency

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/raftps/raftps/api/errs"
	pb "github.com/raftps/raftps/api/raftpspb"
	"github.com/raftps/raftps/api/rpctypes"
)

// LeaseAPI is what a Session needs, in the shape of raftstore.Lessor: the
// node's own *raftstore.Store (in process) and the gRPC client's Leases
// adapter implement it. A lease that no longer exists must come back as an
// error wrapping errs.ErrLeaseNotFound, or as a gRPC status that
// rpctypes.FromStatus maps to it.
type LeaseAPI interface {
	LeaseGrant(ctx context.Context, req *pb.LeaseGrantRequest) (*pb.LeaseGrantResponse, error)
	LeaseKeepAlive(ctx context.Context, id int64) (ttl int64, err error)
	LeaseRevoke(ctx context.Context, req *pb.LeaseRevokeRequest) (*pb.LeaseRevokeResponse, error)
}

// callTimeout bounds each grant, keepalive and revoke; a keepalive also
// ends when the lease would have expired (but gets minKeepAliveWait).
const (
	callTimeout      = 2 * time.Second
	minKeepAliveWait = 100 * time.Millisecond
)

// Session is one lease kept alive on behalf of an agent (etcd's
// concurrency.Session): the keys an agent holds are attached to it, so they
// vanish when the agent's node dies, and the agent learns when its lease
// was lost (so it can fence what it served and re-register).
type Session struct {
	api LeaseAPI
	ttl int64 // seconds
	now func() time.Time

	mu     sync.Mutex
	id     int64
	last   time.Time // last successful grant or keepalive (sent at or after)
	lost   bool      // a lease was lost and no new one has been granted yet
	stale  int64     // a lease given up unrenewed, to revoke when the cluster answers
	ctx    context.Context
	cancel context.CancelFunc // ends ctx: the lease id is lost, given up or revoked
}

// NewSession returns a session of leases of ttl seconds; Ensure grants the first.
func NewSession(api LeaseAPI, ttl int64) *Session {
	ctx, cancel := context.WithCancel(context.Background())
	cancel() // no lease yet
	return &Session{api: api, ttl: ttl, now: time.Now, ctx: ctx, cancel: cancel}
}

// Ctx is the context of the session's current lease (etcd's Session.Ctx):
// it is canceled when the session finds that lease gone, gives it up
// unrenewed for a whole TTL, or Close revokes it. Before the first grant
// and after a loss, until Ensure grants the successor, it is the canceled
// context of the previous lease. Take it after Ensure to watch that lease.
func (s *Session) Ctx() context.Context {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.ctx
}

// Done is Ctx().Done() (etcd's Session.Done): closed when the current
// lease is no longer kept alive.
func (s *Session) Done() <-chan struct{} { return s.Ctx().Done() }

// Renewed returns the current lease and when its last successful grant or
// keepalive was sent (the lease lives at least its TTL from then); id 0 if
// there is no lease.
func (s *Session) Renewed() (id int64, sent time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.id, s.last
}

// endLocked ends the current lease's context.
func (s *Session) endLocked() { s.cancel() }

// Ensure returns the session's live lease, granting one if there is none
// and renewing it when a third of the TTL has passed since the last
// renewal.
//
// lost reports that the previous lease is gone, so everything attached to
// it is gone too: the caller must fence what it served under it and
// re-register under id. The lease counts as gone when a keepalive answers
// that it does not exist (errs.ErrLeaseNotFound, also from a leader behind
// a forwarded call or a gRPC connection), and when no renewal succeeded
// for a whole TTL (the leader may have revoked it meanwhile: a partition,
// a stalled process). The contract: lost is true on every Ensure from the
// one that finds the lease gone up to and including the one that returns
// its successor with err == nil; a caller that skips rounds with an error
// still sees lost on its next successful round. err != nil means there is
// no lease known to be live right now (id is then the old lease, or 0).
func (s *Session) Ensure(ctx context.Context) (id int64, lost bool, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	ttl := time.Duration(min(s.ttl, errs.MaxLeaseTTL)) * time.Second
	if s.id != 0 && s.now().Sub(s.last) < ttl/3 {
		return s.id, false, nil
	}
	if s.id != 0 {
		// Wait for the keepalive no longer than the lease may live, so a
		// partition is reported lost at the end of the TTL, not later.
		wait := min(callTimeout, max(s.last.Add(ttl).Sub(s.now()), minKeepAliveWait))
		kctx, cancel := context.WithTimeout(ctx, wait)
		sent := s.now()
		_, err := s.api.LeaseKeepAlive(kctx, s.id)
		cancel()
		switch {
		case err == nil:
			s.last = sent
			return s.id, false, nil
		case isLeaseNotFound(err):
			s.id, s.lost = 0, true
			s.endLocked()
		case s.now().Sub(s.last) >= ttl:
			// Not renewed for a whole TTL: treat it as gone at once (the
			// caller fences now; the next Ensure grants a successor), and
			// revoke it once the cluster answers again (a new leader may
			// have given it a fresh TTL, and its keys would linger).
			old := s.id
			s.stale, s.id, s.lost = old, 0, true
			s.endLocked()
			return 0, true, fmt.Errorf("lease %d not renewed for its TTL of %v: %w", old, ttl, err)
		default:
			return s.id, false, fmt.Errorf("keepalive lease %d: %w", s.id, err)
		}
	}
	cctx, cancel := context.WithTimeout(ctx, callTimeout)
	defer cancel()
	sent := s.now()
	resp, err := s.api.LeaseGrant(cctx, &pb.LeaseGrantRequest{Ttl: s.ttl})
	if err != nil {
		return 0, s.lost, fmt.Errorf("grant lease: %w", err)
	}
	id = resp.GetId()
	lost, s.lost = s.lost, false
	s.endLocked() // a previous lease's context, if it was still live
	s.id, s.last = id, sent
	s.ctx, s.cancel = context.WithCancel(context.Background())
	if s.stale != 0 {
		if _, err := s.api.LeaseRevoke(cctx, &pb.LeaseRevokeRequest{Id: s.stale}); err == nil || isLeaseNotFound(err) {
			s.stale = 0
		}
	}
	return id, lost, nil
}

// ErrNoLease is KeepAlive's error when the session holds no lease.
var ErrNoLease = errors.New("concurrency: the session holds no lease")

// KeepAlive renews the current lease now, whatever its age (Ensure renews
// only once a third of the TTL has passed), and returns its TTL in
// seconds; Renewed then reports this send. A lease found gone is ended as
// Ensure ends it (Ctx canceled; the next Ensure reports lost and grants a
// successor). ErrNoLease if there is no lease.
func (s *Session) KeepAlive(ctx context.Context) (ttl int64, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	id := s.id
	if id == 0 {
		return 0, ErrNoLease
	}
	sent := s.now()
	ttl, err = s.api.LeaseKeepAlive(ctx, id)
	switch {
	case err == nil:
		s.last = sent
		return ttl, nil
	case isLeaseNotFound(err):
		s.id, s.lost = 0, true
		s.endLocked()
	}
	return 0, fmt.Errorf("keepalive lease %d: %w", id, err)
}

// ID is the current lease (0 if none).
func (s *Session) ID() int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.id
}

// Close revokes the lease, deleting every key attached to it at once. A
// lease that is gone already is not an error.
func (s *Session) Close(ctx context.Context) error {
	s.mu.Lock()
	id := s.id
	s.id = 0
	s.endLocked()
	s.mu.Unlock()
	if id == 0 {
		return nil
	}
	cctx, cancel := context.WithTimeout(ctx, callTimeout)
	defer cancel()
	if _, err := s.api.LeaseRevoke(cctx, &pb.LeaseRevokeRequest{Id: id}); err != nil && !isLeaseNotFound(err) {
		return fmt.Errorf("revoke lease %d: %w", id, err)
	}
	return nil
}

// isLeaseNotFound recognizes a lease that no longer exists, in process
// (the sentinel) or across a gRPC boundary (a status FromStatus maps to it).
func isLeaseNotFound(err error) bool {
	return errors.Is(rpctypes.FromStatus(err), errs.ErrLeaseNotFound)
}
