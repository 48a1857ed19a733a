package psclient

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	pb "github.com/raftps/raftps/api/raftpspb"
	"github.com/raftps/raftps/api/rpctypes"
	"github.com/raftps/raftps/internal/shape"
	"github.com/raftps/raftps/pserver/wire"
)

// Resolver maps a job's slots to pserver gRPC addresses (from
// /jobs/<job>/ps/). The Client calls it again whenever a slot answers
// Unavailable.
type Resolver interface {
	Slots(ctx context.Context, job string) (map[int32]string, error)
}

// SlotWatcher is an optional Resolver extension: WatchSlots sends the
// job's complete slot -> address map whenever /jobs/<job>/ps/ changes, and
// closes the channel when ctx ends. A Client whose resolver implements it
// follows moves at once instead of waiting for an Unavailable.
type SlotWatcher interface {
	WatchSlots(ctx context.Context, job string) (<-chan map[int32]string, error)
}

// Target is where a slot is served: the pserver's gRPC address and the
// slot's replica epoch there (the mod_revision of its replica record,
// schema.ReplicaKey; 0 for an unreplicated slot, or when not known).
type Target struct {
	Addr  string
	Epoch int64
}

// TargetResolver is an optional Resolver extension: Targets maps each
// slot of job to its primary's address and the replica epoch it resolved
// with it. A Client whose resolver implements it sends that epoch with
// every Pull and Push (PullRequest.epoch, PushRequest.epoch): a pserver
// that serves the slot under another epoch, or was deposed, refuses the
// call (ErrEpoch, FailedPrecondition), and the Client resolves the slot
// again and retries (a push with the same push id). Without it the
// Client sends epoch 0, which pservers do not check.
type TargetResolver interface {
	Resolver
	Targets(ctx context.Context, job string) (map[int32]Target, error)
}

// StaticResolver is a fixed slot -> address map (tests, single node).
type StaticResolver map[int32]string

// Slots implements Resolver.
func (r StaticResolver) Slots(context.Context, string) (map[int32]string, error) { return r, nil }

type clientConfig struct {
	dial        []grpc.DialOption
	maxRetries  int
	backoff     time.Duration
	streamBytes int
	reporter    SuspectReporter
}

// ClientOption configures NewClient.
type ClientOption func(*clientConfig)

// WithDialOptions appends gRPC dial options to DialOptions().
func WithDialOptions(o ...grpc.DialOption) ClientOption {
	return func(c *clientConfig) { c.dial = append(c.dial, o...) }
}

// WithRetries sets how many times a call is retried after Unavailable
// (re-resolving the slot each time; default 20) and the first backoff
// (doubling up to 1 s; default 20 ms).
func WithRetries(n int, backoff time.Duration) ClientOption {
	return func(c *clientConfig) { c.maxRetries, c.backoff = n, backoff }
}

// WithStreamThreshold makes per-slot dense pulls and pushes larger than n
// bytes use PullStream/PushStream, chunked by block (default
// StreamChunkBytes; a negative n always uses unary calls).
func WithStreamThreshold(n int) ClientOption {
	return func(c *clientConfig) { c.streamBytes = n }
}

type blockRef struct {
	p      *wire.ParamLayout
	b      int64
	lo, hi int64
}

// Client is a trainer's view of a job's pservers: it splits gradients by
// vshard into one request per slot, calls all slots in parallel, retries
// with re-resolution on Unavailable, and reassembles dense parameters into
// one flat []float32 per parameter (row-major, len = product of shape).
//
// The Client remembers the version each slot returned on the last pull and
// sends it with the next push: in async mode each slot's own, in sync mode
// the lowest of them as every slot's step (syncStep). Safe for
// concurrent use, but a trainer normally alternates Pull and Push.
type Client struct {
	spec     *pb.JobSpec
	layout   *wire.Layout
	job      string
	trainer  string
	resolver Resolver
	cfg      clientConfig
	blocks   [][]blockRef // dense blocks per slot

	stopWatch context.CancelFunc
	suspects  suspects
	pushID    atomic.Uint64 // last push id used (starts at a random value)

	mu       sync.Mutex
	addrs    map[int32]Target
	conns    map[string]*grpc.ClientConn
	versions []int64
	incs     []int64 // per slot: the incarnation of the last pull (0: unknown)
}

