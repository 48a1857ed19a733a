package agent

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"log/slog"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc"

	pb "github.com/raftps/raftps/api/raftpspb"
	"github.com/raftps/raftps/pserver"
	"github.com/raftps/raftps/pserver/checkpoint"
	"github.com/raftps/raftps/pserver/replica"
	"github.com/raftps/raftps/raftstore/client/concurrency"
	"github.com/raftps/raftps/raftstore/roles"
	"github.com/raftps/raftps/schema"
)

// Meta is what the agent needs of the metadata store, in the store's own
// shapes (raftstore/roles): the keyspace, leases (a concurrency.Session's
// calls), job events and the job list. The node passes its
// *raftstore.Store.
type Meta interface {
	roles.KV
	concurrency.LeaseAPI
	RecordJobEvent(ctx context.Context, ev *pb.JobEvent) (*pb.JobEvent, error)
	Jobs() []*pb.JobStatus
}

var _ pserver.Meta = Meta(nil)

// Members counts the alive nodes with the pserver role (fair share of slots).
type Members interface {
	PServerNodes() int
}

// Config of the agent.
type Config struct {
	NodeID string
	// Addr is this node's gRPC address, where its PServer service listens.
	Addr string
	// Zone is this node's failure domain (node.Config.Zone; empty: none),
	// written into the replica records it is primary of (pickBackups).
	Zone string
	// Instance is this node process's instance (node.Config: random at
	// each start, announced in gossip as PServerPeers' Instance): the
	// replica records name backups with it, and only the instance named
	// builds a backup from the initializer (backups.go). Empty: New makes
	// one.
	Instance string
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
	// Replicas serves the backups this node holds of other nodes' slots
	// (the node registers it on its pserver port; replicas.go). nil: the
	// node holds no backups and places none (every slot runs with R = 1).
	Replicas *replica.Service
	// DialOptions are the options of the node's dials to other nodes'
	// Replica services (its TLS certificate).
	DialOptions []grpc.DialOption
	Logger      *slog.Logger
}

// Agent runs the pserver role.
type Agent struct {
	cfg     Config
	meta    Meta
	server  *pserver.Server
	ckpt    *checkpoint.Manager
	members Members
	log     *slog.Logger

	session *concurrency.Session
	kick    chan struct{} // a reconciliation round now (watchPromotions), not at the next Poll
	untilMu sync.Mutex
	untilID int64             // the session's lease that until belongs to
	until   *pserver.Deadline // untilID's serve-until (renewed)
	mu      sync.Mutex
	lease   int64 // the session's lease as of the last renewal; 0 after a fence
	hosted  map[slotKey]*hosted
	// written is the restore record this node last wrote per slot: a slot
	// whose record is still this one was held by no one else since
	// (takeOver).
	written map[slotKey][]byte
	refused map[slotKey]bool // slots not claimed for the budget, event recorded (budget.go)
	// retry holds the slots whose last restore could not reach a
	// checkpoint holder: not claimed again before their time (claims.go).
	retry map[slotKey]restoreRetry
	// backups are the backups this node holds of other nodes' replicated
	// slots (replicas.go).
	backups map[slotKey]*heldBackup
	// specs are the replicated jobs' specs as last reconciled (a new
	// backup's Install needs them; rereplicate.go).
	specs map[string]*pb.JobSpec
	// stale are the records that name this node as a backup from before
	// its restart, by slot, with the epoch their warning was logged at.
	stale map[slotKey]int64
	// publishHook, if set (tests), runs in publishRecord between its read
	// of the rollback record and its write.
	publishHook func(*hosted)
	wg          sync.WaitGroup
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
	// repl is the slot's replication to its backups (nil: R = 1;
	// replicas.go).
	repl *replication
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
	if cfg.Instance == "" {
		cfg.Instance = NewInstance()
	}
	a := &Agent{cfg: cfg, meta: meta, server: server, ckpt: ckpt, members: members,
		session: concurrency.NewSession(meta, cfg.LeaseTTL), kick: make(chan struct{}, 1),
		log: cfg.Logger.With("component", "pserver-agent"), hosted: map[slotKey]*hosted{}, written: map[slotKey][]byte{},
		refused: map[slotKey]bool{}, retry: map[slotKey]restoreRetry{}, backups: map[slotKey]*heldBackup{}, specs: map[string]*pb.JobSpec{},
		stale: map[slotKey]int64{}}
	if cfg.Replicas != nil {
		cfg.Replicas.SetInstaller(a.installBackup)
	}
	return a
}

