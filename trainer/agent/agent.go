package agent

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sort"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"

	"github.com/raftps/raftps/api/errs"
	pb "github.com/raftps/raftps/api/raftpspb"
	"github.com/raftps/raftps/api/rpctypes"
	"github.com/raftps/raftps/jobspec"
	"github.com/raftps/raftps/pserver/psclient"
	"github.com/raftps/raftps/raftstore/client/concurrency"
	"github.com/raftps/raftps/raftstore/roles"
	"github.com/raftps/raftps/schema"
	"github.com/raftps/raftps/trainer"
	"github.com/raftps/raftps/trainer/dataset"
)

// Meta is what the agent needs of the metadata store.
type Meta interface {
	roles.KV
	concurrency.LeaseAPI
	Jobs() []*pb.JobStatus
}

// MasterAPI is the Master service (in-process on the node; it forwards to
// the leader through Raft).
type MasterAPI interface {
	GetTask(ctx context.Context, req *pb.GetTaskRequest) (*pb.GetTaskResponse, error)
	TaskFinished(ctx context.Context, req *pb.TaskFinishedRequest) (*pb.TaskFinishedResponse, error)
	TaskFailed(ctx context.Context, req *pb.TaskFailedRequest) (*pb.TaskFailedResponse, error)
	GetJob(ctx context.Context, req *pb.GetJobRequest) (*pb.GetJobResponse, error)
}

// SuspectReporter is a MasterAPI that also takes reports of a slot's
// primary a trainer could not reach (master.Service.ReportSuspect): the
// agent's trainers then report every such call (psclient.WithSuspectReporter).
type SuspectReporter interface {
	ReportSuspect(ctx context.Context, req *pb.ReportSuspectRequest) (*pb.ReportSuspectResponse, error)
}

// Config of the agent.
type Config struct {
	NodeID string
	// Addr is this node's gRPC address (recorded in the trainer's key).
	Addr string
	// Trainers per job on this node (default 1).
	Trainers int
	// Incarnation distinguishes this process's trainers from a previous
	// run of the same node (default: the start time, base 36). Trainer ids
	// are <NodeID>-<Incarnation>[-k]: a restarted node's trainer is a new
	// trainer, so what the dead one held is requeued at once instead of
	// being attributed to a process that never took it.
	Incarnation string
	// LeaseTTL of the trainers' lease in seconds (default 5).
	LeaseTTL int64
	// Poll between reconciliations (default 500ms).
	Poll time.Duration
	// DataDir, if set, replaces the jobs' dataset path on this node.
	DataDir string
	// DialOptions are added to the pserver client's (TLS credentials).
	DialOptions []grpc.DialOption
	// ResolveDataset, if set, maps a job's dataset path to the directory
	// to read, or refuses it (a node confines datasets to its roots).
	ResolveDataset func(path string) (string, error)
	// MemoryBudget is the bytes this node's trainers may hold together
	// (TrainerBytes each): a trainer that does not fit in what is left is
	// not started, with a TRAINER_NOT_STARTED event on its job
	// (budget.go). 0: no limit.
	MemoryBudget uint64
	Logger       *slog.Logger
}

// Agent runs the trainer role.
type Agent struct {
	cfg    Config
	meta   Meta
	master MasterAPI
	log    *slog.Logger

	session *concurrency.Session
	mu      sync.Mutex
	lease   int64           // the session's lease as of the last round
	running map[string]*run // by trainer key
	refused map[string]bool // jobs refused for the budget, event recorded (budget.go)
	wg      sync.WaitGroup
}

type run struct {
	job, id string
	cancel  context.CancelFunc
	done    chan struct{}
	t       *trainer.Trainer
	bytes   int64 // TrainerBytes of the job (budget.go)
}