// NewClient returns a client of spec's pservers (spec.num_pservers slots)
// for trainer id. It dials lazily.
func NewClient(spec *pb.JobSpec, trainer string, r Resolver, opts ...ClientOption) (*Client, error) {
	n := spec.GetNumPservers()
	if n == 0 {
		n = 1
	}
	l, err := wire.NewLayout(spec, n)
	if err != nil {
		return nil, err
	}
	c := &Client{
		spec: spec, layout: l, job: spec.GetName(), trainer: trainer, resolver: r,
		cfg:      clientConfig{dial: wire.DialOptions(), maxRetries: 20, backoff: 20 * time.Millisecond, streamBytes: wire.StreamChunkBytes},
		blocks:   make([][]blockRef, n),
		addrs:    map[int32]Target{},
		conns:    map[string]*grpc.ClientConn{},
		versions: make([]int64, n),
		incs:     make([]int64, n),
	}
	for _, o := range opts {
		o(&c.cfg)
	}
	// Random start: a restarted trainer reusing its id does not reuse push ids.
	c.pushID.Store(rand.Uint64() >> 1)
	if w, ok := r.(SlotWatcher); ok {
		ctx, cancel := context.WithCancel(context.Background())
		ch, err := w.WatchSlots(ctx, c.job)
		if err != nil {
			cancel()
			return nil, fmt.Errorf("watch slots of job %q: %w", c.job, err)
		}
		c.stopWatch = cancel
		go func() {
			for m := range ch {
				c.mu.Lock()
				addrs := make(map[int32]Target, len(m))
				for s, a := range m {
					t := Target{Addr: a}
					if old := c.addrs[s]; old.Addr == a {
						t.Epoch = old.Epoch // the watch names no epoch: keep the one resolved with the address
					}
					addrs[s] = t
				}
				c.addrs = addrs
				c.mu.Unlock()
			}
		}()
	}
	for _, p := range l.Params {
		if p.Embedding {
			continue
		}
		for b := int64(0); b < p.Blocks; b++ {
			lo, hi := l.BlockRange(p, b)
			s := l.SlotOfBlock(p, b)
			c.blocks[s] = append(c.blocks[s], blockRef{p, b, lo, hi})
		}
	}
	return c, nil
}

// Layout returns the job's sharding layout.
func (c *Client) Layout() *wire.Layout { return c.layout }

// Close stops the slot watch and closes every connection.
func (c *Client) Close() error {
	if c.stopWatch != nil {
		c.stopWatch()
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	var errs []error
	for a, cc := range c.conns {
		errs = append(errs, cc.Close())
		delete(c.conns, a)
	}
	return errors.Join(errs...)
}

// Versions returns the version each slot reported last.
func (c *Client) Versions() []int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]int64(nil), c.versions...)
}

// setVersion records the version a pull or push reply of slot reported
// and the incarnation it came from (inc 0, a reply without one, keeps the
// last).
func (c *Client) setVersion(slot int32, v, inc int64) {
	c.mu.Lock()
	c.versions[slot] = v
	if inc != 0 {
		c.incs[slot] = inc
	}
	c.mu.Unlock()
}

// version returns slot's last version and incarnation (what a push sends).
func (c *Client) version(slot int32) (v, inc int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.versions[slot], c.incs[slot]
}

