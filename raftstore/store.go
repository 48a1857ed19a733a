package raftstore

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/raft"

	pb "github.com/raftps/raftps/api/raftpspb"
	"github.com/raftps/raftps/api/rpctypes"
	"github.com/raftps/raftps/fsm"
	"github.com/raftps/raftps/internal/groupcommit"
)

// Errors of the store, checked with errors.Is.
// ErrNotLeader, ErrNoLeader and ErrNotOpen are defined in api/rpctypes (so
// that clients can check them without importing the server) and
// re-exported here; the values are identical.
var (
	// ErrNotLeader: the call needs the leader and this server is not it (or
	// no leader was known before the context ended; then it also wraps ErrNoLeader).
	ErrNotLeader = rpctypes.ErrNotLeader
	// ErrOpen: Open was called on an open store.
	ErrOpen = errors.New("raftstore: already open")
	// ErrNotOpen: the store is not open (never opened, or closed).
	ErrNotOpen = rpctypes.ErrNotOpen
	// ErrNoLeader: the cluster has no known leader.
	ErrNoLeader = rpctypes.ErrNoLeader
	// ErrDataDirMismatch: the data dir belongs to another node ID.
	ErrDataDirMismatch = errors.New("raftstore: data dir belongs to another node")
)

// Forwarder carries calls to the leader when this server is not it. The
// node's gRPC layer implements it (Internal service); leaderID and
// leaderAddr are the leader's Raft server ID and Raft address, which the
// implementation maps to the leader's gRPC endpoint. An implementation
// should return an error wrapping ErrNotLeader when the target turned out
// not to be the leader: the store then retries with the new leader.
type Forwarder interface {
	ForwardApply(ctx context.Context, leaderID, leaderAddr string, cmd *pb.Command) (*pb.Result, error)
	ReadIndex(ctx context.Context, leaderID, leaderAddr string) (uint64, error)
	LeaseKeepAlive(ctx context.Context, leaderID, leaderAddr string, id int64) (ttl int64, err error)
	LeaseTimeToLive(ctx context.Context, leaderID, leaderAddr string, id int64) (ttl int64, err error)
}

// Status is a point-in-time view of the server (Store.Stats).
type Status struct {
	ID           string
	State        string // Follower, Candidate, Leader, Shutdown
	Term         uint64
	CommitIndex  uint64
	AppliedIndex uint64 // the FSM's (last command applied)
	LastLogIndex uint64
	Leader       string // leader's Raft address, "" if unknown
	LeaderID     string
	Revision     int64
	ClusterID    string // "" until known (see Store.ClusterID)
}

// Store is one server of the Raft group: hashicorp/raft over a TCP
// transport, log and stable store (Config.LogStore) and file snapshots, in front of a
// *fsm.FSM. Lifecycle: New → Open → Close. All methods are safe for
// concurrent use.
type Store struct {
	cfg    Config
	fsm    *fsm.FSM
	fwd    Forwarder
	logger *slog.Logger

	mu      sync.Mutex // guards opened, closing, closed
	opened  bool
	closing bool // Close has been called (calls keep working during the handover)
	closed  bool // Raft is being or has been shut down

	raft  *raft.Raft
	trans raft.Transport
	logs  logStore // the log and stable store
	snaps raft.SnapshotStore

	stopping    chan struct{} // closed at Close
	wg          sync.WaitGroup
	workersDone chan struct{} // closed when the store's goroutines have exited

	notifyCh   chan bool // raft.Config.NotifyCh
	leaderMu   sync.Mutex
	leaderSubs []chan bool
	leaderLast *bool

	proposeCh chan *proposal
	inflight  chan struct{} // one token per proposed, unresolved entry
	waitCh    chan pendingEntry
	group     groupcommit.Tracker // the batcher's group commit

	wakeMu sync.Mutex
	wake   chan struct{} // closed and replaced on every FSM notification

	observers atomic.Pointer[[]fsm.Observer]

	barrierSem chan struct{}
	readyTerm  atomic.Uint64 // term in which this leader committed a barrier

	leases  *leaseTimers
	metrics *storeMetrics
	hub     *watchHub // watchers (watch.go)

	wrapLogs    func(raft.LogStore) raft.LogStore // tests: wraps the log store (set before Open)
	verifyState                                   // Config.LogVerifyInterval (verify.go)

	clusterID atomic.Pointer[string]
	transfers atomic.Int64 // successful leadership transfers at Close
}