// New returns an agent; Run starts it.
func New(cfg Config, meta Meta, master MasterAPI) *Agent {
	if cfg.Trainers <= 0 {
		cfg.Trainers = 1
	}
	if cfg.Incarnation == "" {
		cfg.Incarnation = strconv.FormatInt(time.Now().UnixMilli(), 36)
	}
	if cfg.LeaseTTL <= 0 {
		cfg.LeaseTTL = 5
	}
	if cfg.Poll <= 0 {
		cfg.Poll = 500 * time.Millisecond
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	return &Agent{cfg: cfg, meta: meta, master: master, log: cfg.Logger.With("component", "trainer-agent"),
		session: concurrency.NewSession(meta, cfg.LeaseTTL), running: map[string]*run{},
		refused: map[string]bool{}}
}

// Run reconciles until ctx ends; then stops its trainers and revokes the
// lease so their tasks are requeued at once.
func (a *Agent) Run(ctx context.Context) error {
	t := time.NewTicker(a.cfg.Poll)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			a.stopAll()
			return nil
		case <-t.C:
		}
		id, lost, err := a.session.Ensure(ctx)
		if err != nil {
			a.log.Warn("trainer lease", "err", err)
			continue
		}
		a.mu.Lock()
		a.lease = id
		if lost {
			a.log.Warn("trainer lease lost: re-registering trainers", "lease", id)
			for _, r := range a.running {
				_ = a.register(ctx, r.job, r.id, id)
			}
		}
		a.mu.Unlock()
		a.reconcile(ctx)
	}
}

// register writes the trainer's schema.TrainerRecord under the lease.
func (a *Agent) register(ctx context.Context, job, id string, lease int64) error {
	v := schema.TrainerRecord{Node: a.cfg.NodeID, Addr: a.cfg.Addr}.Marshal()
	cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	_, err := a.meta.Put(cctx, &pb.PutRequest{Key: []byte(schema.TrainerKey(job, id)), Value: v, Lease: lease})
	return err
}

func (a *Agent) reconcile(ctx context.Context) {
	jobs := a.meta.Jobs()
	live := map[string]bool{}
	for _, j := range jobs {
		if j.State != pb.JobState_JOB_RUNNING || j.Spec == nil {
			continue
		}
		if j.Spec.GetModel().GetName() == jobspec.ModelExternal {
			continue // served by the job's own (e.g. PyTorch) trainers
		}
		for k := 0; k < a.cfg.Trainers; k++ {
			id := a.cfg.NodeID + "-" + a.cfg.Incarnation
			if k > 0 {
				id += "-" + strconv.Itoa(k+1)
			}
			key := schema.TrainerKey(j.Name, id)
			live[key] = true
			a.mu.Lock()
			_, ok := a.running[key]
			a.mu.Unlock()
			if !ok {
				a.start(ctx, j.Spec, id)
			}
		}
	}
	a.mu.Lock()
	for job := range a.refused {
		if !live[schema.TrainerKey(job, a.cfg.NodeID+"-"+a.cfg.Incarnation)] {
			delete(a.refused, job) // ended: forget the refusal
		}
	}
	for key, r := range a.running {
		select {
		case <-r.done:
			if !live[key] {
				delete(a.running, key)
			} else {
				// The trainer returned while the job still runs (an error):
				// restart it on the next round.
				delete(a.running, key)
			}
		default:
			if !live[key] {
				r.cancel()
			}
		}
	}
	a.mu.Unlock()
}