// syncStep returns, in sync mode (sync true), the one step a push names
// on every slot: the lowest version the slots reported last. The slots of
// a sync job are one model, so a push belongs to one step on all of them:
// a slot already past it refuses the push as stale (re-pull), and the
// slot still at it counts it, so a slot that fell a step behind (its
// trainer membership arrived later, and a step released with fewer
// trainers on the other) catches up instead of staying one step apart
// for the rest of the job, each trainer pushing step N to one slot and
// N+1 to the other.
func (c *Client) syncStep() (step int64, sync bool) {
	if c.spec.GetMode() != pb.UpdateMode_UPDATE_MODE_SYNC {
		return 0, false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Min(c.versions), true
}

// resolve returns every slot's target: the resolver's Targets if it has
// them, else its Slots with epoch 0.
func (c *Client) resolve(ctx context.Context) (map[int32]Target, error) {
	if tr, ok := c.resolver.(TargetResolver); ok {
		return tr.Targets(ctx, c.job)
	}
	m, err := c.resolver.Slots(ctx, c.job)
	if err != nil {
		return nil, err
	}
	out := make(map[int32]Target, len(m))
	for s, a := range m {
		out[s] = Target{Addr: a}
	}
	return out, nil
}

// conn returns the connection to slot's pserver and the replica epoch
// resolved with its address (what a request names), resolving if needed.
func (c *Client) conn(ctx context.Context, slot int32) (*grpc.ClientConn, int64, error) {
	c.mu.Lock()
	t, ok := c.addrs[slot]
	c.mu.Unlock()
	if !ok {
		m, err := c.resolve(ctx)
		if err != nil {
			return nil, 0, fmt.Errorf("resolve job %q: %w", c.job, err)
		}
		c.mu.Lock()
		for s, a := range m {
			c.addrs[s] = a
		}
		t, ok = c.addrs[slot]
		c.mu.Unlock()
		if !ok {
			return nil, 0, wire.Errorf(wire.ErrNotHosted, "job %q slot %d has no pserver yet", c.job, slot)
		}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	cc, ok := c.conns[t.Addr]
	if !ok {
		var err error
		cc, err = grpc.NewClient(t.Addr, c.cfg.dial...)
		if err != nil {
			return nil, 0, fmt.Errorf("dial %s: %w", t.Addr, err)
		}
		c.conns[t.Addr] = cc
	}
	return cc, t.Epoch, nil
}

func (c *Client) invalidate(slot int32) {
	c.mu.Lock()
	delete(c.addrs, slot)
	c.mu.Unlock()
}

// fromGRPC maps a gRPC status back to the sentinel it names
// (rpctypes.FromStatus). An Unavailable that names no slot sentinel is a
// transport failure (the pserver may be gone): it becomes ErrNotHosted, so
// the client re-resolves the slot.
func fromGRPC(err error) error {
	err = rpctypes.FromStatus(err)
	if status.Code(err) == codes.Unavailable && !retryable(err) {
		return &wire.Error{Sentinel: wire.ErrNotHosted, Detail: err.Error()}
	}
	return err
}

// retryable reports whether err asks the client to re-resolve the slot.
func retryable(err error) bool {
	return errors.Is(err, wire.ErrNotHosted) || errors.Is(err, wire.ErrFenced) || errors.Is(err, wire.ErrEpoch)
}

// do calls fn on slot's pserver with the replica epoch resolved with its
// address, retrying with re-resolution while it answers Unavailable or
// ErrEpoch (or cannot be resolved). fn builds its request's epoch from
// the argument on every attempt; a push keeps its push id.
func (c *Client) do(ctx context.Context, slot int32, fn func(cc *grpc.ClientConn, epoch int64) error) error {
	backoff := c.cfg.backoff
	for attempt := 0; ; attempt++ {
		var moved <-chan struct{} // nil (never ready) without a reporter: nothing closes it
		if c.cfg.reporter != nil {
			moved = c.suspects.movedCh(slot) // before a report can close it
		}
		cl, epoch, err := c.conn(ctx, slot)
		if err == nil {
			err = fn(cl, epoch)
			if err == nil {
				return nil
			}
			if c.cfg.reporter != nil && Transport(err) {
				c.suspects.report(c.cfg.reporter, slot, cl.Target(), err)
			}
			err = fromGRPC(err)
			if !retryable(err) {
				return fmt.Errorf("slot %d: %w", slot, err)
			}
		}
		if attempt >= c.cfg.maxRetries || ctx.Err() != nil {
			return fmt.Errorf("slot %d: %w", slot, err)
		}
		c.invalidate(slot)
		t := time.NewTimer(backoff)
		select {
		case <-ctx.Done():
			t.Stop()
			return fmt.Errorf("slot %d: %w (last error: %v)", slot, ctx.Err(), err)
		case <-moved: // a backup was promoted: look for it with short waits again
			t.Stop()
			backoff = c.cfg.backoff
			continue
		case <-t.C:
		}
		backoff = min(2*backoff, time.Second)
	}
}

// parallel runs fn for every slot concurrently and joins the errors.
func (c *Client) parallel(fn func(slot int32) error) error {
	n := c.layout.NumPservers
	if n == 1 {
		return fn(0) // no goroutine hand-off per call with one pserver
	}
	errs := make([]error, n)
	var wg sync.WaitGroup
	for s := range n - 1 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[s] = fn(s)
		}()
	}
	errs[n-1] = fn(n - 1) // the last one on the caller's goroutine
	wg.Wait()
	return errors.Join(errs...)
}

