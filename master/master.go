package master

import (
	"context"
	"errors"
	"log/slog"
	"sort"
	"sync"
	"time"

	pb "github.com/raftps/raftps/api/raftpspb"
	"github.com/raftps/raftps/fsm"
	"github.com/raftps/raftps/gossip"
	"github.com/raftps/raftps/raftstore"
	"github.com/raftps/raftps/schema"
)

// Store is what the master needs of the Raft store: its roles (keyspace,
// leases, job queue, membership) and the leader-local views below.
type Store interface {
	raftstore.KV
	raftstore.Lessor
	raftstore.Jobs
	raftstore.Membership
	// LeaseLastKeepAlive: when the last keepalive of a lease arrived at
	// this leader in its term (leader-local; slot handover).
	LeaseLastKeepAlive(id int64) (time.Time, bool)
	// LeaderSince: when this server established its current leadership
	// (leader-local; slot handover when LeaseLastKeepAlive knows nothing).
	LeaderSince() (time.Time, bool)
	LinearizableRead(ctx context.Context) error
	IsLeader() bool
	LeaderCh() <-chan bool
	Stats() raftstore.Status
	// LeaseTTL: lease id's granted TTL in seconds (serializable).
	LeaseTTL(id int64) (int64, bool)
	// ClockTerm: the cluster clock and the term of the entry that last
	// advanced it, as this server applied them (fsm/clock.go).
	ClockTerm() (now int64, term uint64)
}

// Members is what the master needs of gossip: it reports, the master decides.
type Members interface {
	Members() []gossip.Member
	Subscribe() (<-chan gossip.Event, func())
	LocalID() string
}

var (
	_ Store   = (*raftstore.Store)(nil)
	_ Members = (*gossip.Gossip)(nil)
)

// Config of the master. Zero durations take the defaults of DefaultConfig.
type Config struct {
	// MaxVoters: alive server nodes become voters while there are fewer; the
	// rest are non-voters (default 5).
	MaxVoters int
	// DeadServerTimeout: a failed server is removed from the Raft
	// configuration after being dead this long, never below quorum (default 30s).
	DeadServerTimeout time.Duration
	// ReconcileInterval between full reconciliations (default 1s).
	ReconcileInterval time.Duration
	// SweepInterval between task deadline sweeps (default 500ms).
	SweepInterval time.Duration
	// KeepFinishedJobs and FinishedJobMaxAge are the retention of finished
	// (succeeded, failed, cancelled) jobs: the leader prunes the oldest
	// beyond the newest KeepFinishedJobs, and those finished longer than
	// FinishedJobMaxAge ago (COMMAND_PRUNE_JOBS, judged with the cluster's
	// replicated clock), with their keys. Zero: no limit of that kind.
	KeepFinishedJobs  int32
	FinishedJobMaxAge time.Duration
	// OnLeader, if set, runs in its own goroutine each time this node's
	// leader loop starts, after its barrier, with a context that ends
	// with the leadership: the node checks every replicated slot's
	// primary there (Suspects.CheckAll).
	OnLeader func(ctx context.Context)
	Logger   *slog.Logger
}

// DefaultConfig returns the LAN defaults.
func DefaultConfig() Config {
	return Config{MaxVoters: 5, DeadServerTimeout: 30 * time.Second,
		ReconcileInterval: time.Second, SweepInterval: 500 * time.Millisecond}
}

