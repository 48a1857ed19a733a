package raftstore

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	pb "github.com/raftps/raftps/api/raftpspb"
	"github.com/raftps/raftps/fsm"
)

// leaseTimers are the leader's lease deadlines. They live only on the
// leader and only in memory: grants and revokes go through Raft (the FSM
// holds each lease's TTL and keys), keepalives only move a deadline, and a
// new leader gives every lease a full TTL from the moment it establishes
// leadership.
type leaseTimers struct {
	mu       sync.Mutex
	active   bool                // this server leads and has established leadership
	deadline map[int64]time.Time // lease ID → expiry
	revoking map[int64]time.Time // lease ID → when the revoke was last proposed
	// arrived is when the last renewal of a lease arrived at this leader
	// since it established leadership: a keepalive (recorded before the
	// lease is looked up, so every keepalive that succeeds before a revoke
	// applies is in it) or the lease's grant (recorded as the grant
	// applies, after the grant was sent: the holder counts its grant as a
	// renewal). Cleared on step-down: a new leader does not know it.
	arrived map[int64]time.Time
	// since is when (local clock, with its monotonic reading) this server
	// established its leadership in term sinceTerm: taken under mu as
	// active turns on, so every keepalive arrival not recorded in arrived
	// happened before it.
	since     time.Time
	sinceTerm uint64

	check leaderCheck
}

// arrivalKeep is how long the arrival of a lease's last keepalive is kept
// after the lease is gone (for LeaseLastKeepAlive after a revoke).
const arrivalKeep = time.Minute

func newLeaseTimers() *leaseTimers {
	return &leaseTimers{deadline: map[int64]time.Time{}, revoking: map[int64]time.Time{}, arrived: map[int64]time.Time{}}
}

// ttlDuration converts a TTL in seconds, clamped to fsm.MaxLeaseTTL so
// that the product cannot overflow (grants above it are refused; the clamp
// covers leases granted before the bound existed).
func ttlDuration(ttl int64) time.Duration {
	return time.Duration(min(ttl, fsm.MaxLeaseTTL)) * time.Second
}

// establish starts the timers: every lease the FSM holds gets now+TTL. It
// turns the timers on before reading the leases, so a grant applied
// concurrently is seen by one path or the other, and records the start of
// leadership in term (read before the call, so the start is after the
// term began). It returns the number of leases.
func (t *leaseTimers) establish(now time.Time, term uint64, leases func() []fsm.LeaseInfo) int {
	t.mu.Lock()
	t.active = true
	t.since, t.sinceTerm = time.Now(), term
	t.mu.Unlock()
	ls := leases()
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, l := range ls {
		if _, ok := t.deadline[l.ID]; !ok {
			t.deadline[l.ID] = now.Add(ttlDuration(l.TTL))
		}
	}
	return len(t.deadline)
}

// stepDown forgets all deadlines.
func (t *leaseTimers) stepDown() {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.active = false
	clear(t.deadline)
	clear(t.revoking)
	clear(t.arrived)
}

// arrival records that a keepalive for lease id arrived at now (only while
// leadership is established).
func (t *leaseTimers) arrival(now time.Time, id int64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.active && now.After(t.arrived[id]) {
		t.arrived[id] = now
	}
}

// lastArrival returns when the last keepalive for lease id arrived since
// leadership was established in term; ok is false if none did (or this
// server does not lead).
func (t *leaseTimers) lastArrival(id int64) (at time.Time, term uint64, ok bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	at, ok = t.arrived[id]
	return at, t.sinceTerm, ok && t.active
}

// leaderSince returns when leadership was established and in which term;
// ok is false if this server does not lead (or has not established yet).
func (t *leaseTimers) leaderSince() (at time.Time, term uint64, ok bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.since, t.sinceTerm, t.active
}

// applied records grants (deadline now+TTL, and now as the lease's last
// arrival) and revokes from an FSM notification. A grant applied before
// establish is covered by since, which is taken later.
func (t *leaseTimers) applied(now time.Time, granted []fsm.LeaseInfo, revoked []int64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if !t.active {
		return
	}
	for _, l := range granted {
		t.deadline[l.ID] = now.Add(ttlDuration(l.TTL))
		if now.After(t.arrived[l.ID]) {
			t.arrived[l.ID] = now
		}
	}
	for _, id := range revoked {
		delete(t.deadline, id)
		delete(t.revoking, id)
	}
}