func (c *Client) slotBytes(slot int32) int {
	n := 0
	for _, br := range c.blocks[slot] {
		n += int(br.hi-br.lo) * 4
	}
	return n
}

func (c *Client) useStream(slot int32) bool {
	return c.cfg.streamBytes >= 0 && c.slotBytes(slot) > c.cfg.streamBytes
}

// NewParams allocates one flat []float32 per dense parameter.
func (c *Client) NewParams() map[string][]float32 {
	m := make(map[string][]float32)
	for _, p := range c.layout.Params {
		if !p.Embedding {
			m[p.Spec.GetName()] = make([]float32, p.Size)
		}
	}
	return m
}

// Pull pulls every dense parameter into dst (allocating missing or
// wrong-sized entries; pass the same map each step to reuse the buffers)
// and records each slot's version for the next Push.
func (c *Client) Pull(ctx context.Context, dst map[string][]float32) error {
	c.allocParams(dst)
	return c.parallel(func(slot int32) error { return c.pullSlot(ctx, slot, dst, false) })
}

// PullCheckpoint is Pull that also asks every slot to checkpoint the
// parameters it reads (PullRequest.checkpoint; Slot.SnapshotOnPull): an
// eval pulls with it, so the version its metric measures is a checkpoint
// version (epoch*schema.EpochStride + the version Versions reports) once the
// slots' writers commit it. Errors: Pull's.
func (c *Client) PullCheckpoint(ctx context.Context, dst map[string][]float32) error {
	c.allocParams(dst)
	return c.parallel(func(slot int32) error { return c.pullSlot(ctx, slot, dst, true) })
}

// allocParams gives dst a full-sized array for every dense parameter.
func (c *Client) allocParams(dst map[string][]float32) {
	for _, p := range c.layout.Params {
		if n := p.Spec.GetName(); !p.Embedding && int64(len(dst[n])) != p.Size {
			dst[n] = make([]float32, p.Size)
		}
	}
}

// pullSlot pulls slot's dense blocks into dst (sized by allocParams).
func (c *Client) pullSlot(ctx context.Context, slot int32, dst map[string][]float32, checkpoint bool) error {
	return c.do(ctx, slot, func(cc *grpc.ClientConn, epoch int64) error {
		req := &pb.PullRequest{Job: c.job, Slot: slot, Checkpoint: checkpoint, Epoch: epoch}
		// The tensor codec reads blocks straight into dst.
		sink := &wire.PullSink{Layout: c.layout, Slot: slot, Dst: dst}
		if !c.useStream(slot) {
			if err := cc.Invoke(ctx, pb.PServer_Pull_FullMethodName, req, sink, wire.TensorCallOption); err != nil {
				return err
			}
			c.setVersion(slot, sink.Version, sink.Incarnation)
			return c.pulledAll(slot, sink)
		}
		sctx, cancel := context.WithCancel(ctx)
		defer cancel()
		st, err := pb.NewPServerClient(cc).PullStream(sctx, wire.TensorCallOption)
		if err != nil {
			return err
		}
		if err := st.Send(req); err != nil {
			return err
		}
		if err := st.CloseSend(); err != nil {
			return err
		}
		for {
			if err := st.RecvMsg(sink); errors.Is(err, io.EOF) {
				return c.pulledAll(slot, sink)
			} else if err != nil {
				return err
			}
			c.setVersion(slot, sink.Version, sink.Incarnation)
		}
	})
}

// pulledAll checks that sink received every dense block of slot.
func (c *Client) pulledAll(slot int32, sink *wire.PullSink) error {
	if want := len(c.blocks[slot]); sink.Placed != want {
		return fmt.Errorf("pull: slot %d sent %d blocks, want %d", slot, sink.Placed, want)
	}
	return nil
}

