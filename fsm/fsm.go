package fsm

import (
	"bytes"
	"errors"
	"fmt"
	"log/slog"
	"runtime/debug"
	"slices"
	"sync"

	"github.com/google/btree"
	"github.com/hashicorp/raft"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/proto"

	pb "github.com/raftps/raftps/api/raftpspb"
)

// Limits of the key/value store. A put over either is rejected with an error
// wrapping ErrTooLarge (codes.InvalidArgument).
const (
	// MaxKeySize is the largest key, in bytes.
	MaxKeySize = 1536
	// MaxValueSize is the largest value, in bytes (1.5 MiB).
	MaxValueSize = 3 << 19
	// MaxTxnResponseBytes bounds what the range ops of one txn may
	// answer, in bytes (keys, values and 48 bytes per key/value): a txn
	// over it is refused with ErrTooLarge before any result is built, on
	// the store's read path and in Apply alike, so no replica materialises
	// more than this for one command.
	MaxTxnResponseBytes = 4 << 20
	// HistoryRevisions is how many of the latest revisions keep their watch
	// events (in memory and in snapshots). Older revisions are compacted
	// automatically; COMMAND_COMPACT compacts further.
	HistoryRevisions = 10000
	// HistoryBytes bounds the watch history's size (keys and values of the
	// events and their prev_kv, in bytes): past it the oldest revisions are
	// compacted even if younger than HistoryRevisions, so big values cannot
	// exhaust memory. The latest revision is always kept.
	HistoryBytes = 256 << 20
)

// FSM is the replicated state machine of raftps: an MVCC key/value store with
// leases and watch history, plus the job/task queue. It implements raft.FSM.
// All methods are safe for concurrent use; see the package doc.
type FSM struct {
	logger *slog.Logger

	mu         sync.RWMutex
	applied    uint64
	rev        int64 // current store revision; 1 for an empty store
	compactRev int64 // events with mod_revision <= compactRev are gone
	kvs        *btree.BTreeG[*pb.KeyValue]
	used       int64             // bytes of every key and value (quota.go)
	jobUse     map[string]*usage // per job under /jobs/<job>/ (quota.go)
	leases     map[int64]*lease
	leasesOf   map[string]int // leases held per owner (derived from leases)
	nextLease  int64          // next candidate for a store-assigned lease id
	hist       []revEvents
	histSize   int64 // sum of revEvents.size over hist
	histRevs   int64 // HistoryRevisions; tests shrink it
	histBytes  int64 // HistoryBytes; tests shrink it
	maxLeases  int   // MaxLeases; tests shrink it
	jobs       JobQueue
	newJobs    func() JobQueue
	clock      clock // the replicated clock (clock.go)

	// halt stops the replica on an entry it cannot apply exactly (an
	// unknown command type or an unknown field in the entry's envelope):
	// see the package doc. The default logs and panics, which ends the
	// process from raft's FSM goroutine before anything of the entry is
	// applied; tests replace it.
	halt func(index uint64, err error)

	obsMu    sync.Mutex // serialises SetObserver against notify
	observer Observer

	sessions clientSessions // exactly-once: session.go
}

// Observer is told about every applied log entry. Applied is called
// synchronously from Apply (and Restore), after the FSM's lock is released, in
// log order, on raft's FSM goroutine; it must not block (hand off to a
// channel) and must not call Apply. It may call the FSM's read methods.
type Observer interface {
	Applied(n Notification)
}

// Notification describes one applied log entry (or a restore).
type Notification struct {
	// Index is the Raft log index just applied.
	Index uint64
	// Revision is the store revision after the entry.
	Revision int64
	// NowUnixNano is the leader's clock stamped into the entry (0 if none).
	NowUnixNano int64
	// LeasesGranted are the leases the entry created (Keys empty).
	LeasesGranted []LeaseInfo
	// LeasesRevoked are the ids of the leases the entry revoked.
	LeasesRevoked []int64
	// JobsChanged names the jobs whose state or events the entry changed,
	// sorted, without duplicates.
	JobsChanged []string
	// Restored is set when the whole state was replaced from a snapshot;
	// observers must then re-read everything they cache (leases, jobs).
	Restored bool
}

// New returns an empty FSM at revision 1 with no leases and no jobs. A nil
// logger discards.
func New(logger *slog.Logger) *FSM {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	f := &FSM{
		logger:    logger,
		rev:       1,
		kvs:       newTree(),
		jobUse:    map[string]*usage{},
		leases:    map[int64]*lease{},
		leasesOf:  map[string]int{},
		nextLease: 1,
		histRevs:  HistoryRevisions,
		histBytes: HistoryBytes,
		maxLeases: MaxLeases,
		newJobs:   defaultJobQueue,
	}
	f.halt = f.haltProcess
	f.jobs = f.newJobs()
	return f
}

var _ raft.FSM = (*FSM)(nil)

func lessKV(a, b *pb.KeyValue) bool { return bytes.Compare(a.Key, b.Key) < 0 }

func newTree() *btree.BTreeG[*pb.KeyValue] { return btree.NewG(32, lessKV) }

