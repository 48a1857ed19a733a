package agent

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/raftps/raftps/api/errs"
	pb "github.com/raftps/raftps/api/raftpspb"
	"github.com/raftps/raftps/api/rpctypes"
	"github.com/raftps/raftps/pserver"
	"github.com/raftps/raftps/pserver/checkpoint"
	"github.com/raftps/raftps/raftstore/client/concurrency"
	"github.com/raftps/raftps/schema"
)

// Meta is what the agent needs of the metadata store.
type Meta interface {
	pserver.Meta
	Put(ctx context.Context, req *pb.PutRequest) (*pb.PutResponse, error)
	LeaseRevoke(ctx context.Context, id int64) error
	DeleteRange(ctx context.Context, req *pb.DeleteRangeRequest) (*pb.DeleteRangeResponse, error)
	RecordJobEvent(ctx context.Context, ev *pb.JobEvent) error
	Jobs() []*pb.JobStatus
}

// Members counts the alive nodes with the pserver role (fair share of slots).
type Members interface {
	PServerNodes() int
}

// Config of the agent.
type Config struct {
	NodeID string
	// Addr is this node's gRPC address, where its PServer service listens.
	Addr string
	// LeaseTTL of the node's pserver lease in seconds (default 5).
	LeaseTTL int64
	// Poll is the interval between reconciliations and between lease
	// renewals (a keepalive every Poll; default 300ms).
	Poll time.Duration
	// StepWaitWarn is how long a sync step of a hosted slot may wait for
	// trainers before the node logs the ones it waits for (again every
	// StepWaitWarn while it waits; default 10s).
	StepWaitWarn time.Duration
	// MemoryBudget is the bytes the node's slots may hold together
	// (parameters and optimizer state, SlotBytes): a slot that does not
	// fit in what is left is not claimed, with a SLOT_NOT_CLAIMED event
	// on its job (budget.go). 0: no limit.
	MemoryBudget uint64
	Logger       *slog.Logger
}

// Agent runs the pserver role.
type Agent struct {
	cfg     Config
	meta    Meta
	server  *pserver.Server
	ckpt    *checkpoint.Manager
	members Members
	log     *slog.Logger

	session  *concurrency.Session
	renewals *renewals // the session's LeaseAPI: when its last renewal was sent
	mu       sync.Mutex
	lease    int64 // the session's lease as of the last renewal; 0 after a fence
	hosted   map[slotKey]*hosted
	// written is the restore record this node last wrote per slot: a slot
	// whose record is still this one was held by no one else since
	// (takeOver).
	written map[slotKey][]byte
	refused map[slotKey]bool // slots not claimed for the budget, event recorded (budget.go)
	wg      sync.WaitGroup
}

type slotKey struct {
	job  string
	slot int32
}

type hosted struct {
	key         slotKey
	spec        *pb.JobSpec
	slot        *pserver.Slot
	incarnation int64
	// trainers is the sorted, comma-joined membership of the last
	// SetTrainers: written by the reconcile goroutine under Agent.mu (the
	// lock readers on other goroutines take).
	trainers string
	writer   *checkpoint.Writer

	// writeMu serializes checkpoint (a Writer's Checkpoint calls must not
	// overlap: the checkpoint goroutine, maybeCheckpoint's and finish's
	// writes take turns).
	writeMu sync.Mutex
	// ckptMu guards the fields below (written by checkpoint and a
	// rollback, read by maybeCheckpoint and finish on other goroutines).
	ckptMu        sync.Mutex
	lastCkptStep  int64
	lastCkptTime  time.Time
	lastVersion   int64
	checkpointing bool
	// snaps carries step-exact snapshots from the slot's SnapshotEvery and
	// SnapshotOnPull hooks to the slot's checkpoint goroutine (latest wins
	// when it lags, but an eval's snapshot is never dropped for a periodic
	// one).
	snaps   chan queued
	queueMu sync.Mutex // serializes queueSnapshot
	// epoch is the sync trajectory the slot is on (see schema.EpochStride).
	epoch int64
	// until is the serve-until of the lease the slot was claimed under
	// (every Slot that serves it, a rollback's too, checks it).
	until *pserver.Deadline
	// rollbackRev is the mod revision of schema.RollbackKey this slot has
	// already followed (or that was there when it was claimed).
	rollbackRev int64
	// waitWarned is when reportWaits last logged this slot's waiting step.
	waitWarned time.Time
}