// start loads the dataset (so that the trainer does not hold a sync step
// while it reads), registers the trainer and runs it.
func (a *Agent) start(ctx context.Context, spec *pb.JobSpec, id string) {
	if !a.fits(ctx, spec) {
		return
	}
	dir := spec.GetDataset().GetPath()
	if a.cfg.DataDir != "" {
		dir = a.cfg.DataDir
	} else if a.cfg.ResolveDataset != nil {
		var err error
		if dir, err = a.cfg.ResolveDataset(dir); err != nil {
			a.log.Warn("dataset refused: no trainer here", "job", spec.Name, "err", err)
			return
		}
	}
	if _, err := dataset.LoadFashionMNIST(dir, "train"); err != nil {
		a.log.Warn("dataset not on this node: no trainer here", "job", spec.Name, "dir", dir, "err", err)
		return
	}
	opts := []psclient.ClientOption{psclient.WithDialOptions(a.cfg.DialOptions...)}
	if r, ok := a.master.(SuspectReporter); ok {
		// A failed call to a slot's primary is reported (issue 34: fast detection).
		opts = append(opts, psclient.WithSuspectReporter(func(ctx context.Context, slot int32, addr string, err error) bool {
			out, rerr := r.ReportSuspect(ctx, &pb.ReportSuspectRequest{Job: spec.Name, Slot: slot, Trainer: id, Addr: addr, Reason: err.Error(),
				Source: "trainer"})
			a.log.Debug("suspect primary reported", "job", spec.Name, "slot", slot, "addr", addr, "verdict", out.GetVerdict(), "err", rerr)
			return out.GetMoved()
		}))
	}
	ps, err := psclient.NewClient(spec, id, &resolver{meta: a.meta}, opts...)
	if err != nil {
		a.log.Error("pserver client", "job", spec.Name, "err", err)
		return
	}
	tr, err := trainer.New(trainer.Config{ID: id, Job: spec.Name, DataDir: a.cfg.DataDir, Logger: a.cfg.Logger.With("trainer", id)},
		newMasterAdapter(a.master), &psAdapter{c: ps})
	if err != nil {
		a.log.Error("trainer", "job", spec.Name, "err", err)
		ps.Close()
		return
	}
	a.mu.Lock()
	lease := a.lease
	a.mu.Unlock()
	if err := a.register(ctx, spec.Name, id, lease); err != nil {
		a.log.Warn("register trainer", "job", spec.Name, "id", id, "err", err)
		ps.Close()
		return
	}
	rctx, cancel := context.WithCancel(ctx)
	r := &run{job: spec.Name, id: id, cancel: cancel, done: make(chan struct{}), t: tr, bytes: TrainerBytes(spec)}
	a.mu.Lock()
	a.running[schema.TrainerKey(spec.Name, id)] = r
	a.mu.Unlock()
	a.log.Info("trainer started", "job", spec.Name, "id", id)
	a.wg.Add(1)
	go func() {
		defer a.wg.Done()
		defer close(r.done)
		defer ps.Close()
		err := tr.Run(rctx)
		st := tr.Stats()
		a.log.Info("trainer stopped", "job", spec.Name, "id", id, "err", err, "tasks", st.Tasks, "examples_per_s", fmt.Sprintf("%.0f", st.ExamplesPerSec()))
		dctx, dcancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer dcancel()
		_, _ = a.meta.DeleteRange(dctx, &pb.DeleteRangeRequest{Key: []byte(schema.TrainerKey(spec.Name, id))})
	}()
}

func (a *Agent) stopAll() {
	a.mu.Lock()
	for _, r := range a.running {
		r.cancel()
	}
	a.lease = 0
	a.mu.Unlock()
	a.wg.Wait()
	_ = a.session.Close(context.Background())
}

// resolver finds a job's pserver slots under schema.SlotPrefix, and the
// replica epoch of each replicated one under schema.ReplicaPrefix.
type resolver struct{ meta Meta }

var _ psclient.TargetResolver = (*resolver)(nil)

// Slots maps each claimed slot of job to its pserver's gRPC address
// (serializable read: the pserver client re-resolves on failure).
func (r *resolver) Slots(ctx context.Context, job string) (map[int32]string, error) {
	ts, err := r.Targets(ctx, job)
	if err != nil {
		return nil, err
	}
	out := make(map[int32]string, len(ts))
	for s, t := range ts {
		out[s] = t.Addr
	}
	return out, nil
}

// Targets maps each slot of job to its primary and replica epoch
// (serializable reads: a stale answer costs a refusal and a retry, never
// a wrong acknowledgement). A claimed slot whose replica record names the
// claim's holder as primary gets the record's epoch; a claimed slot with
// no record, or whose record names another node (a restore not yet
// recorded), gets epoch 0 (not checked). A replicated slot with no claim
// (its primary was just promoted: the promotion deleted the old claim)
// resolves to the record's primary at its epoch, so the trainer finds the
// promoted node before it claims.
func (r *resolver) Targets(ctx context.Context, job string) (map[int32]psclient.Target, error) {
	claims, err := r.read(ctx, schema.SlotPrefix(job), schema.KindSlot)
	if err != nil {
		return nil, err
	}
	recs, err := r.read(ctx, schema.ReplicaPrefix(job), schema.KindReplicas)
	if err != nil {
		return nil, err
	}
	out := map[int32]psclient.Target{}
	for slot, kv := range claims {
		if rec, err := schema.ParseSlotRecord(kv.Value); err == nil && rec.Addr != "" {
			out[slot] = psclient.Target{Addr: rec.Addr}
		}
	}
	for slot, kv := range recs {
		rec, err := schema.ParseReplicaRecord(kv.Value, kv.ModRevision)
		if err != nil || rec.Primary.Addr == "" {
			continue
		}
		if t, claimed := out[slot]; !claimed || t.Addr == rec.Primary.Addr {
			out[slot] = psclient.Target{Addr: rec.Primary.Addr, Epoch: rec.Epoch}
		}
	}
	return out, nil
}