// SparseGrad is the gradient of some rows of an embedding table:
// Values holds len(Rows) × dim float32s, row-major.
type SparseGrad struct {
	Rows   []int64
	Values []float32
}

// Grads is one mini-batch's gradients: dense parameters as flat []float32
// (len = product of shape; a missing param sends no gradient), embedding
// rows (a row listed more than once has its gradients summed), and the
// number of examples (weights the sync average; 1 <= Examples <=
// MaxExamples, 0 counts as 1).
type Grads struct {
	Dense    map[string][]float32
	Sparse   map[string]SparseGrad
	Examples int64
}

// Push sends g to every slot in parallel (every slot gets a request, empty
// if it holds none of g, so sync steps complete), with the versions of the
// last pull (sync: one step, the lowest of them, on every slot). It returns after every slot accepted (sync: after the step
// completed). Errors wrap ErrStale (re-pull and recompute), ErrInvalid, or
// the last Unavailable or ErrEpoch after retries.
//
// With a TargetResolver each request carries the slot's replica epoch;
// a refusal (ErrEpoch: the primary serves another epoch, or was deposed)
// is retried where the slot resolves anew, with the same push id. A
// replicated slot's promoted backup holds the push ids of every push the
// old primary acknowledged (they ride in the replication), so that retry
// applies exactly once.
//
// Every Push carries a fresh push id, the same on each retry; a slot
// applies a push id at most once (sync and async), so retries after
// Unavailable (a lost reply, a broken connection) never apply a gradient
// twice on a slot that stays put. A slot that moved to another node
// forgets the ids (they are not in checkpoints): there an async retry
// applies whether or not the restored checkpoint already held the push (if
// it did, that gradient counts twice, within the staleness bound), and a
// sync retry names the incarnation it pulled from, so the new holder
// refuses it with ErrStale (re-pull and recompute on the restored
// parameters).
func (c *Client) Push(ctx context.Context, g *Grads) error {
	return c.push(ctx, g, nil)
}

// PushPull is Push followed by Pull(ctx, dst), in one round trip per slot:
// each unary push asks for the slot's parameters in its reply
// (PushRequest.pull), read after the push applied (sync: after the step
// completed). A slot that answers without them (fenced meanwhile, or a
// pserver older than the field), or that is large enough to stream, is
// pulled after its push as Pull does. On error dst may hold some slots'
// new parameters and not others': pull again before using it.
func (c *Client) PushPull(ctx context.Context, g *Grads, dst map[string][]float32) error {
	c.allocParams(dst)
	return c.push(ctx, g, dst)
}