// New returns a Store for f; it does no I/O (Open does). fwd may be nil,
// then a follower answers ErrNotLeader instead of forwarding. New installs
// the store as f's Observer (use Store.Observe to receive notifications too).
func New(cfg Config, f *fsm.FSM, fwd Forwarder) (*Store, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if f == nil {
		return nil, errors.New("raftstore: nil FSM")
	}
	cfg = cfg.withDefaults()
	s := &Store{
		cfg:         cfg,
		fsm:         f,
		fwd:         fwd,
		logger:      cfg.Logger.With("component", "raftstore", "id", cfg.ID),
		stopping:    make(chan struct{}),
		workersDone: make(chan struct{}),
		notifyCh:    make(chan bool, 16),
		proposeCh:   make(chan *proposal, 4*cfg.MaxBatch),
		waitCh:      make(chan pendingEntry, 1024),
		inflight:    make(chan struct{}, cfg.MaxInflight),
		wake:        make(chan struct{}),
		barrierSem:  make(chan struct{}, 1),
		leases:      newLeaseTimers(),
		hub:         newWatchHub(),
	}
	s.metrics = newStoreMetrics(s)
	f.SetObserver(observer{s})
	return s, nil
}

// Open opens the data dir, starts Raft and, if Config.Bootstrap is set and
// the data dir holds no Raft state, bootstraps the cluster. It returns
// ErrOpen if called twice, ErrDataDirMismatch if the data dir belongs to
// another node ID.
func (s *Store) Open() (err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.opened {
		return ErrOpen
	}
	if s.closing || s.closed {
		return ErrNotOpen
	}
	dir := filepath.Join(s.cfg.DataDir, "raft")
	if err := checkDataDir(dir, s.cfg.ID); err != nil {
		return err
	}
	hcl := newHCLogger(s.cfg.Logger.With("component", "raft", "id", s.cfg.ID), "raft")

	kind, err := resolveLogStore(dir, s.cfg.LogStore)
	if err != nil {
		return err
	}
	ls, err := openLogStore(dir, kind, hcl.Named("wal"))
	if err != nil {
		return err
	}
	defer func() {
		if err != nil {
			ls.Close()
		}
	}()
	snaps, err := openSnapshotStore(dir, 2, hcl.Named("snapshot"))
	if err != nil {
		return fmt.Errorf("raftstore: open snapshot store %q: %w", dir, err)
	}
	trans, err := s.openTransport(hcl)
	if err != nil {
		return err
	}
	if nt, ok := trans.(*raft.NetworkTransport); ok {
		trans = serialTransport{nt} // heartbeats on the main loop (heartbeat.go)
	}
	defer func() {
		if err != nil {
			closeTransport(trans)
		}
	}()

	hasState, err := raft.HasExistingState(ls, ls, snaps)
	if err != nil {
		return fmt.Errorf("raftstore: check existing state: %w", err)
	}
	cid, err := checkClusterID(dir, ls)
	if err != nil {
		return err
	}
	s.clusterID.Store(&cid)
	rc := s.cfg.raftConfig(s.notifyCh)
	rc.Logger = hcl
	if s.cfg.ForceNewCluster && hasState {
		if err := s.forceNewCluster(rc, ls, ls, snaps, trans); err != nil {
			return err
		}
	}
	var logs raft.LogStore = ls
	if s.wrapLogs != nil {
		logs = s.wrapLogs(ls)
	}
	logs = s.verifyLogs(logs)
	defer func() {
		if err != nil && s.verifier != nil {
			s.verifier.Close()
			s.verifier = nil
		}
	}()
	r, err := raft.NewRaft(rc, s.fsm, logs, ls, snaps, trans)
	if err != nil {
		return fmt.Errorf("raftstore: start raft: %w", err)
	}
	if s.cfg.Bootstrap && !hasState {
		servers := s.cfg.BootstrapServers
		if len(servers) == 0 {
			servers = []raft.Server{{Suffrage: raft.Voter, ID: raft.ServerID(s.cfg.ID), Address: trans.LocalAddr()}}
		}
		s.logger.Info("bootstrapping cluster", "servers", len(servers))
		if err := r.BootstrapCluster(raft.Configuration{Servers: servers}).Error(); err != nil && !errors.Is(err, raft.ErrCantBootstrap) {
			r.Shutdown().Error()
			return fmt.Errorf("raftstore: bootstrap: %w", err)
		}
	} else if s.cfg.Bootstrap {
		s.logger.Info("existing raft state found, not bootstrapping")
	}
	s.raft, s.trans, s.logs, s.snaps = r, trans, ls, snaps
	s.hub.mu.Lock()
	s.hub.rev = s.fsm.Revision() // the dispatcher hands out what comes after
	s.hub.mu.Unlock()
	s.opened = true

	internal := s.LeaderCh()
	if cid == "" {
		s.wg.Add(1)
		go s.learnClusterID(dir)
	}
	s.wg.Add(5)
	go s.runWatchDispatch()
	go s.runNotify()
	go s.runBatcher()
	go s.runWaiter()
	go s.runLeaderLoop(internal)
	if s.verifier != nil {
		s.wg.Add(1)
		go s.runCheckpoints(s.cfg.LogVerifyInterval)
	}
	s.logger.Info("raft store open", "raft_addr", string(trans.LocalAddr()), "data_dir", dir, "existing_state", hasState)
	return nil
}