// resync follows a snapshot restore: leases gone from the FSM are
// dropped, new ones get now+TTL.
func (t *leaseTimers) resync(now time.Time, ls []fsm.LeaseInfo) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if !t.active {
		return
	}
	live := make(map[int64]bool, len(ls))
	for _, l := range ls {
		live[l.ID] = true
		if _, ok := t.deadline[l.ID]; !ok {
			t.deadline[l.ID] = now.Add(ttlDuration(l.TTL))
		}
	}
	for id := range t.deadline {
		if !live[id] {
			delete(t.deadline, id)
			delete(t.revoking, id)
		}
	}
}

// keepAlive moves lease id's deadline to now+ttl. ok is false if the lease
// has expired already (its revoke is on the way).
func (t *leaseTimers) keepAlive(now time.Time, id, ttl int64) (ok bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if !t.active {
		return true // establish will give it a full TTL
	}
	if d, tracked := t.deadline[id]; tracked && !now.Before(d) {
		return false
	}
	t.deadline[id] = now.Add(ttlDuration(ttl))
	return true
}

// remaining returns the time left on lease id; tracked is false if the
// timers do not know it (then the caller reports the full TTL).
func (t *leaseTimers) remaining(now time.Time, id int64) (left time.Duration, tracked bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	d, ok := t.deadline[id]
	if !ok || !t.active {
		return 0, false
	}
	return d.Sub(now), true
}

// expired returns the leases past their deadline whose revoke has not been
// proposed within retry.
func (t *leaseTimers) expired(now time.Time, retry time.Duration) []int64 {
	t.mu.Lock()
	defer t.mu.Unlock()
	for id, at := range t.arrived {
		if _, live := t.deadline[id]; !live && now.Sub(at) > arrivalKeep {
			delete(t.arrived, id)
		}
	}
	var ids []int64
	for id, d := range t.deadline {
		if now.Before(d) {
			continue
		}
		if last, ok := t.revoking[id]; ok && now.Sub(last) < retry {
			continue
		}
		t.revoking[id] = now
		ids = append(ids, id)
	}
	return ids
}

func (t *leaseTimers) forget(id int64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	delete(t.deadline, id)
	delete(t.revoking, id)
}

func (t *leaseTimers) count() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.deadline)
}

// runLeaseExpiry revokes expired leases through Raft until ctx ends.
func (s *Store) runLeaseExpiry(ctx context.Context) {
	tick := s.cfg.ElectionTimeout / 10
	if tick < 10*time.Millisecond {
		tick = 10 * time.Millisecond
	}
	t := time.NewTicker(tick)
	defer t.Stop()
	retry := 2 * s.cfg.ElectionTimeout
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-t.C:
			for _, id := range s.leases.expired(now, retry) {
				go s.revokeExpired(ctx, id, retry)
			}
		}
	}
}