// SetObserver installs o (nil removes it). See Observer for the calling rules.
func (f *FSM) SetObserver(o Observer) {
	f.obsMu.Lock()
	f.observer = o
	f.obsMu.Unlock()
}

func (f *FSM) notify(n Notification) {
	f.obsMu.Lock()
	o := f.observer
	f.obsMu.Unlock()
	if o != nil {
		o.Applied(n)
	}
}

// AppliedIndex is the index of the last Raft log entry applied (or restored).
func (f *FSM) AppliedIndex() uint64 {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return f.applied
}

// Revision is the current store revision (1 for an empty store).
func (f *FSM) Revision() int64 {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return f.rev
}

// CompactRevision is the highest revision whose events are gone: Events can
// serve any fromRev > CompactRevision. 0 until the first compaction.
func (f *FSM) CompactRevision() int64 {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return f.compactRev
}

// applyCtx is the state of applying one log entry.
type applyCtx struct {
	now  int64
	note *Notification
}

// handler applies one decoded-or-not command payload. It returns the
// response message, or an error wrapping one of the sentinels; on error it
// must have changed nothing.
type handler func(f *FSM, c *applyCtx, payload []byte) (proto.Message, error)

// handlers is the one registration table of command types (Consul's fsm.go
// style). Every type in pb.CommandType except COMMAND_UNKNOWN is here.
var handlers = map[pb.CommandType]handler{
	pb.CommandType_COMMAND_PUT:             typed((*FSM).applyPut),
	pb.CommandType_COMMAND_DELETE_RANGE:    typed((*FSM).applyDeleteRange),
	pb.CommandType_COMMAND_TXN:             typed((*FSM).applyTxn),
	pb.CommandType_COMMAND_LEASE_GRANT:     typed((*FSM).applyLeaseGrant),
	pb.CommandType_COMMAND_LEASE_REVOKE:    typed((*FSM).applyLeaseRevoke),
	pb.CommandType_COMMAND_COMPACT:         typed((*FSM).applyCompact),
	pb.CommandType_COMMAND_SUBMIT_JOB:      typed((*FSM).applySubmitJob),
	pb.CommandType_COMMAND_CANCEL_JOB:      typed((*FSM).applyCancelJob),
	pb.CommandType_COMMAND_GET_TASK:        typed((*FSM).applyGetTask),
	pb.CommandType_COMMAND_TASK_FINISHED:   typed((*FSM).applyTaskFinished),
	pb.CommandType_COMMAND_TASK_FAILED:     typed((*FSM).applyTaskFailed),
	pb.CommandType_COMMAND_EXPIRE_TASKS:    typed((*FSM).applyExpireTasks),
	pb.CommandType_COMMAND_REQUEUE_TRAINER: typed((*FSM).applyRequeueTrainer),
	pb.CommandType_COMMAND_JOB_EVENT:       typed((*FSM).applyJobEvent),
	pb.CommandType_COMMAND_DELETE_JOB:      typed((*FSM).applyDeleteJob),
	pb.CommandType_COMMAND_PRUNE_JOBS:      typed((*FSM).applyPruneJobs),
}

// typed adapts a handler of a concrete request type: it decodes the payload
// into a fresh T and rejects an undecodable one with ErrMalformed.
func typed[T any, PT interface {
	*T
	proto.Message
}, R proto.Message](fn func(*FSM, *applyCtx, PT) (R, error)) handler {
	return func(f *FSM, c *applyCtx, payload []byte) (proto.Message, error) {
		req := PT(new(T))
		if err := proto.Unmarshal(payload, req); err != nil {
			return nil, fmt.Errorf("%w: decode %T: %v", ErrMalformed, req, err)
		}
		resp, err := fn(f, c, req)
		if err != nil {
			return nil, err
		}
		return resp, nil
	}
}

// Apply applies one Raft log entry: l.Data is an encoded pb.Entry whose
// commands are applied in order, each atomically (a rejected command changes
// nothing and does not stop the ones after it). It returns *ApplyResult with
// one pb.Result per command. Log types other than raft.LogCommand are
// acknowledged and change nothing. An entry that does not decode is logged at
// Error level and returned as ApplyResult.Err wrapping ErrMalformed; the
// state is unchanged but the applied index advances. An entry this binary
// cannot apply exactly (an unknown command type or unknown envelope fields)
// halts the replica before anything is applied: see the package doc. Each
// entry first ticks the replicated clock (clock.go); job commands run with
// its value as now.
func (f *FSM) Apply(l *raft.Log) interface{} {
	res := &ApplyResult{Index: l.Index}
	if l.Type != raft.LogCommand {
		f.mu.Lock()
		f.advance(l.Index)
		rev := f.rev
		f.mu.Unlock()
		f.notify(Notification{Index: l.Index, Revision: rev})
		return res
	}
	var entry pb.Entry
	if err := proto.Unmarshal(l.Data, &entry); err != nil {
		res.Err = fmt.Errorf("%w: entry at index %d: %v", ErrMalformed, l.Index, err)
		f.logger.Error("fsm: skipping undecodable log entry", "index", l.Index, "term", l.Term, "bytes", len(l.Data), "err", err)
		f.mu.Lock()
		f.advance(l.Index)
		rev := f.rev
		f.mu.Unlock()
		f.notify(Notification{Index: l.Index, Revision: rev})
		return res
	}

	if err := applicable(&entry); err != nil {
		res.Err = fmt.Errorf("entry at index %d: %w", l.Index, err)
		f.halt(l.Index, res.Err)
		return res // only when halt is a test hook: nothing was applied
	}

	note := Notification{Index: l.Index, NowUnixNano: entry.NowUnixNano}
	c := &applyCtx{note: &note}
	res.Results = make([]*pb.Result, len(entry.Commands))
	f.mu.Lock()
	c.now = f.clock.tick(l.Term, entry.NowUnixNano, entry.MonoNano)
	f.jobs.SetEntryWall(entry.NowUnixNano)
	for i, cmd := range entry.Commands {
		res.Results[i] = f.applyOnce(c, l.Index, i, cmd)
	}
	f.advance(l.Index)
	note.Revision = f.rev
	f.mu.Unlock()
	note.JobsChanged = sortUnique(note.JobsChanged)
	f.notify(note)
	return res
}