// Close hands leadership over if this server leads (bounded wait and
// retry, see doc.go on hashicorp/raft #696), stops Raft, closes the
// transport and the bolt store. It is safe to call twice; the second call
// returns nil. Closing a store that was never opened returns ErrNotOpen.
func (s *Store) Close() error {
	s.mu.Lock()
	if s.closing || s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closing = true
	if !s.opened {
		s.closed = true
		s.mu.Unlock()
		return ErrNotOpen
	}
	s.mu.Unlock()

	// Hand over leadership while the store still serves: writes that meet
	// the transfer are retried against the new leader.
	if s.raft.State() == raft.Leader {
		s.transferLeadership()
	}
	s.mu.Lock()
	s.closed = true
	s.mu.Unlock()
	close(s.stopping)
	var errs []error
	if err := s.raft.Shutdown().Error(); err != nil {
		errs = append(errs, fmt.Errorf("raftstore: raft shutdown: %w", err))
	}
	s.wg.Wait()
	close(s.workersDone)
	if err := closeTransport(s.trans); err != nil {
		errs = append(errs, fmt.Errorf("raftstore: close transport: %w", err))
	}
	if s.verifier != nil {
		s.verifier.Close() // stops its goroutine; Raft no longer writes
	}
	if err := s.logs.Close(); err != nil {
		errs = append(errs, fmt.Errorf("raftstore: close log store: %w", err))
	}
	s.logger.Info("raft store closed")
	return errors.Join(errs...)
}