func (s *Store) revokeExpired(ctx context.Context, id int64, timeout time.Duration) {
	cmd, err := fsm.NewCommand(pb.CommandType_COMMAND_LEASE_REVOKE, &pb.LeaseRevokeRequest{Id: id})
	if err != nil {
		s.logger.Error("lease revoke: encode", "lease", id, "err", err)
		return
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	if _, err := s.applyLocal(ctx, cmd); err != nil {
		if errors.Is(err, fsm.ErrLeaseNotFound) {
			s.leases.forget(id) // revoked by a client meanwhile
			return
		}
		s.logger.Warn("lease revoke failed (will retry)", "lease", id, "err", err)
		return
	}
	s.logger.Debug("lease expired and revoked", "lease", id)
}

// LeaseKeepAlive renews lease id on the leader (a follower forwards) and
// returns its TTL in seconds. The lease's deadline moves to now+TTL on the
// leader's clock; nothing goes through Raft. Errors: fsm.ErrLeaseNotFound
// if the lease does not exist or has expired.
func (s *Store) LeaseKeepAlive(ctx context.Context, id int64) (ttl int64, err error) {
	err = s.onLeaderIdempotent(ctx,
		func() error {
			var err error
			ttl, err = s.LeaseKeepAliveLocal(ctx, id)
			return err
		},
		func(lid, addr string) error {
			var err error
			ttl, err = s.fwd.LeaseKeepAlive(ctx, lid, addr, id)
			return err
		})
	return ttl, err
}

// LeaseKeepAliveLocal is LeaseKeepAlive without forwarding (ErrNotLeader
// unless leader); the Internal.LeaseKeepAliveOnce handler calls it. Like
// a read, it first waits until this leader has applied an entry of its own
// term (ensureOwnTerm): before that its FSM may lack a lease the previous
// leader granted, and a live lease would be reported gone.
//
// It then confirms leadership with a quorum (confirmLeader: a
// hashicorp/raft VerifyLeader round that started after the keepalive
// arrived, bounded by Config.ElectionTimeout) and refuses the keepalive
// with ErrNotLeader if that fails: keepalives do not go through the Raft
// loop, so a leader whose loop is stalled (a hung fsync) and which a new
// leader has replaced would otherwise renew leases indefinitely while the
// new leader revokes them (etcd-io/etcd#15247; etcd 3.5.8's
// ensureLeadership). The client then retries elsewhere or, past its
// deadline, fences.
func (s *Store) LeaseKeepAliveLocal(ctx context.Context, id int64) (int64, error) {
	if err := s.leaseLeader(ctx); err != nil {
		return 0, err
	}
	s.leases.arrival(time.Now(), id)
	if err := s.confirmLeader(ctx); err != nil {
		return 0, err
	}
	l, ok := s.fsm.Lease(id)
	if !ok || !s.leases.keepAlive(time.Now(), id, l.TTL) {
		return 0, fmt.Errorf("%w: %d", fsm.ErrLeaseNotFound, id)
	}
	return l.TTL, nil
}

// LeaseLastKeepAlive returns when (this server's clock, with its monotonic
// reading) the last renewal of lease id arrived at this server since it
// established its leadership: a keepalive, whether it succeeded or not, or
// the grant itself if it applied here since then (a holder counts its
// grant as its first renewal: pserver/agent's watchdog); ok is false if
// none did or it does not lead. Every keepalive that succeeds arrives
// before the lease's revoke applies, and a grant is sent before it
// applies, so read after the revoke it bounds the send of the holder's
// last successful renewal (package master uses it for slot handover,
// schema.HandoverRecord). Leader-local: nothing of it is replicated, and a
// new leader starts without it.
func (s *Store) LeaseLastKeepAlive(id int64) (at time.Time, ok bool) {
	at, term, ok := s.leases.lastArrival(id)
	if !ok || !s.leadsIn(term) {
		return time.Time{}, false
	}
	return at, true
}

// LeaderSince returns when (this server's clock, with its monotonic
// reading) this server established its current leadership: after it won
// the election (after a quorum voted for its term) and before it recorded
// any keepalive arrival (LeaseLastKeepAlive). ok is false unless it leads
// and has established leadership in its current term. Leader-local,
// nothing of it is replicated.
//
// Since every keepalive a leader acknowledges was confirmed by a quorum
// after it arrived (LeaseKeepAliveLocal), and a server that voted for a
// later term refuses the older leader, every keepalive acknowledged by an
// earlier leader arrived, and was sent, before LeaderSince (package master
// uses it for slot handover when LeaseLastKeepAlive knows nothing).
func (s *Store) LeaderSince() (at time.Time, ok bool) {
	at, term, ok := s.leases.leaderSince()
	if !ok || !s.leadsIn(term) {
		return time.Time{}, false
	}
	return at, true
}

// leadsIn reports whether this server leads in term.
func (s *Store) leadsIn(term uint64) bool {
	return s.raft != nil && s.IsLeader() && s.raft.CurrentTerm() == term
}

// leaderCheck coalesces the leadership confirmations of keepalives: one
// VerifyLeader round runs at a time; a keepalive that arrives while none
// runs starts one, and every keepalive that arrives while one runs joins
// the next round, which starts when the running one ends. So a keepalive
// is only ever acknowledged by a round that started after it arrived,
// and a burst of keepalives costs at most two rounds.
//
// A limit of hashicorp/raft (v1.7): its VerifyLeader round counts the
// answer to any AppendEntries that returns after the round registered,
// including one sent just before (a heartbeat in flight, or a pipelined
// append), where etcd's ReadIndex tags heartbeats with the request. A
// follower that answered can vote for a new term only after it has not
// heard the leader for HeartbeatTimeout (it refuses votes while it has a
// leader), so the guarantee above fails only if such an answer was in
// flight for longer than HeartbeatTimeout (500 ms by default).
type leaderCheck struct {
	mu      sync.Mutex
	running bool         // a round is in flight
	next    *verifyRound // the round to start when the running one ends
	// pending is set while a VerifyLeader future has not resolved (it may
	// outlive its round's timeout if the Raft loop is stalled): no second
	// one is queued behind it.
	pending atomic.Bool
	rounds  atomic.Uint64 // rounds run (tests)
}

type verifyRound struct {
	done chan struct{}
	err  error // set before done is closed
}

// confirmLeader returns nil once a quorum has confirmed this server's
// leadership in a round that started after the call; ErrNotLeader (wrapped)
// if the round failed or did not finish within Config.ElectionTimeout;
// ctx's error if ctx ends first.
func (s *Store) confirmLeader(ctx context.Context) error {
	c := &s.leases.check
	c.mu.Lock()
	if c.next == nil {
		c.next = &verifyRound{done: make(chan struct{})}
	}
	r := c.next
	if !c.running {
		c.running, c.next = true, nil
		go s.runRounds(r)
	}
	c.mu.Unlock()
	select {
	case <-r.done:
		return r.err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// runRounds runs round r, then the rounds joined meanwhile, until none is waiting.
func (s *Store) runRounds(r *verifyRound) {
	c := &s.leases.check
	for r != nil {
		c.rounds.Add(1)
		r.err = s.verifyLeader(s.cfg.ElectionTimeout)
		close(r.done)
		c.mu.Lock()
		r, c.next = c.next, nil
		if r == nil {
			c.running = false
		}
		c.mu.Unlock()
	}
}

// verifyLeader runs one VerifyLeader round, bounded by timeout.
func (s *Store) verifyLeader(timeout time.Duration) error {
	c := &s.leases.check
	if !c.pending.CompareAndSwap(false, true) {
		return fmt.Errorf("%w: leadership unconfirmed: the previous confirmation has not returned (Raft loop stalled?)", ErrNotLeader)
	}
	f := s.raft.VerifyLeader()
	done := make(chan error, 1)
	go func() {
		err := f.Error()
		c.pending.Store(false)
		done <- err
	}()
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case err := <-done:
		if err != nil && !errors.Is(err, ErrNotLeader) {
			// raft.ErrNotLeader, ErrLeadershipLost, ErrRaftShutdown: this
			// server cannot vouch for the lease.
			err = fmt.Errorf("%w: %w", ErrNotLeader, err)
		}
		return err
	case <-t.C:
		return fmt.Errorf("%w: leadership not confirmed by a quorum within %v", ErrNotLeader, timeout)
	case <-s.stopping:
		return ErrNotOpen
	}
}

// LeaseOwner returns the owner recorded for lease id (fsm.LeaseInfo.Owner).
// A lease this node has not applied yet is looked up again after a
// linearizable read, so a grant the caller saw acknowledged is found on a
// follower too. Errors: fsm.ErrLeaseNotFound, those of LinearizableRead.
func (s *Store) LeaseOwner(ctx context.Context, id int64) (string, error) {
	if o, ok := s.fsm.LeaseOwner(id); ok {
		return o, nil
	}
	if err := s.LinearizableRead(ctx); err != nil {
		return "", err
	}
	if o, ok := s.fsm.LeaseOwner(id); ok {
		return o, nil
	}
	return "", fmt.Errorf("%w: lease %d", fsm.ErrLeaseNotFound, id)
}

// LeaseTimeToLive returns the seconds left on lease id as the leader's
// timer sees it (rounded up; a follower forwards). Errors:
// fsm.ErrLeaseNotFound.
func (s *Store) LeaseTimeToLive(ctx context.Context, id int64) (ttl int64, err error) {
	err = s.onLeaderIdempotent(ctx,
		func() error {
			var err error
			ttl, err = s.LeaseTimeToLiveLocal(ctx, id)
			return err
		},
		func(lid, addr string) error {
			var err error
			ttl, err = s.fwd.LeaseTimeToLive(ctx, lid, addr, id)
			return err
		})
	return ttl, err
}

// LeaseTimeToLiveLocal is LeaseTimeToLive without forwarding; it waits
// for the own-term barrier and confirms leadership with a quorum as
// LeaseKeepAliveLocal does: the timers are the leader's, and a leader cut
// off and replaced (its Raft loop stalled, so it has not stepped down)
// would otherwise report a lease alive that the new leader has revoked.
func (s *Store) LeaseTimeToLiveLocal(ctx context.Context, id int64) (int64, error) {
	if err := s.leaseLeader(ctx); err != nil {
		return 0, err
	}
	if err := s.confirmLeader(ctx); err != nil {
		return 0, err
	}
	l, ok := s.fsm.Lease(id)
	if !ok {
		return 0, fmt.Errorf("%w: %d", fsm.ErrLeaseNotFound, id)
	}
	left, tracked := s.leases.remaining(time.Now(), id)
	if !tracked {
		return l.TTL, nil
	}
	if left <= 0 {
		return 0, fmt.Errorf("%w: %d (expired)", fsm.ErrLeaseNotFound, id)
	}
	return int64((left + time.Second - 1) / time.Second), nil
}

// leaseLeader checks that this server is open and leads, and that its FSM
// holds everything committed before its term (ensureOwnTerm, once per term).
func (s *Store) leaseLeader(ctx context.Context) error {
	if err := s.checkOpen(); err != nil {
		return err
	}
	if !s.IsLeader() {
		return ErrNotLeader
	}
	_, err := s.ensureOwnTerm(ctx)
	return err
}