func (c Config) withDefaults() Config {
	d := DefaultConfig()
	if c.MaxVoters <= 0 {
		c.MaxVoters = d.MaxVoters
	}
	if c.DeadServerTimeout <= 0 {
		c.DeadServerTimeout = d.DeadServerTimeout
	}
	if c.ReconcileInterval <= 0 {
		c.ReconcileInterval = d.ReconcileInterval
	}
	if c.SweepInterval <= 0 {
		c.SweepInterval = d.SweepInterval
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	return c
}

// Master runs the leader-only loops. Run it on every server node; it works
// only while its node leads (Consul's monitorLeadership / leaderLoop).
type Master struct {
	cfg     Config
	store   Store
	members Members
	log     *slog.Logger

	mu          sync.Mutex
	deadSince   map[string]time.Time  // server id -> when gossip declared it dead
	gone        map[string]bool       // node id -> its trainers and slots were released
	lapsed      map[string]lapse      // replica key -> since when its alive primary holds no claim (failoverUnclaimed)
	checks      map[string]*peerCheck // node id -> its latest identity check (verified)
	verifying   int                   // checks in flight
	leaderSince time.Time
	clock       fsm.ClockEstimator // cluster time between entries (overdue)
}

// New returns a Master over store and members.
func New(cfg Config, store Store, members Members) *Master {
	cfg = cfg.withDefaults()
	return &Master{cfg: cfg, store: store, members: members, log: cfg.Logger,
		deadSince: map[string]time.Time{}, gone: map[string]bool{}, checks: map[string]*peerCheck{},
		lapsed: map[string]lapse{}}
}

// Run follows leadership changes until ctx ends: on gaining leadership it
// starts the leader loop, on losing it stops it.
func (m *Master) Run(ctx context.Context) error {
	var (
		cancel context.CancelFunc
		done   chan struct{}
	)
	stop := func() {
		if cancel != nil {
			cancel()
			<-done
			cancel = nil
		}
	}
	defer stop()
	if m.store.IsLeader() {
		cancel, done = m.startLeader(ctx)
	}
	ch := m.store.LeaderCh()
	for {
		select {
		case <-ctx.Done():
			return nil
		case isLeader := <-ch:
			if isLeader && cancel == nil {
				cancel, done = m.startLeader(ctx)
			} else if !isLeader {
				stop()
			}
		}
	}
}

func (m *Master) startLeader(parent context.Context) (context.CancelFunc, chan struct{}) {
	ctx, cancel := context.WithCancel(parent)
	done := make(chan struct{})
	go func() {
		defer close(done)
		m.leaderLoop(ctx)
	}()
	return cancel, done
}

// leaderLoop: a linearizable read first (on the leader: a barrier of its
// own term, then a wait until the FSM has applied it), so the FSM holds
// everything earlier leaders committed; then reconcile membership and
// sweep task deadlines until leadership is lost.
func (m *Master) leaderLoop(ctx context.Context) {
	m.log.Info("leadership gained: master starting")
	defer m.log.Info("leadership lost: master stopped")
	for {
		bctx, cancel := context.WithTimeout(ctx, applyTimeout)
		err := m.store.LinearizableRead(bctx)
		cancel()
		if !m.store.IsLeader() {
			return
		}
		if err == nil {
			break
		} else if !m.store.IsLeader() {
			return
		} else {
			m.log.Warn("barrier failed, retrying", "err", err)
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(200 * time.Millisecond):
		}
	}
	m.mu.Lock()
	m.leaderSince = time.Now()
	m.clock.Reset()
	m.deadSince = map[string]time.Time{}
	m.gone = map[string]bool{}
	m.checks = map[string]*peerCheck{}
	m.mu.Unlock()

	if m.cfg.OnLeader != nil {
		done := make(chan struct{})
		defer func() { <-done }()
		go func() {
			defer close(done)
			m.cfg.OnLeader(ctx)
		}()
	}
	events, unsubscribe := m.members.Subscribe()
	defer unsubscribe()
	reconcile := time.NewTicker(m.cfg.ReconcileInterval)
	defer reconcile.Stop()
	sweep := time.NewTicker(m.cfg.SweepInterval)
	defer sweep.Stop()
	m.reconcile(ctx)
	for {
		select {
		case <-ctx.Done():
			return
		case <-events:
			m.reconcile(ctx)
		case <-reconcile.C:
			m.reconcile(ctx)
		case <-sweep.C:
			m.sweep(ctx)
		}
	}
}

// nodeGone handles a node that gossip declared dead or that left: its
// trainers' pending tasks are requeued at once and their leases revoked,
// and its pserver slots' leases revoked so other nodes claim them (the task
// timeout and the lease TTL are only the backstops). For each slot it
// held, a schema.HandoverRecord tells the next claimant how long the node,
// if only partitioned, may still serve (handoverRevoke).
func (m *Master) nodeGone(ctx context.Context, mem gossip.Member) {
	node := mem.Meta.ID
	m.mu.Lock()
	m.gone[node] = true
	m.mu.Unlock()
	key, end := schema.PrefixRange(schema.JobsPrefix)
	resp, err := m.store.Range(ctx, &pb.RangeRequest{Serializable: true, Key: key, RangeEnd: end})
	if err != nil {
		return
	}
	leases := map[int64][]heldSlot{}
	var primaries []replicated // replicated slots whose primary was node
	for _, kv := range resp.Kvs {
		job, kind, id, ok := schema.ParseJobKey(string(kv.Key))
		if ok && kind == schema.KindReplicas {
			if r, ok := primaryOf(job, id, kv, node); ok {
				primaries = append(primaries, r)
			}
			continue
		}
		if !ok || (kind != schema.KindTrainer && kind != schema.KindSlot) {
			continue
		}
		if holder, ok := schema.NodeOf(kv.Value); !ok || holder != node {
			continue
		}
		if kind == schema.KindTrainer {
			actx, cancel := context.WithTimeout(ctx, applyTimeout)
			out, err := m.store.RequeueTrainer(actx, &pb.RequeueTrainerRequest{Job: job, Trainer: id, Reason: "node " + node + " " + mem.Status.String()})
			cancel()
			if err != nil {
				m.log.Warn("requeue trainer", "job", job, "trainer", id, "err", err)
			} else {
				m.log.Info("trainer gone: tasks requeued", "job", job, "trainer", id, "requeued", out.Requeued, "node_status", mem.Status.String())
			}
		}
		if kv.Lease == 0 {
			continue
		}
		held := leases[kv.Lease]
		if kind == schema.KindSlot {
			if slot, err := schema.ParseSlot(id); err == nil {
				held = append(held, heldSlot{job: job, slot: slot, incarnation: kv.CreateRevision})
			}
		}
		leases[kv.Lease] = held
	}
	// Replicated slots first: promoted before the revoke frees the claims.
	m.failover(ctx, node, primaries)
	for id, slots := range leases {
		m.handoverRevoke(ctx, node, id, slots)
	}
}

// lastKeepAliveBound returns a time, on this server's clock, no earlier
// than the arrival of every keepalive of lease id that any leader
// acknowledged: the last arrival at this leader if it saw one in its term
// (LeaseLastKeepAlive), else the start of its leadership (LeaderSince;
// fromStart is then true): every keepalive an earlier leader acknowledged
// was confirmed by a quorum after it arrived (raftstore's LeaseKeepAliveLocal),
// before a quorum voted for this term. Both are read in one leadership
// (the start is read before and after, and must not change), after the
// revoke applied. ok is false if this server does not lead.
func (m *Master) lastKeepAliveBound(id int64) (at time.Time, fromStart, ok bool) {
	start, led := m.store.LeaderSince()
	if !led {
		return time.Time{}, false, false
	}
	at, ok = m.store.LeaseLastKeepAlive(id)
	if again, still := m.store.LeaderSince(); !still || !again.Equal(start) {
		return time.Time{}, false, false
	}
	if ok {
		return at, false, true
	}
	return start, true, true
}

// heldSlot is a pserver slot claim of a node that is gone.
type heldSlot struct {
	job         string
	slot        int32
	incarnation int64
}

// handoverRevoke revokes lease id of the gone node and, for every slot
// claimed under it, writes a schema.HandoverRecord: how long the next
// claimant must wait before serving so that the holder, if it is only
// partitioned and serving on, has fenced (schema.HandoverWait from the age
// of the lease's last keepalive at this leader). The age is read after
// the revoke applied: no keepalive succeeds after that, and every one that
// did had arrived and was recorded. If this leader saw no keepalive of the
// lease in its term (it took over since), the age is taken from the start
// of its leadership (lastKeepAliveBound); only if this server does not lead
// is no record written, and the claimant waits a whole TTL. A record is
// written only if the slot is still unclaimed and its handover key is as it
// was before the revoke (a claimant consumes or marks that key before
// serving), so it always describes the slot's last holder.
func (m *Master) handoverRevoke(ctx context.Context, node string, id int64, slots []heldSlot) {
	var ttl int64
	if t, ok := m.store.LeaseTTL(id); ok {
		ttl = t
	}
	before := make([]int64, len(slots)) // mod revision of each slot's handover key (0: none)
	for i, h := range slots {
		r, err := m.store.Range(ctx, &pb.RangeRequest{Serializable: true, Key: []byte(schema.HandoverKey(h.job, h.slot))})
		if err == nil && len(r.Kvs) > 0 {
			before[i] = r.Kvs[0].ModRevision
		}
	}
	actx, cancel := context.WithTimeout(ctx, applyTimeout)
	resp, err := m.store.LeaseRevoke(actx, &pb.LeaseRevokeRequest{Id: id})
	cancel()
	if err != nil {
		if !errors.Is(err, fsm.ErrLeaseNotFound) {
			m.log.Warn("revoke lease of gone node", "node", node, "lease", id, "err", err)
		}
		return
	}
	m.log.Info("lease of gone node revoked", "node", node, "lease", id)
	if len(slots) == 0 || ttl == 0 {
		return
	}
	at, fromStart, ok := m.lastKeepAliveBound(id)
	if !ok {
		m.log.Info("slot handover: this server does not lead (or has not established its term); claimants wait a whole TTL",
			"node", node, "lease", id)
		return
	}
	since := time.Since(at)
	wait := schema.HandoverWait(ttl, since)
	for i, h := range slots {
		rec := schema.HandoverRecord{Node: node, Incarnation: h.incarnation, Lease: id,
			RevokedRevision: resp.GetHeader().GetRevision(), SinceKeepAliveNanos: int64(since), WaitNanos: int64(wait),
			FromLeaderStart: fromStart}
		slotKey, hoKey := []byte(schema.SlotKey(h.job, h.slot)), []byte(schema.HandoverKey(h.job, h.slot))
		actx, cancel := context.WithTimeout(ctx, applyTimeout)
		out, err := m.store.Txn(actx, &pb.TxnRequest{
			Compare: []*pb.Compare{
				{Target: pb.Compare_CREATE, Result: pb.Compare_EQUAL, Key: slotKey, TargetUnion: &pb.Compare_CreateRevision{CreateRevision: 0}},
				{Target: pb.Compare_MOD, Result: pb.Compare_EQUAL, Key: hoKey, TargetUnion: &pb.Compare_ModRevision{ModRevision: before[i]}},
			},
			Success: []*pb.RequestOp{{Request: &pb.RequestOp_RequestPut{RequestPut: &pb.PutRequest{Key: hoKey, Value: rec.Marshal()}}}},
		})
		cancel()
		switch {
		case err != nil:
			m.log.Warn("slot handover record", "job", h.job, "slot", h.slot, "err", err)
		case !out.GetSucceeded():
			m.log.Info("slot handover record not written: slot claimed meanwhile", "job", h.job, "slot", h.slot)
		default:
			m.log.Info("slot handover record written", "job", h.job, "slot", h.slot, "node", node,
				"last_keepalive_ago", since.Round(time.Millisecond), "from_leader_start", fromStart,
				"claimant_wait", wait.Round(time.Millisecond))
		}
	}
}

// sweep prunes finished jobs past the retention limits, expires tasks past
// their deadline in every running job, and requeues the tasks of trainers
// whose registration vanished (lease expired).
func (m *Master) sweep(ctx context.Context) {
	if !m.store.IsLeader() {
		return
	}
	jobs := m.store.JobQueue().Jobs()
	now := m.clusterNow()
	m.prune(ctx, now)
	seen := map[string]bool{}
	for _, j := range jobs {
		if j.State != pb.JobState_JOB_RUNNING {
			continue
		}
		if m.overdue(j.Name, now) {
			actx, cancel := context.WithTimeout(ctx, applyTimeout)
			out, err := m.store.ExpireTasks(actx, &pb.ExpireTasksRequest{Job: j.Name})
			cancel()
			if err == nil && out.Expired > 0 {
				m.log.Info("tasks past deadline requeued", "job", j.Name, "expired", out.Expired)
			}
		}
		m.requeueUnregistered(ctx, j.Name)
		m.failoverUnclaimed(ctx, j.Name, seen)
	}
	m.forgetLapses(seen)
}

// prune deletes finished jobs past the retention limits, and their keys.
// The FSM decides with the entry's cluster time; the leader proposes only
// when the FSM's own rule (Jobs().PruneDue) names a job at now
// (clusterNow), which is never ahead of the entry's clock and the set only
// grows with time, so a prune it proposes deletes something unless a
// command applied in between deleted the job first. Finish times are
// cluster time, which lags the wall clock by every leaderless interval (a
// whole-cluster restart included), so this node's wall clock is no guide;
// and until an entry of the leader's term is applied cluster time stands
// still (a cluster idle since its restart prunes after its next write).
func (m *Master) prune(ctx context.Context, now int64) {
	keep, maxAge := m.cfg.KeepFinishedJobs, m.cfg.FinishedJobMaxAge
	if keep <= 0 && maxAge <= 0 {
		return
	}
	req := &pb.PruneJobsRequest{MaxAgeMs: maxAge.Milliseconds(), KeepFinished: keep}
	due, err := m.store.JobQueue().PruneDue(now, req)
	if err != nil {
		m.log.Warn("prune finished jobs", "err", err)
		return
	}
	if len(due) == 0 {
		return
	}
	actx, cancel := context.WithTimeout(ctx, applyTimeout)
	defer cancel()
	out, err := m.store.PruneJobs(actx, req)
	if err != nil {
		m.log.Warn("prune finished jobs", "err", err)
		return
	}
	for _, name := range out.Deleted {
		key, end := schema.PrefixRange(schema.JobPrefix(name))
		if _, err := m.store.DeleteRange(actx, &pb.DeleteRangeRequest{Key: key, RangeEnd: end}); err != nil {
			m.log.Warn("delete keys of a pruned job", "job", name, "err", err)
			continue
		}
		m.log.Info("finished job pruned", "job", name)
	}
}

// clusterNow is this leader's estimate of cluster time (fsm/clock.go),
// never ahead of the clock its next entry will carry
// (fsm.ClockEstimator.NowInTerm): deadlines and finish times are cluster
// time, not this node's wall clock.
func (m *Master) clusterNow() int64 {
	now, term := m.store.ClockTerm()
	return m.clock.NowInTerm(now, term, m.store.Stats().Term)
}

// overdue reports whether a pending task (the eval task included) of job
// is past its deadline at now (clusterNow); only then is an ExpireTasks
// command worth a log entry (the FSM decides with the clock stamped in the
// entry).
func (m *Master) overdue(job string, now int64) bool {
	for _, t := range m.store.JobQueue().Pending(job) {
		if t.DeadlineUnixNano > 0 && t.DeadlineUnixNano < now {
			return true
		}
	}
	return false
}

// requeueUnregistered requeues pending tasks held by trainers that are no
// longer registered under schema.TrainerPrefix (their lease expired or was
// revoked), so a dead trainer's task does not wait for its deadline.
func (m *Master) requeueUnregistered(ctx context.Context, job string) {
	holders := map[string]bool{}
	for _, t := range m.store.JobQueue().Pending(job) {
		if t.Trainer != "" {
			holders[t.Trainer] = true
		}
		if t.BackupTrainer != "" {
			holders[t.BackupTrainer] = true
		}
	}
	if len(holders) == 0 {
		return
	}
	key, end := schema.PrefixRange(schema.TrainerPrefix(job))
	resp, err := m.store.Range(ctx, &pb.RangeRequest{Serializable: true, Key: key, RangeEnd: end, KeysOnly: true})
	if err != nil {
		return
	}
	live := map[string]bool{}
	for _, kv := range resp.Kvs {
		if _, kind, id, ok := schema.ParseJobKey(string(kv.Key)); ok && kind == schema.KindTrainer {
			live[id] = true
		}
	}
	ids := make([]string, 0, len(holders))
	for id := range holders {
		if !live[id] {
			ids = append(ids, id)
		}
	}
	sort.Strings(ids)
	for _, id := range ids {
		actx, cancel := context.WithTimeout(ctx, applyTimeout)
		_, err := m.store.RequeueTrainer(actx, &pb.RequeueTrainerRequest{Job: job, Trainer: id, Reason: "trainer registration gone"})
		cancel()
		if err == nil {
			m.log.Info("unregistered trainer's tasks requeued", "job", job, "trainer", id)
		}
	}
}

// applyTimeout bounds each command the leader loops propose.
const applyTimeout = 5 * time.Second