// New returns an agent; Run starts it.
func New(cfg Config, meta Meta, server *pserver.Server, ckpt *checkpoint.Manager, members Members) *Agent {
	if cfg.LeaseTTL <= 0 {
		cfg.LeaseTTL = 5
	}
	if cfg.Poll <= 0 {
		cfg.Poll = 300 * time.Millisecond
	}
	if cfg.StepWaitWarn <= 0 {
		cfg.StepWaitWarn = 10 * time.Second
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	rn := &renewals{api: meta, fence: schema.PServerFence(cfg.LeaseTTL)}
	return &Agent{cfg: cfg, meta: meta, server: server, ckpt: ckpt, members: members,
		session: concurrency.NewSession(rn, cfg.LeaseTTL), renewals: rn,
		log: cfg.Logger.With("component", "pserver-agent"), hosted: map[slotKey]*hosted{}, written: map[slotKey][]byte{},
		refused: map[slotKey]bool{}}
}

// Run keeps the node's lease alive and reconciles every Poll until ctx
// ends, then releases its slots (a graceful stop hands them over at once
// instead of waiting for the lease to expire).
//
// The lease is kept by its own goroutine (keepAlive), so a reconciliation
// round stuck in a long restore neither lets the lease lapse nor delays the
// fence when the lease is lost.
func (a *Agent) Run(ctx context.Context) error {
	kctx, kcancel := context.WithCancel(ctx)
	kdone := make(chan struct{})
	go func() { defer close(kdone); a.keepAlive(kctx) }()
	t := time.NewTicker(a.cfg.Poll)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			kcancel()
			<-kdone
			a.release()
			return nil
		case <-t.C:
		}
		if a.currentLease() != 0 {
			a.reconcile(ctx)
		}
	}
}