// read returns the keys of kind under prefix by slot (serializable).
func (r *resolver) read(ctx context.Context, prefix, kind string) (map[int32]*pb.KeyValue, error) {
	key, end := schema.PrefixRange(prefix)
	resp, err := r.meta.Range(ctx, &pb.RangeRequest{Key: key, RangeEnd: end, Serializable: true})
	if err != nil {
		return nil, err
	}
	out := map[int32]*pb.KeyValue{}
	for _, kv := range resp.Kvs {
		_, k, id, ok := schema.ParseJobKey(string(kv.Key))
		if !ok || k != kind {
			continue
		}
		if slot, err := schema.ParseSlot(id); err == nil {
			out[slot] = kv
		}
	}
	return out, nil
}

// masterAdapter fits MasterAPI to trainer.Master, and makes the trainer's
// writes exactly-once: each call carries a request id (rpctypes.RequestID)
// that the FSM applies once. A call that failed without a definite answer
// (the outcome is unknown: a leader change, a timeout) leaves its id
// pending, and the next call of the same method with an equal request is
// taken for its retry and reuses the id, so a GetTask that was applied but
// whose answer was lost hands the trainer the same task instead of a
// second one (issue 12 item 6).
type masterAdapter struct {
	m   MasterAPI
	ids *requestIDs
}

func newMasterAdapter(m MasterAPI) masterAdapter {
	return masterAdapter{m: m, ids: &requestIDs{client: "trainer-" + strconv.FormatInt(time.Now().UnixNano(), 36) + "-" + strconv.FormatUint(adapterSeq.Add(1), 36),
		pending: map[string][]pendingCall{}}}
}

var adapterSeq atomic.Uint64

// requestIDs numbers one adapter's calls.
type requestIDs struct {
	client  string
	mu      sync.Mutex
	seq     uint64
	pending map[string][]pendingCall // by method: calls whose outcome is unknown, oldest first
}

type pendingCall struct {
	seq uint64
	req proto.Message
}

// maxPending bounds the unknown-outcome calls kept per method; beyond it
// the oldest is forgotten (a later equal call is then a new request).
const maxPending = 16

// begin returns the request id of a call of method with req: a pending
// equal call's, else a new one (pending until end settles it).
func (r *requestIDs) begin(method string, req proto.Message) rpctypes.RequestID {
	r.mu.Lock()
	defer r.mu.Unlock()
	id := rpctypes.RequestID{Client: r.client}
	for _, p := range r.pending[method] {
		if proto.Equal(p.req, req) {
			id.Seq = p.seq
		}
	}
	if id.Seq == 0 {
		r.seq++
		id.Seq = r.seq
		ps := append(r.pending[method], pendingCall{seq: id.Seq, req: proto.Clone(req)})
		if len(ps) > maxPending {
			ps = ps[1:]
		}
		r.pending[method] = ps
	}
	id.Acked = r.seq + 1
	for _, ps := range r.pending {
		for _, p := range ps {
			id.Acked = min(id.Acked, p.seq)
		}
	}
	return id
}