// push is Push, and with dst != nil PushPull.
func (c *Client) push(ctx context.Context, g *Grads, dst map[string][]float32) error {
	for name, d := range g.Dense {
		p, ok := c.layout.Param(name)
		if !ok || p.Embedding {
			return wire.Errorf(wire.ErrInvalid, "push: %q is not a dense param", name)
		}
		if int64(len(d)) != p.Size {
			return wire.Errorf(wire.ErrInvalid, "push: param %q has %d values, want %d", name, len(d), p.Size)
		}
	}
	sparse := make([][]*pb.Tensor, c.layout.NumPservers)
	for name, sg := range g.Sparse {
		p, ok := c.layout.Param(name)
		if !ok || !p.Embedding {
			return wire.Errorf(wire.ErrInvalid, "push: %q is not an embedding", name)
		}
		if n, ok := shape.Mul(int64(len(sg.Rows)), p.Dim); !ok || int64(len(sg.Values)) != n {
			return wire.Errorf(wire.ErrInvalid, "push: param %q: %d values for %d rows of dim %d", name, len(sg.Values), len(sg.Rows), p.Dim)
		}
		// The pservers refuse a row named twice: repeated rows are summed
		// here (the gradient of a row is the sum of its occurrences).
		per := make([]*pb.Tensor, c.layout.NumPservers)
		at := make(map[int64]int, len(sg.Rows)) // row -> position in its slot's tensor
		d := int(p.Dim)
		for j, r := range sg.Rows {
			if r < 0 || r >= p.Buckets {
				return wire.Errorf(wire.ErrInvalid, "push: param %q row %d out of range", name, r)
			}
			s := c.layout.SlotOfRow(p, r)
			if per[s] == nil {
				per[s] = &pb.Tensor{Name: name}
			}
			v := sg.Values[j*d : (j+1)*d]
			if i, dup := at[r]; dup {
				sum := wire.ViewFloat32s(per[s].Data[4*i*d : 4*(i+1)*d])
				for k, x := range v {
					sum[k] += x
				}
				wire.PutFloat32s(per[s].Data[4*i*d:], sum)
				continue
			}
			at[r] = len(per[s].Rows)
			per[s].Rows = append(per[s].Rows, r)
			per[s].Data = append(per[s].Data, wire.Float32Bytes(v)...)
		}
		for s, t := range per {
			if t != nil {
				sparse[s] = append(sparse[s], t)
			}
		}
	}
	id := c.pushID.Add(1)
	if id == 0 {
		id = c.pushID.Add(1)
	}
	step, lockstep := c.syncStep()
	return c.parallel(func(slot int32) error {
		var ts []*pb.Tensor
		for _, br := range c.blocks[slot] {
			d, ok := g.Dense[br.p.Spec.GetName()]
			if !ok {
				continue
			}
			ts = append(ts, &pb.Tensor{Name: br.p.Spec.GetName(), Block: br.b, Data: wire.Float32Bytes(d[br.lo:br.hi])})
		}
		ts = append(ts, sparse[slot]...)
		v, inc := c.version(slot)
		if lockstep {
			v = step
		}
		req := &pb.PushRequest{Job: c.job, Slot: slot, Trainer: c.trainer, Version: v, Step: v, Grads: ts, Examples: g.Examples, PushId: id,
			Incarnation: inc}
		stream := c.useStream(slot)
		var sink *wire.PullSink // the pull carried by the push's reply
		err := c.do(ctx, slot, func(cc *grpc.ClientConn, epoch int64) error {
			req.Epoch = epoch // the push id stays: a retry where the slot resolves anew applies at most once
			switch {
			case stream && len(ts) > 1:
				resp, err := c.pushStream(ctx, cc, req)
				if err != nil {
					return err
				}
				c.setVersion(slot, resp.GetVersion(), resp.GetIncarnation())
				return nil
			case dst != nil && !stream:
				req.Pull = true
				sink = &wire.PullSink{Layout: c.layout, Slot: slot, Dst: dst}
				if err := cc.Invoke(ctx, pb.PServer_Push_FullMethodName, req, sink, wire.TensorCallOption); err != nil {
					return err
				}
				c.setVersion(slot, sink.Version, sink.Incarnation)
				return nil
			}
			resp, err := pb.NewPServerClient(cc).Push(ctx, req, wire.TensorCallOption)
			if err != nil {
				return err
			}
			c.setVersion(slot, resp.GetVersion(), resp.GetIncarnation())
			return nil
		})
		if err != nil || dst == nil {
			return err
		}
		if sink != nil && (sink.Placed > 0 || len(c.blocks[slot]) == 0) {
			return c.pulledAll(slot, sink)
		}
		return c.pullSlot(ctx, slot, dst, false)
	})
}

func (c *Client) pushStream(ctx context.Context, cc *grpc.ClientConn, req *pb.PushRequest) (*pb.PushResponse, error) {
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	st, err := pb.NewPServerClient(cc).PushStream(sctx, wire.TensorCallOption)
	if err != nil {
		return nil, err
	}
	for i, chunk := range wire.ChunkTensors(req.Grads, wire.StreamChunkBytes) {
		m := &pb.PushRequest{Grads: chunk}
		if i == 0 {
			m = streamHeader(req, chunk)
		}
		if err := st.Send(m); err != nil {
			if errors.Is(err, io.EOF) {
				break // the server ended the stream; Recv has the status
			}
			return nil, err
		}
	}
	if err := st.CloseSend(); err != nil {
		return nil, err
	}
	return st.Recv()
}