// openTransport returns Config.Transport if set, else a TCP transport on
// Config.RaftAddr advertising Config.AdvertiseAddr.
func (s *Store) openTransport(hcl *hcLogger) (raft.Transport, error) {
	if s.cfg.Transport != nil {
		return s.cfg.Transport, nil
	}
	var adv net.Addr
	if s.cfg.AdvertiseAddr != "" {
		a, err := net.ResolveTCPAddr("tcp", s.cfg.AdvertiseAddr)
		if err != nil {
			return nil, fmt.Errorf("raftstore: advertise address %q: %w", s.cfg.AdvertiseAddr, err)
		}
		adv = a
	}
	if s.cfg.TLS != nil {
		trans, err := newTLSTransport(s.cfg.RaftAddr, adv, s.cfg.TLS, hcl.Named("transport"))
		if err != nil {
			return nil, fmt.Errorf("raftstore: raft TLS transport on %q: %w", s.cfg.RaftAddr, err)
		}
		return trans, nil
	}
	trans, err := raft.NewTCPTransportWithLogger(s.cfg.RaftAddr, adv, 3, 10*time.Second, hcl.Named("transport"))
	if err != nil {
		return nil, fmt.Errorf("raftstore: raft transport on %q: %w", s.cfg.RaftAddr, err)
	}
	return trans, nil
}

// closeTransport closes t if it can be closed.
func closeTransport(t raft.Transport) error {
	if c, ok := t.(raft.WithClose); ok {
		return c.Close()
	}
	return nil
}

// transferLeadership tries up to 3 times, each bounded by
// Config.TransferTimeout, to hand leadership to another voter. A transfer
// that hangs (#696 class) is abandoned: Shutdown follows regardless.
func (s *Store) transferLeadership() {
	cf := s.raft.GetConfiguration()
	if err := cf.Error(); err != nil {
		return
	}
	others := 0
	for _, srv := range cf.Configuration().Servers {
		if srv.Suffrage == raft.Voter && string(srv.ID) != s.cfg.ID {
			others++
		}
	}
	if others == 0 {
		return
	}
	for attempt := 1; attempt <= 3; attempt++ {
		done := make(chan error, 1)
		go func() { done <- s.raft.LeadershipTransfer().Error() }()
		select {
		case err := <-done:
			if err == nil {
				s.transfers.Add(1)
				s.logger.Info("leadership transferred", "attempt", attempt)
				return
			}
			s.logger.Warn("leadership transfer failed", "attempt", attempt, "err", err)
			if errors.Is(err, raft.ErrNotLeader) {
				return
			}
		case <-time.After(s.cfg.TransferTimeout):
			s.logger.Warn("leadership transfer timed out", "attempt", attempt, "timeout", s.cfg.TransferTimeout)
		}
		if s.raft.State() != raft.Leader {
			return
		}
	}
	s.logger.Warn("giving up leadership transfer; shutting down as leader")
}

func (s *Store) checkOpen() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.opened || s.closed {
		return ErrNotOpen
	}
	return nil
}

// FSM returns the state machine the store applies to.
func (s *Store) FSM() *fsm.FSM { return s.fsm }

// Raft returns the underlying *raft.Raft (nil before Open), for tests and
// operations that the store does not wrap.
func (s *Store) Raft() *raft.Raft { return s.raft }

// Addr returns the Raft transport's address (useful with ":0" binds).
func (s *Store) Addr() string {
	if s.trans == nil {
		return ""
	}
	return string(s.trans.LocalAddr())
}

// ID returns the server ID.
func (s *Store) ID() string { return s.cfg.ID }

// ClusterID returns the ID of the cluster this server belongs to (16 hex
// digits derived from the bootstrap configuration, log entry 1, and
// recorded in <DataDir>/raft/cluster-id), or "" until it is known. A
// server that joined after entry 1 was compacted away never learns it.
func (s *Store) ClusterID() string {
	if p := s.clusterID.Load(); p != nil {
		return *p
	}
	return ""
}

// learnClusterID waits for log entry 1 (bootstrap or replication from the
// leader) and records the cluster ID.
func (s *Store) learnClusterID(dir string) {
	defer s.wg.Done()
	t := time.NewTicker(200 * time.Millisecond)
	defer t.Stop()
	for {
		select {
		case <-s.stopping:
			return
		case <-t.C:
		}
		if first, err := s.logs.FirstIndex(); err != nil || first > 1 {
			if first > 1 {
				s.logger.Info("cluster id unknown: log entry 1 was compacted before this server saw it")
				return
			}
			continue
		}
		cid, err := checkClusterID(dir, s.logs)
		if err != nil {
			s.logger.Error("cluster id", "err", err)
			return
		}
		if cid != "" {
			s.clusterID.Store(&cid)
			s.logger.Info("cluster id recorded", "cluster_id", cid)
			return
		}
	}
}

