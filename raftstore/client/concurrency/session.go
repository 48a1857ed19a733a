// Package concurrency holds client-side helpers built on raftps leases,
// after etcd's client/v3/concurrency: a Session is one lease kept alive on
// behalf of an agent, so the keys it holds vanish when the agent dies, and
// the agent learns when its lease was lost (to fence and re-register).
//
// A Session runs over LeaseAPI, which both the gRPC client
// (raftstore/client.Client.Leases) and a node's in-process adapter
// (raftstore/service.Local) satisfy.
//
//	s := concurrency.NewSession(api, 10) // 10 s TTL
//	id, lost, err := s.Ensure(ctx)       // call at least every TTL/3
//	if lost { /* everything attached to the old lease is gone: fence, re-register */ }
//	defer s.Close(ctx)                   // revokes the lease
//
// Session is safe for concurrent use.
package concurrency

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/raftps/raftps/fsm/errs"
)

// LeaseAPI is what a Session needs: raftstore/service.Local and the gRPC
// client's Leases adapter implement it.
type LeaseAPI interface {
	LeaseGrant(ctx context.Context, ttl int64) (int64, error)
	LeaseKeepAlive(ctx context.Context, id int64) (int64, error)
	LeaseRevoke(ctx context.Context, id int64) error
}

// Session is one lease kept alive on behalf of an agent (etcd's
// concurrency.Session): the keys an agent holds are attached to it, so they
// vanish when the agent's node dies, and the agent learns when its lease
// was lost (so it can fence what it served and re-register).
type Session struct {
	api LeaseAPI
	ttl int64 // seconds

	mu   sync.Mutex
	id   int64
	last time.Time // last successful grant or keepalive
}

// NewSession returns a session of leases of ttl seconds; Ensure grants the first.
func NewSession(api LeaseAPI, ttl int64) *Session { return &Session{api: api, ttl: ttl} }

// Ensure returns the session's live lease, granting one if there is none
// and renewing it when a third of the TTL has passed since the last
// renewal. lost is true when the previous lease turned out to be gone (a
// new one was granted in its place): everything attached to it is gone.
func (s *Session) Ensure(ctx context.Context) (id int64, lost bool, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.id != 0 && time.Since(s.last) < time.Duration(s.ttl)*time.Second/3 {
		return s.id, false, nil
	}
	cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	if s.id != 0 {
		_, err := s.api.LeaseKeepAlive(cctx, s.id)
		if err == nil {
			s.last = time.Now()
			return s.id, false, nil
		}
		if !isLeaseNotFound(err) {
			return s.id, false, fmt.Errorf("keepalive lease %d: %w", s.id, err)
		}
		s.id, lost = 0, true
	}
	id, err = s.api.LeaseGrant(cctx, s.ttl)
	if err != nil {
		return 0, lost, fmt.Errorf("grant lease: %w", err)
	}
	s.id, s.last = id, time.Now()
	return id, lost, nil
}

// ID is the current lease (0 if none).
func (s *Session) ID() int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.id
}

// Close revokes the lease, deleting every key attached to it at once.
func (s *Session) Close(ctx context.Context) error {
	s.mu.Lock()
	id := s.id
	s.id = 0
	s.mu.Unlock()
	if id == 0 {
		return nil
	}
	cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	return s.api.LeaseRevoke(cctx, id)
}

// isLeaseNotFound recognizes a lease that no longer exists, in process
// (the sentinel) or across a gRPC boundary (status NotFound).
func isLeaseNotFound(err error) bool {
	return errors.Is(err, errs.ErrLeaseNotFound) || status.Code(err) == codes.NotFound
}