// end settles the call unless its outcome is unknown (an error that is not
// the state machine's answer).
func (r *requestIDs) end(method string, id rpctypes.RequestID, err error) {
	if err != nil && !definite(err) {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.pending[method] = slices.DeleteFunc(r.pending[method], func(p pendingCall) bool { return p.seq == id.Seq })
}

// definite reports an error that is the state machine's answer (the
// command was applied and rejected, or refused before it was proposed).
func definite(err error) bool {
	for _, s := range []error{errs.ErrInvalid, errs.ErrMalformed, errs.ErrNotFound, errs.ErrExists,
		errs.ErrFailedPrecondition, errs.ErrTooLarge, errs.ErrUnknownCommand} {
		if errors.Is(rpctypes.FromStatus(err), s) {
			return true
		}
	}
	return false
}

func call[Req proto.Message, Resp any](ctx context.Context, m masterAdapter, method string, req Req, fn func(context.Context, Req) (Resp, error)) (Resp, error) {
	id := m.ids.begin(method, req)
	resp, err := fn(rpctypes.WithRequestID(ctx, id), req)
	m.ids.end(method, id, err)
	return resp, err
}

func (m masterAdapter) GetTask(ctx context.Context, req *pb.GetTaskRequest) (*pb.GetTaskResponse, error) {
	return call(ctx, m, "GetTask", req, m.m.GetTask)
}
func (m masterAdapter) TaskFinished(ctx context.Context, req *pb.TaskFinishedRequest) (*pb.TaskFinishedResponse, error) {
	return call(ctx, m, "TaskFinished", req, m.m.TaskFinished)
}
func (m masterAdapter) TaskFailed(ctx context.Context, req *pb.TaskFailedRequest) (*pb.TaskFailedResponse, error) {
	return call(ctx, m, "TaskFailed", req, m.m.TaskFailed)
}
func (m masterAdapter) GetJob(ctx context.Context, name string) (*pb.JobStatus, error) {
	resp, err := m.m.GetJob(ctx, &pb.GetJobRequest{Name: name})
	if err != nil {
		return nil, err
	}
	return resp.Status, nil
}

// psAdapter fits psclient.Client to trainer.PS.
type psAdapter struct {
	c   *psclient.Client
	buf map[string][]float32
}

func (p *psAdapter) version() int64 {
	vs := p.c.Versions()
	if len(vs) == 0 {
		return 0
	}
	v := vs[0]
	for _, x := range vs[1:] {
		if x < v {
			v = x
		}
	}
	return v
}

func (p *psAdapter) Pull(ctx context.Context) (map[string][]float32, int64, error) {
	if err := p.c.Pull(ctx, p.params()); err != nil {
		return nil, 0, err
	}
	return p.buf, p.version(), nil
}

// PullCheckpoint implements trainer.CheckpointPuller.
func (p *psAdapter) PullCheckpoint(ctx context.Context) (map[string][]float32, int64, error) {
	if err := p.c.PullCheckpoint(ctx, p.params()); err != nil {
		return nil, 0, err
	}
	return p.buf, p.version(), nil
}

// params is the buffer Pull and PushPull fill, made on first use.
func (p *psAdapter) params() map[string][]float32 {
	if p.buf == nil {
		p.buf = p.c.NewParams()
	}
	return p.buf
}

func (p *psAdapter) PullRows(ctx context.Context, name string, rows []int64) ([]float32, error) {
	return p.c.PullRows(ctx, name, rows)
}

func (p *psAdapter) Push(ctx context.Context, grads map[string][]float32, rowGrads map[string]trainer.RowGrad, _, _, examples int64) (int64, error) {
	if err := p.c.Push(ctx, pushGrads(grads, rowGrads, examples)); err != nil {
		return 0, err
	}
	return p.version(), nil
}

// PushPull implements trainer.PushPuller: the parameters come back in the
// pushes' replies, into the buffer Pull fills (the trainer is done with
// the last step's parameters when it pushes).
func (p *psAdapter) PushPull(ctx context.Context, grads map[string][]float32, rowGrads map[string]trainer.RowGrad, _, _, examples int64) (map[string][]float32, int64, error) {
	if err := p.c.PushPull(ctx, pushGrads(grads, rowGrads, examples), p.params()); err != nil {
		return nil, 0, err
	}
	return p.buf, p.version(), nil
}

// pushGrads is one step's gradients as psclient.Grads (embedding tables in
// name order).
func pushGrads(grads map[string][]float32, rowGrads map[string]trainer.RowGrad, examples int64) *psclient.Grads {
	g := &psclient.Grads{Dense: grads, Examples: examples}
	if len(rowGrads) > 0 {
		g.Sparse = map[string]psclient.SparseGrad{}
		names := make([]string, 0, len(rowGrads))
		for n := range rowGrads {
			names = append(names, n)
		}
		sort.Strings(names)
		for _, n := range names {
			rg := rowGrads[n]
			g.Sparse[n] = psclient.SparseGrad{Rows: rg.IDs, Values: rg.Values}
		}
	}
	return g
}

func (p *psAdapter) LeaveStep(ctx context.Context) error { return p.c.LeaveStep(ctx) }

var (
	_ trainer.PS               = (*psAdapter)(nil)
	_ trainer.PushPuller       = (*psAdapter)(nil)
	_ trainer.CheckpointPuller = (*psAdapter)(nil)
)