// applicable checks that this binary can apply every part of entry exactly:
// every command type is registered, and neither the entry nor a command
// envelope carries fields this binary does not know (a newer leader's
// stamps or flags). An error wraps ErrUnknownCommand.
func applicable(entry *pb.Entry) error {
	if len(entry.ProtoReflect().GetUnknown()) > 0 {
		return fmt.Errorf("%w: the entry carries fields this version does not know", ErrUnknownCommand)
	}
	for i, cmd := range entry.Commands {
		if !KnownCommand(cmd.GetType()) {
			return fmt.Errorf("%w: command %d has type %d (%v)", ErrUnknownCommand, i, int32(cmd.GetType()), cmd.GetType())
		}
		if len(cmd.ProtoReflect().GetUnknown()) > 0 {
			return fmt.Errorf("%w: command %d (%v) carries fields this version does not know", ErrUnknownCommand, i, cmd.GetType())
		}
	}
	return nil
}

// haltProcess is the default halt: log and panic (out of Apply, on raft's
// FSM goroutine, so the process ends with nothing of the entry applied; a
// restart replays the log and halts again at the same index until the
// binary is upgraded).
func (f *FSM) haltProcess(index uint64, err error) {
	f.logger.Error("fsm: halting: this replica cannot apply a committed entry; upgrade raftps on this node",
		"index", index, "err", err)
	panic(fmt.Sprintf("fsm: halting at log index %d: %v; upgrade raftps on this node", index, err))
}

func (f *FSM) advance(index uint64) {
	if index > f.applied {
		f.applied = index
	}
}

// applyCommand runs one command under f.mu. A panicking handler (a bug, or
// input no validation foresaw) is recovered, logged with its stack and
// reported as codes.Internal, so bad input from the wire cannot take the node
// down; every replica recovers identically, so they stay in step.
func (f *FSM) applyCommand(c *applyCtx, index uint64, i int, cmd *pb.Command) (r *pb.Result) {
	defer func() {
		if p := recover(); p != nil {
			f.logger.Error("fsm: command panicked", "index", index, "command", i, "type", cmd.GetType().String(), "panic", fmt.Sprint(p), "stack", string(debug.Stack()))
			r = &pb.Result{Revision: f.rev, Error: &pb.Status{Code: int32(codes.Internal), Message: fmt.Sprintf("fsm: %v panicked: %v", cmd.GetType(), p)}}
		}
	}()
	h := handlers[cmd.GetType()] // applicable checked every type
	resp, err := h(f, c, cmd.GetPayload())
	if err != nil {
		if Code(err) == codes.InvalidArgument && isWireError(err) {
			f.logger.Error("fsm: rejecting malformed command", "index", index, "command", i, "type", cmd.GetType().String(), "err", err)
		}
		return errResult(f.rev, err)
	}
	payload, err := proto.MarshalOptions{Deterministic: true}.Marshal(resp)
	if err != nil { // cannot happen for generated messages; loud if it does
		f.logger.Error("fsm: encode response", "index", index, "command", i, "err", err)
		return &pb.Result{Revision: f.rev, Error: &pb.Status{Code: int32(codes.Internal), Message: err.Error()}}
	}
	return &pb.Result{Payload: payload, Revision: f.rev}
}

func isWireError(err error) bool {
	return errors.Is(err, ErrMalformed) || errors.Is(err, ErrUnknownCommand)
}

func errResult(rev int64, err error) *pb.Result {
	return &pb.Result{Revision: rev, Error: &pb.Status{Code: int32(Code(err)), Message: err.Error()}}
}

func sortUnique(s []string) []string {
	if len(s) < 2 {
		return s
	}
	slices.Sort(s)
	out := s[:1]
	for _, v := range s[1:] {
		if v != out[len(out)-1] {
			out = append(out, v)
		}
	}
	return out
}