// IsLeader reports whether this server is the Raft leader right now (not
// linearizable: use ReadIndex for that).
func (s *Store) IsLeader() bool { return s.raft != nil && s.raft.State() == raft.Leader }

// LeaderWithID returns the current leader's Raft address and ID, or empty
// strings if none is known.
func (s *Store) LeaderWithID() (addr, id string) {
	if s.raft == nil {
		return "", ""
	}
	a, i := s.raft.LeaderWithID()
	return string(a), string(i)
}

// WaitForLeader blocks until some leader is known or ctx ends.
func (s *Store) WaitForLeader(ctx context.Context) error {
	_, _, err := s.waitLeader(ctx)
	return err
}

// waitLeader polls for a known leader until ctx ends; the error then wraps
// ErrNotLeader, ErrNoLeader and the context's error.
func (s *Store) waitLeader(ctx context.Context) (addr, id string, err error) {
	if err := s.checkOpen(); err != nil {
		return "", "", err
	}
	t := time.NewTicker(10 * time.Millisecond)
	defer t.Stop()
	for {
		if addr, id = s.LeaderWithID(); id != "" {
			return addr, id, nil
		}
		select {
		case <-ctx.Done():
			return "", "", fmt.Errorf("%w (%w): %w", ErrNotLeader, ErrNoLeader, ctx.Err())
		case <-s.stopping:
			return "", "", ErrNotOpen
		case <-t.C:
		}
	}
}

// Stats returns a snapshot of the server's Raft and FSM state.
func (s *Store) Stats() Status {
	st := Status{ID: s.cfg.ID, Revision: s.fsm.Revision(), AppliedIndex: s.fsm.AppliedIndex(), ClusterID: s.ClusterID()}
	if s.raft == nil {
		st.State = "Closed"
		return st
	}
	st.State = s.raft.State().String()
	st.Term = s.raft.CurrentTerm()
	st.CommitIndex = s.raft.CommitIndex()
	st.LastLogIndex = s.raft.LastIndex()
	st.Leader, st.LeaderID = s.LeaderWithID()
	return st
}

// timeout converts ctx's deadline into a hashicorp/raft enqueue timeout (0 = none).
func (s *Store) timeout(ctx context.Context) time.Duration {
	if d, ok := ctx.Deadline(); ok {
		if t := time.Until(d); t > 0 {
			return t
		}
		return time.Millisecond
	}
	return 0
}

// futureErr waits for f or ctx, mapping raft.ErrNotLeader to ErrNotLeader.
func (s *Store) futureErr(ctx context.Context, f raft.Future) error {
	done := make(chan error, 1)
	go func() { done <- f.Error() }()
	select {
	case err := <-done:
		return mapRaftErr(err)
	case <-ctx.Done():
		return ctx.Err()
	}
}

// mapRaftErr wraps hashicorp/raft's "not leader" as ErrNotLeader (keeping
// the original for errors.Is).
func mapRaftErr(err error) error {
	if err == nil {
		return nil
	}
	if errors.Is(err, raft.ErrNotLeader) && !errors.Is(err, ErrNotLeader) {
		return fmt.Errorf("%w: %w", ErrNotLeader, err)
	}
	return err
}

// observer receives the FSM's notifications (on Raft's FSM goroutine; it
// must not block): it feeds the leader's lease timers and wakes waiters and
// watchers.
type observer struct{ s *Store }