// streamHeader is the first message of req's PushStream: every field of
// req (the server takes the push's job, slot, trainer, version, step,
// examples, push id, incarnation and epoch from the first message alone,
// pserver.Server.PushStream) with grads in place of req's gradients.
func streamHeader(req *pb.PushRequest, grads []*pb.Tensor) *pb.PushRequest {
	return &pb.PushRequest{Job: req.Job, Slot: req.Slot, Trainer: req.Trainer, Version: req.Version, Step: req.Step,
		Grads: grads, Examples: req.Examples, PushId: req.PushId, Pull: req.Pull, Incarnation: req.Incarnation, Epoch: req.Epoch}
}

// PullRows returns rows of embedding `name` (len(rows) × dim float32s,
// row-major); a row never pushed comes back as its initial value. A row
// may appear more than once in rows (each pserver is asked for it once).
func (c *Client) PullRows(ctx context.Context, name string, rows []int64) ([]float32, error) {
	p, ok := c.layout.Param(name)
	if !ok || !p.Embedding {
		return nil, wire.Errorf(wire.ErrInvalid, "pull rows: %q is not an embedding", name)
	}
	// Each slot is asked for each distinct row once (the pservers refuse
	// a row named twice); pos[j] is row j's place in its slot's request.
	per := make([][]int64, c.layout.NumPservers)
	pos := make([]int, len(rows))
	at := make(map[int64]int, len(rows))
	for j, r := range rows {
		if r < 0 || r >= p.Buckets {
			return nil, wire.Errorf(wire.ErrInvalid, "pull rows: param %q row %d out of range [0, %d)", name, r, p.Buckets)
		}
		s := c.layout.SlotOfRow(p, r)
		i, ok := at[r]
		if !ok {
			i = len(per[s])
			at[r] = i
			per[s] = append(per[s], r)
		}
		pos[j] = i
	}
	n, ok := shape.Mul(int64(len(rows)), p.Dim)
	if !ok || n > wire.MaxPullBytes/4 {
		return nil, wire.Errorf(wire.ErrInvalid, "pull rows: %d rows of dim %d of param %q are too many for one pull", len(rows), p.Dim, name)
	}
	out := make([]float32, n)
	d := int(p.Dim)
	data := make([][]byte, c.layout.NumPservers)
	err := c.parallel(func(slot int32) error {
		if len(per[slot]) == 0 {
			return nil
		}
		t := &pb.Tensor{Name: name, Rows: per[slot]}
		return c.do(ctx, slot, func(cc *grpc.ClientConn, epoch int64) error {
			resp, err := pb.NewPServerClient(cc).Pull(ctx, &pb.PullRequest{Job: c.job, Slot: slot, Tensors: []*pb.Tensor{t}, Epoch: epoch}, wire.TensorCallOption)
			if err != nil {
				return err
			}
			if len(resp.GetTensors()) != 1 || resp.Tensors[0].GetName() != name || len(resp.Tensors[0].GetData()) != 4*d*len(per[slot]) {
				return fmt.Errorf("pull rows: slot %d sent a bad response for %q", slot, name)
			}
			data[slot] = resp.Tensors[0].GetData()
			c.setVersion(slot, resp.GetVersion(), resp.GetIncarnation())
			return nil
		})
	})
	if err != nil {
		return nil, err
	}
	for j, r := range rows {
		b := data[c.layout.SlotOfRow(p, r)]
		wire.GetFloat32s(out[j*d:(j+1)*d], b[4*pos[j]*d:])
	}
	return out, err
}

// PushRows pushes the gradient of some embedding rows (and nothing else) in
// one Push: in sync mode it is the trainer's push for the step.
func (c *Client) PushRows(ctx context.Context, name string, rows []int64, grads []float32, examples int64) error {
	return c.Push(ctx, &Grads{Sparse: map[string]SparseGrad{name: {Rows: rows, Values: grads}}, Examples: examples})
}

// LeaveStep tells every slot this trainer leaves sync steps (out of data).
func (c *Client) LeaveStep(ctx context.Context) error {
	return c.parallel(func(slot int32) error {
		return c.do(ctx, slot, func(cc *grpc.ClientConn, _ int64) error {
			_, err := pb.NewPServerClient(cc).LeaveStep(ctx, &pb.LeaveStepRequest{Job: c.job, Slot: slot, Trainer: c.trainer}, wire.TensorCallOption)
			return err
		})
	})
}