// keepAlive renews the session's lease every Poll until ctx ends and fences
// every hosted slot when the lease is lost: at once when the store says so
// (Session.Ensure reports lost, or a keepalive answers that the lease is
// gone), and without waiting for the store schema.PServerFence (2/3 of the
// TTL) after the send of the last keepalive that succeeded (a partition, a
// stalled leader): the lease may be expiring on the leader, or have been
// revoked early by the master, and another node may then claim the slots.
// That bound is the contract the master's handover records rely on
// (schema.HandoverWait), so it is measured from the send of the renewal
// itself, not from the session's cached answers; and the lease is renewed
// every Poll (not only every TTL/3, as the session would), so a renewal
// that fails for a while still leaves 2/3 of the TTL before the fence.
// The watchdog is a timer, which a paused or loaded process runs late; the
// slots check the same deadline themselves on every request and reply
// (renewals extends the lease's pserver.Deadline), so the bound holds
// without it, and the watchdog only unhosts what already refuses.
func (a *Agent) keepAlive(ctx context.Context) {
	safe := schema.PServerFence(a.cfg.LeaseTTL)
	watchdog := time.AfterFunc(time.Hour, func() {
		a.fenceAll("lease not renewed for 2/3 of its TTL: it may expire or have been revoked on the leader")
	})
	watchdog.Stop()
	defer watchdog.Stop()
	t := time.NewTicker(a.cfg.Poll)
	defer t.Stop()
	var gone int64 // a lease a keepalive found gone, which the session may still return from its cache
	for {
		id, lost, err := a.session.Ensure(ctx)
		if lost {
			a.fenceAll("lease lost")
		}
		if err == nil && id != gone {
			if sent, ok := a.renewals.last(id); ok && time.Since(sent) >= a.cfg.Poll/2 {
				kctx, cancel := context.WithTimeout(ctx, min(max(time.Until(sent.Add(safe)), 100*time.Millisecond), 2*time.Second))
				_, kerr := a.renewals.LeaseKeepAlive(kctx, id)
				cancel()
				if errors.Is(rpctypes.FromStatus(kerr), errs.ErrLeaseNotFound) {
					gone = id
					a.fenceAll("lease lost (keepalive: not found)")
				}
			}
		}
		switch {
		case err != nil:
			a.log.Warn("pserver lease", "err", err)
		case id == gone:
		default:
			if sent, ok := a.renewals.last(id); ok {
				watchdog.Reset(time.Until(sent.Add(safe)))
			}
			a.mu.Lock()
			if a.lease != id {
				a.log.Info("pserver lease", "lease", id, "ttl_s", a.cfg.LeaseTTL)
			}
			a.lease = id
			a.mu.Unlock()
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// renewals is the session's LeaseAPI over the agent's Meta: it records
// when the last grant or keepalive that succeeded was sent, for the
// watchdog, and extends the lease's serve-until (pserver.Deadline) that
// every slot claimed under the lease checks on each request: both are
// that send plus fence (schema.PServerFence of the TTL), and nothing else
// moves them.
type renewals struct {
	api   concurrency.LeaseAPI
	fence time.Duration

	mu    sync.Mutex
	id    int64             // the lease last granted
	sent  time.Time         // send of its last successful grant or keepalive
	until *pserver.Deadline // lease id's serve-until: sent + fence
}

func (r *renewals) LeaseGrant(ctx context.Context, ttl int64) (int64, error) {
	sent := time.Now()
	id, err := r.api.LeaseGrant(ctx, ttl)
	if err == nil {
		// A new lease gets a new deadline: slots claimed under an earlier
		// lease are never extended by this one's renewals.
		until := pserver.NewDeadline(nil)
		until.Extend(sent.Add(r.fence))
		r.mu.Lock()
		r.id, r.sent, r.until = id, sent, until
		r.mu.Unlock()
	}
	return id, err
}

func (r *renewals) LeaseKeepAlive(ctx context.Context, id int64) (int64, error) {
	sent := time.Now()
	ttl, err := r.api.LeaseKeepAlive(ctx, id)
	if err == nil {
		r.mu.Lock()
		if id == r.id && sent.After(r.sent) {
			r.sent = sent
			r.until.Extend(sent.Add(r.fence))
		}
		r.mu.Unlock()
	}
	return ttl, err
}

func (r *renewals) LeaseRevoke(ctx context.Context, id int64) error {
	return r.api.LeaseRevoke(ctx, id)
}

// last returns when the last successful renewal of lease id was sent.
func (r *renewals) last(id int64) (time.Time, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.sent, id != 0 && id == r.id
}

// deadline returns lease id's serve-until, or nil if id is not the lease
// last granted.
func (r *renewals) deadline(id int64) *pserver.Deadline {
	r.mu.Lock()
	defer r.mu.Unlock()
	if id == 0 || id != r.id {
		return nil
	}
	return r.until
}

// currentLease is the lease new claims are made under (0: none known live).
func (a *Agent) currentLease() int64 {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.lease
}

func (a *Agent) fenceAll(reason string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	for k, h := range a.hosted {
		a.server.Unhost(k.job, k.slot)
		h.slot.Fence()
		delete(a.hosted, k)
		a.log.Warn("slot fenced", "job", k.job, "slot", k.slot, "reason", reason)
	}
	// No claims until a renewal succeeds again.
	a.lease = 0
}

func (a *Agent) hosting(job string, slot int32) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	_, ok := a.hosted[slotKey{job, slot}]
	return ok
}

// slotOf is h's current slot (a rollback replaces it under a.mu).
func (a *Agent) slotOf(h *hosted) *pserver.Slot {
	a.mu.Lock()
	defer a.mu.Unlock()
	return h.slot
}

func splitIDs(s string) []string {
	if s == "" {
		return nil
	}
	return strings.Split(s, ",")
}

// release revokes the node's pserver lease at shutdown: every claim goes
// with it, so other nodes take the slots over without waiting for the TTL.
func (a *Agent) release() {
	a.wg.Wait()
	a.mu.Lock()
	for k, h := range a.hosted {
		a.server.Unhost(k.job, k.slot)
		h.slot.Fence()
		delete(a.hosted, k)
	}
	a.lease = 0
	a.mu.Unlock()
	if err := a.session.Close(context.Background()); err != nil {
		a.log.Warn("revoke pserver lease at shutdown", "err", err)
	}
}