func (o observer) Applied(n fsm.Notification) {
	s := o.s
	switch {
	case n.Restored:
		s.leases.resync(time.Now(), s.fsm.Leases())
	case len(n.LeasesGranted) > 0 || len(n.LeasesRevoked) > 0:
		s.leases.applied(time.Now(), n.LeasesGranted, n.LeasesRevoked)
	}
	s.wakeMu.Lock()
	close(s.wake)
	s.wake = make(chan struct{})
	s.wakeMu.Unlock()
	if obs := s.observers.Load(); obs != nil {
		for _, ob := range *obs {
			ob.Applied(n)
		}
	}
}

// Observe adds o to the receivers of the FSM's notifications (the store
// owns the FSM's single observer slot). o runs on Raft's FSM goroutine and
// must not block.
func (s *Store) Observe(o fsm.Observer) {
	for {
		old := s.observers.Load()
		var next []fsm.Observer
		if old != nil {
			next = append(next, *old...)
		}
		next = append(next, o)
		if s.observers.CompareAndSwap(old, &next) {
			return
		}
	}
}

// appliedWake returns a channel closed at the next FSM notification.
func (s *Store) appliedWake() <-chan struct{} {
	s.wakeMu.Lock()
	defer s.wakeMu.Unlock()
	return s.wake
}

// LeaderCh returns a new channel that receives true when this server
// becomes leader and false when it stops being leader, fed from
// raft.Config.NotifyCh. Each caller gets its own channel (capacity 1); if
// the reader lags, an unread value is replaced by the newer one, so the
// latest value is never dropped. The current state is delivered at once if
// a transition has been seen.
func (s *Store) LeaderCh() <-chan bool {
	ch := make(chan bool, 1)
	s.leaderMu.Lock()
	s.leaderSubs = append(s.leaderSubs, ch)
	if s.leaderLast != nil {
		ch <- *s.leaderLast
	}
	s.leaderMu.Unlock()
	return ch
}

func (s *Store) runNotify() {
	defer s.wg.Done()
	for {
		select {
		case v := <-s.notifyCh:
			s.logger.Info("leadership changed", "leader", v)
			s.leaderMu.Lock()
			s.leaderLast = &v
			for _, ch := range s.leaderSubs {
				select { // replace an unread value by the latest
				case <-ch:
				default:
				}
				ch <- v
			}
			s.leaderMu.Unlock()
		case <-s.stopping:
			return
		}
	}
}

// runLeaderLoop runs the leader-only work (own-term barrier, lease timers)
// while this server leads.
func (s *Store) runLeaderLoop(ch <-chan bool) {
	defer s.wg.Done()
	type run struct {
		cancel context.CancelFunc
		done   chan struct{}
	}
	var cur *run
	stop := func() {
		if cur != nil {
			cur.cancel()
			<-cur.done
			cur = nil
		}
		s.leases.stepDown()
	}
	defer stop()
	for {
		select {
		case isLeader := <-ch:
			if !isLeader || cur != nil {
				stop()
			}
			if isLeader {
				ctx, cancel := context.WithCancel(context.Background())
				cur = &run{cancel: cancel, done: make(chan struct{})}
				go func(done chan struct{}) {
					defer close(done)
					s.leadership(ctx)
				}(cur.done)
			}
		case <-s.stopping:
			return
		}
	}
}

// leadership establishes leadership (a committed barrier in the new term,
// then a fresh TTL for every lease) and runs the lease expiry loop until ctx ends.
func (s *Store) leadership(ctx context.Context) {
	var term uint64
	for {
		bctx, cancel := context.WithTimeout(ctx, 4*s.cfg.ElectionTimeout)
		t, err := s.ensureOwnTerm(bctx)
		cancel()
		if err == nil {
			term = t
			break
		}
		if ctx.Err() != nil {
			return
		}
		s.logger.Warn("leader barrier failed, retrying", "err", err)
		select {
		case <-ctx.Done():
			return
		case <-time.After(s.cfg.CommitTimeout):
		}
	}
	n := s.leases.establish(time.Now(), term, s.fsm.Leases)
	s.logger.Info("leadership established", "term", s.raft.CurrentTerm(), "leases_extended", n)
	s.runLeaseExpiry(ctx)
}
