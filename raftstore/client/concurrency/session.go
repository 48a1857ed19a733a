package concurrency

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/raftps/raftps/api/errs"
	"github.com/raftps/raftps/api/rpctypes"
)

// LeaseAPI is what a Session needs: raftstore/service.Local and the gRPC
// client's Leases adapter implement it. A lease that no longer exists must
// come back as an error wrapping errs.ErrLeaseNotFound, or as a gRPC status
// that rpctypes.FromStatus maps to it.
type LeaseAPI interface {
	LeaseGrant(ctx context.Context, ttl int64) (int64, error)
	LeaseKeepAlive(ctx context.Context, id int64) (int64, error)
	LeaseRevoke(ctx context.Context, id int64) error
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

	mu    sync.Mutex
	id    int64
	last  time.Time // last successful grant or keepalive (sent at or after)
	lost  bool      // a lease was lost and no new one has been granted yet
	stale int64     // a lease given up unrenewed, to revoke when the cluster answers
}

// NewSession returns a session of leases of ttl seconds; Ensure grants the first.
func NewSession(api LeaseAPI, ttl int64) *Session {
	return &Session{api: api, ttl: ttl, now: time.Now}
}

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
		case s.now().Sub(s.last) >= ttl:
			// Not renewed for a whole TTL: treat it as gone at once (the
			// caller fences now; the next Ensure grants a successor), and
			// revoke it once the cluster answers again (a new leader may
			// have given it a fresh TTL, and its keys would linger).
			old := s.id
			s.stale, s.id, s.lost = old, 0, true
			return 0, true, fmt.Errorf("lease %d not renewed for its TTL of %v: %w", old, ttl, err)
		default:
			return s.id, false, fmt.Errorf("keepalive lease %d: %w", s.id, err)
		}
	}
	cctx, cancel := context.WithTimeout(ctx, callTimeout)
	defer cancel()
	sent := s.now()
	id, err = s.api.LeaseGrant(cctx, s.ttl)
	if err != nil {
		return 0, s.lost, fmt.Errorf("grant lease: %w", err)
	}
	lost, s.lost = s.lost, false
	s.id, s.last = id, sent
	if s.stale != 0 {
		if err := s.api.LeaseRevoke(cctx, s.stale); err == nil || isLeaseNotFound(err) {
			s.stale = 0
		}
	}
	return id, lost, nil
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
	s.mu.Unlock()
	if id == 0 {
		return nil
	}
	cctx, cancel := context.WithTimeout(ctx, callTimeout)
	defer cancel()
	if err := s.api.LeaseRevoke(cctx, id); err != nil && !isLeaseNotFound(err) {
		return fmt.Errorf("revoke lease %d: %w", id, err)
	}
	return nil
}

// isLeaseNotFound recognizes a lease that no longer exists, in process
// (the sentinel) or across a gRPC boundary (a status FromStatus maps to it).
func isLeaseNotFound(err error) bool {
	return errors.Is(rpctypes.FromStatus(err), errs.ErrLeaseNotFound)
}