// NewInstance returns a random process instance (Config.Instance): 16
// hex digits.
func NewInstance() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
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
	wdone := make(chan struct{})
	go func() { defer close(wdone); a.watchPromotions(kctx) }()
	t := time.NewTicker(a.cfg.Poll)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			kcancel()
			<-kdone
			<-wdone
			a.release()
			return nil
		case <-t.C:
		case <-a.kick:
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
// (renewed extends the lease's pserver.Deadline), so the bound holds
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
	for {
		id, lost, err := a.session.Ensure(ctx)
		if lost {
			a.fenceAll("lease lost")
		}
		gone := false
		if err == nil {
			done := a.session.Done() // id's: closed once the session ends it
			if rid, sent := a.renewed(); rid == id && time.Since(sent) >= a.cfg.Poll/2 {
				kctx, cancel := context.WithTimeout(ctx, min(max(time.Until(sent.Add(safe)), 100*time.Millisecond), 2*time.Second))
				_, _ = a.session.KeepAlive(kctx) // a failure: the watchdog and the slots' deadline fence
				cancel()
				a.renewed()
			}
			select {
			case <-done: // the keepalive found id gone: the next Ensure grants a successor
				gone = true
				a.fenceAll("lease lost (keepalive: not found)")
			default:
			}
		}
		switch {
		case err != nil:
			a.log.Warn("pserver lease", "err", err)
		case gone:
		default:
			if rid, sent := a.renewed(); rid == id {
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

// renewed reads the session's last successful renewal (Session.Renewed)
// and extends its lease's serve-until (pserver.Deadline) to that send plus
// fence (schema.PServerFence of the TTL), which every slot claimed under
// the lease checks on each request; a new lease gets a new deadline, so
// slots claimed under an earlier lease are never extended by its
// renewals. The keepalive loop calls it after every Ensure and KeepAlive,
// before it publishes the lease to claims.
func (a *Agent) renewed() (id int64, sent time.Time) {
	id, sent = a.session.Renewed()
	if id == 0 {
		return 0, sent
	}
	a.untilMu.Lock()
	defer a.untilMu.Unlock()
	if id != a.untilID {
		a.untilID, a.until = id, pserver.NewDeadline(nil)
	}
	a.until.Extend(sent.Add(schema.PServerFence(a.cfg.LeaseTTL)))
	return id, sent
}

// deadline returns lease id's serve-until, or nil if id is not the
// session's latest lease.
func (a *Agent) deadline(id int64) *pserver.Deadline {
	a.untilMu.Lock()
	defer a.untilMu.Unlock()
	if id == 0 || id != a.untilID {
		return nil
	}
	return a.until
}

// currentLease is the lease new claims are made under (0: none known live).
func (a *Agent) currentLease() int64 {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.lease
}

func (a *Agent) fenceAll(reason string) {
	a.mu.Lock()
	var replicated []heldSlot
	for k, h := range a.hosted {
		replicated = a.fenceLocked(k, h, "fenced", replicated)
		a.log.Warn("slot fenced", "job", k.job, "slot", k.slot, "reason", reason)
	}
	// No claims until a renewal succeeds again.
	a.lease = 0
	a.mu.Unlock()
	for _, hs := range replicated { // before the next renewal, so before any claim
		a.holdOver(hs.h, hs.s)
	}
}

// fenceLocked stops serving hosted slot k (a.mu held): unhosted, fenced,
// its replication stopped. A replicated one is appended to held, for
// holdOver once a.mu is released.
func (a *Agent) fenceLocked(k slotKey, h *hosted, why string, held []heldSlot) []heldSlot {
	a.server.Unhost(k.job, k.slot)
	h.slot.Fence()
	h.stopReplication(why)
	delete(a.hosted, k)
	if h.repl != nil {
		held = append(held, heldSlot{h, h.slot})
	}
	return held
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
		h.stopReplication("fenced")
		delete(a.hosted, k)
	}
	a.lease = 0
	a.mu.Unlock()
	if err := a.session.Close(context.Background()); err != nil {
		a.log.Warn("revoke pserver lease at shutdown", "err", err)
	}
}
