package jepsen

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	pb "github.com/raftps/raftps/api/raftpspb"
	"github.com/raftps/raftps/api/rpctypes"
	"github.com/raftps/raftps/pserver/wire"
	"github.com/raftps/raftps/schema"
)

// Replicated slots (issue 34; pserver/DESIGN.md, "Replicated slots"): a
// job with replicas 2 whose clients push integer-valued gradients with
// unique push ids, and a per-slot checker over the final parameters.
//
// Each push adds exactly 1 to one element of its slot that no other push
// touches (SGD, learning rate 1, gradient −1 on that element of one dense
// block, parameters initialized to zeros), so the final value of an
// element is the number of times its push was applied, exactly (float32
// holds small integers exactly). That gives the checker every push's
// fate, not only sums.

// Replicated-slot fault kinds (RunSlotFault), each aimed at the primary
// of one slot of a job with replicas 2.
const (
	FaultKillPrimary          = "kill-primary"           // SIGKILL the primary's node, restart it after the hold
	FaultPausePrimary         = "pause-primary"          // SIGSTOP the primary's node past gossip's detection, then SIGCONT
	FaultPartitionPrimaryISR  = "partition-primary-isr"  // cut the primary off from its in-sync backups (both ways)
	FaultPartitionPrimaryLead = "partition-primary-lead" // cut the primary off from the Raft leader (both ways)
)

// SlotFaults lists the replicated-slot fault kinds.
var SlotFaults = []string{FaultKillPrimary, FaultPausePrimary, FaultPartitionPrimaryISR, FaultPartitionPrimaryLead}

// SlotPush is one push of the replicated-slot workload: it adds 1 to
// element Elem (an index into the slot's elements, SlotElements) of Slot
// of Job. Call and Return are ns since the run's start; Status is ok (the
// push was acknowledged), or info (every attempt failed or timed out: it
// may have been applied once, or not at all). Node and Epoch are the node
// that acknowledged it and the epoch of the slot's replica record when
// the client resolved that node (0 for info). Attempts counts the calls
// made, all with the same PushID. In sync mode (RunSyncSteps) Status may
// also be fail: every answer refused the push as stale (its step was over
// without it), so it was counted nowhere.
type SlotPush struct {
	Job     string `json:"job"`
	Client  string `json:"client"`
	Slot    int32  `json:"slot"`
	Elem    int    `json:"elem"`
	PushID  uint64 `json:"push_id"`
	Call    int64  `json:"call"`
	Return  int64  `json:"return"`
	Status  Status `json:"status"`
	Node    string `json:"node,omitempty"`
	Epoch   int64  `json:"epoch,omitempty"`
	Version int64  `json:"version,omitempty"`
	// Step is the sync step the push names (sync mode only).
	Step     int64  `json:"step,omitempty"`
	Attempts int    `json:"attempts"`
	Err      string `json:"err,omitempty"`
}

// SlotFinal is one slot's state at the end: the primary and epoch of its
// replica record (Epoch 0 if the record is gone), the node it was read
// from, its version, and the value of each of its elements.
type SlotFinal struct {
	Slot    int32     `json:"slot"`
	Primary string    `json:"primary"`
	Epoch   int64     `json:"epoch"`
	Node    string    `json:"node"`
	Version int64     `json:"version"`
	Values  []float32 `json:"values"`
}

// SlotJobSpec is the replicated-slot workload's job (dataset: a directory
// under the nodes' --dataset-root, never read): the external model
// with one zero-initialized dense parameter "w" of elems float32s in
// blocks of block, slots pservers with replicas replicas, SGD with
// learning rate 1, and no checkpoints (a restore would be a fallback the
// scenario does not expect).
func SlotJobSpec(name, dataset string, mode pb.UpdateMode, slots, replicas int32, elems, block int64) *pb.JobSpec {
	return &pb.JobSpec{
		Name:  name,
		Model: &pb.ModelSpec{Name: "external"},
		// The external model's trainers are the client's own: no node
		// runs one, and the dataset is never read.
		Dataset:          &pb.DatasetSpec{Path: dataset, Records: 1},
		RecordsPerTask:   1,
		Passes:           1,
		BatchSize:        1,
		NumPservers:      slots,
		Replicas:         replicas,
		Mode:             mode,
		Optimizer:        &pb.OptimizerSpec{Name: "sgd", LearningRate: 1},
		Params:           []*pb.ParamSpec{{Name: "w", Shape: []int64{elems}, Init: pb.Initializer_INIT_ZEROS}},
		DenseBlockSize:   block,
		NumVirtualShards: 64,
		Checkpoint:       &pb.CheckpointPolicy{},
	}
}

// slotElem is one element of a slot: its dense block and offset in it.
type slotElem struct {
	block int64
	off   int64
}

// slotElements lists, per slot, the elements of spec's parameter "w" that
// the slot holds, block by block in ascending order (element j of slot s
// is [s][j]), with the layout and w's.
func slotElements(spec *pb.JobSpec) ([][]slotElem, *wire.Layout, *wire.ParamLayout, error) {
	l, err := wire.NewLayout(spec, spec.GetNumPservers())
	if err != nil {
		return nil, nil, nil, err
	}
	p, ok := l.Param("w")
	if !ok {
		return nil, nil, nil, fmt.Errorf("jepsen: job %q has no param w", spec.GetName())
	}
	out := make([][]slotElem, spec.GetNumPservers())
	for b := int64(0); b < p.Blocks; b++ {
		s := l.SlotOfBlock(p, b)
		lo, hi := l.BlockRange(p, b)
		for off := int64(0); off < hi-lo; off++ {
			out[s] = append(out[s], slotElem{b, off})
		}
	}
	return out, l, p, nil
}

// SlotClients reach a job's pservers the way a trainer does: resolve a
// slot through its claim (/jobs/<job>/ps/<slot>) and its replica record
// (the epoch), then call the claim's address.
type SlotClients struct {
	conns ConnSet
	opts  []grpc.DialOption

	mu  sync.Mutex
	pss map[string]*grpc.ClientConn // pserver address -> conn
}

// NewSlotClients dials pservers lazily with opts (Hosts.DialOptions).
func NewSlotClients(conns ConnSet, opts ...grpc.DialOption) *SlotClients {
	return &SlotClients{conns: conns, opts: opts, pss: map[string]*grpc.ClientConn{}}
}

// Close closes every pserver connection.
func (sc *SlotClients) Close() {
	sc.mu.Lock()
	defer sc.mu.Unlock()
	for a, c := range sc.pss {
		_ = c.Close()
		delete(sc.pss, a)
	}
}

func (sc *SlotClients) pserver(addr string) (pb.PServerClient, error) {
	sc.mu.Lock()
	defer sc.mu.Unlock()
	c, ok := sc.pss[addr]
	if !ok {
		var err error
		c, err = grpc.NewClient(addr, append([]grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}, sc.opts...)...)
		if err != nil {
			return nil, err
		}
		sc.pss[addr] = c
	}
	return pb.NewPServerClient(c), nil
}

// SlotOwner is a slot's resolution: the claim's node and address, and the
// replica record's primary and epoch (0 and "" when there is none).
type SlotOwner struct {
	Node, Addr string
	Primary    string
	Epoch      int64
	Backups    []string
}

// Resolve reads slot's claim and replica record from the first node that
// answers (linearizable reads if lin, else serializable).
func (sc *SlotClients) Resolve(ctx context.Context, job string, slot int32, lin bool) (SlotOwner, error) {
	var lastErr error = fmt.Errorf("no node")
	start := rand.IntN(len(sc.conns))
	for i := range sc.conns {
		c := sc.conns[(start+i)%len(sc.conns)]
		cctx, cancel := context.WithTimeout(ctx, time.Second)
		claim, err := c.KV.Range(cctx, &pb.RangeRequest{Key: []byte(schema.SlotKey(job, slot)), Serializable: !lin})
		var rec *pb.RangeResponse
		if err == nil {
			rec, err = c.KV.Range(cctx, &pb.RangeRequest{Key: []byte(schema.ReplicaKey(job, slot)), Serializable: !lin})
		}
		cancel()
		if err != nil {
			lastErr = err
			continue
		}
		var o SlotOwner
		if len(claim.Kvs) == 1 {
			if r, err := schema.ParseSlotRecord(claim.Kvs[0].Value); err == nil {
				o.Node, o.Addr = r.Node, r.Addr
			}
		}
		if len(rec.Kvs) == 1 {
			if r, err := schema.ParseReplicaRecord(rec.Kvs[0].Value, rec.Kvs[0].ModRevision); err == nil {
				o.Primary, o.Epoch = r.Primary.Node, r.Epoch
				for _, b := range r.Backups {
					o.Backups = append(o.Backups, b.Node)
				}
			}
		}
		if o.Addr == "" {
			return o, fmt.Errorf("slot %d of %s: not claimed (read from %s)", slot, job, c.Name)
		}
		return o, nil
	}
	return SlotOwner{}, lastErr
}

// call resolves slot of job (serializable) and calls fn on the claim's
// pserver with a context bounded by timeout; it returns the resolution
// fn was called on (zero if it was not).
func (sc *SlotClients) call(ctx context.Context, job string, slot int32, timeout time.Duration, fn func(context.Context, pb.PServerClient) error) (SlotOwner, error) {
	o, err := sc.Resolve(ctx, job, slot, false)
	if err != nil {
		return SlotOwner{}, err
	}
	c, err := sc.pserver(o.Addr)
	if err != nil {
		return SlotOwner{}, err
	}
	actx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	return o, fn(actx, c)
}

// SlotWorkload is the push workload of a replicated-slot job (Spec, from
// SlotJobSpec): RunSlotPushes (async) or RunSyncSteps (sync).
type SlotWorkload struct {
	Spec *pb.JobSpec
	// Clients is the number of pushing clients (async) or trainers (sync).
	Clients int
	// Every is the pause of each async client between its pushes.
	Every time.Duration
	// OpTimeout bounds one push, all its attempts included (each attempt
	// is bounded by a quarter of it).
	OpTimeout time.Duration
}

// RunSlotPushes runs w's clients until ctx ends (a push under way ends
// within OpTimeout after that) or the slots' elements run out, records
// every push in h and returns them.
func RunSlotPushes(ctx context.Context, w SlotWorkload, sc *SlotClients, h *History) ([]SlotPush, error) {
	elems, l, p, err := slotElements(w.Spec)
	if err != nil {
		return nil, err
	}
	next := make([]atomic.Int64, len(elems))
	var (
		mu  sync.Mutex
		out []SlotPush
		wg  sync.WaitGroup
	)
	for c := 0; c < w.Clients; c++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), uint64(c)))
			name := fmt.Sprintf("jepsen-c%d", c)
			for ctx.Err() == nil {
				slot := int32(r.IntN(len(elems)))
				j := int(next[slot].Add(1) - 1)
				if j >= len(elems[slot]) {
					return // this slot's elements are used up
				}
				e := elems[slot][j]
				lo, hi := l.BlockRange(p, e.block)
				op := pushOne(w, sc, h, name, slot, j, lo, hi, e)
				h.Add(Record{Type: "slot-push", At: op.Call, SlotPush: &op})
				mu.Lock()
				out = append(out, op)
				mu.Unlock()
				sleepCtx(ctx, w.Every)
			}
		}()
	}
	wg.Wait()
	sort.Slice(out, func(i, j int) bool { return out[i].Call < out[j].Call })
	return out, nil
}

// pushID is the push id of element j of slot (unique in the job: the
// pservers remember a push id per trainer, and each element is pushed once).
func pushID(slot int32, j int) uint64 { return uint64(slot)<<32 | uint64(j+1) }

// pushOne pushes element e (element j of slot, in w's block [lo, hi)) as client name, retrying
// with the same push id on the slot's current owner until acknowledged
// or w.OpTimeout has passed (not cut short by the workload's end: an op
// is always completed or left indeterminate).
func pushOne(w SlotWorkload, sc *SlotClients, h *History, name string, slot int32, j int, lo, hi int64, e slotElem) SlotPush {
	op := SlotPush{Job: w.Spec.GetName(), Client: name, Slot: slot, Elem: j, PushID: pushID(slot, j), Call: h.Now()}
	retryPush(w, sc, h, &op, elemRequest(op, lo, hi, e), func(error) bool {
		return false // any error may hide an applied push: retried, then left indeterminate
	})
	return op
}

// elemRequest is op's push: the gradient −1 on element e of w's block
// [lo, hi) and 0 on the block's others (SGD, learning rate 1: w −= g adds
// 1), with op's push id and, in sync mode, step.
func elemRequest(op SlotPush, lo, hi int64, e slotElem) *pb.PushRequest {
	g := make([]float32, hi-lo)
	g[e.off] = -1
	return &pb.PushRequest{Job: op.Job, Slot: op.Slot, Trainer: op.Client, PushId: op.PushID, Examples: 1, Step: op.Step, Version: op.Step,
		Grads: []*pb.Tensor{{Name: "w", Block: e.block, Data: wire.Float32Bytes(g)}}}
}

// retryPush sends req as op (op.Status ok, with the node, epoch and
// version of the answer) until it is acknowledged, w.OpTimeout has passed
// (op.Status info) or final(err) says an answer is final (op.Status is
// then whatever final set; InvalidArgument ends it as info). Each attempt
// resolves the slot anew and is bounded by a quarter of w.OpTimeout.
func retryPush(w SlotWorkload, sc *SlotClients, h *History, op *SlotPush, req *pb.PushRequest, final func(error) bool) {
	ctx, cancel := context.WithTimeout(context.Background(), w.OpTimeout)
	defer cancel()
	backoff := 20 * time.Millisecond
	for ctx.Err() == nil {
		op.Attempts++
		var resp *pb.PushResponse
		o, err := sc.call(ctx, op.Job, op.Slot, w.OpTimeout/4, func(ctx context.Context, c pb.PServerClient) (err error) {
			resp, err = c.Push(ctx, req)
			return err
		})
		if err == nil {
			op.Status, op.Node, op.Epoch, op.Version, op.Return = StatusOK, o.Node, o.Epoch, resp.GetVersion(), h.Now()
			return
		}
		op.Err = err.Error()
		if final(err) {
			op.Return = h.Now()
			return
		}
		if status.Code(err) == codes.InvalidArgument {
			break // a bad request: not retried
		}
		sleepCtx(ctx, backoff)
		backoff = min(2*backoff, 500*time.Millisecond)
	}
	op.Status, op.Return = StatusInfo, h.Now()
}

// ReadSlotFinals reads every slot's final state: a linearizable
// resolution, then a Pull from the claim's node, retried for up to d.
func ReadSlotFinals(ctx context.Context, spec *pb.JobSpec, sc *SlotClients, d time.Duration) ([]SlotFinal, error) {
	elems, l, p, err := slotElements(spec)
	if err != nil {
		return nil, err
	}
	var out []SlotFinal
	for slot := int32(0); slot < spec.GetNumPservers(); slot++ {
		deadline := time.Now().Add(d)
		var lastErr error
		var f *SlotFinal
		for f == nil && time.Now().Before(deadline) && ctx.Err() == nil {
			f, lastErr = readSlotFinal(ctx, spec, sc, l, p, slot, elems[slot])
			if f == nil {
				sleepCtx(ctx, 300*time.Millisecond)
			}
		}
		if f == nil {
			return out, fmt.Errorf("jepsen: slot %d of %s not read within %s: %v", slot, spec.GetName(), d, lastErr)
		}
		out = append(out, *f)
	}
	return out, nil
}

func readSlotFinal(ctx context.Context, spec *pb.JobSpec, sc *SlotClients, l *wire.Layout, p *wire.ParamLayout, slot int32, elems []slotElem) (*SlotFinal, error) {
	o, err := sc.Resolve(ctx, spec.GetName(), slot, true)
	if err != nil {
		return nil, err
	}
	c, err := sc.pserver(o.Addr)
	if err != nil {
		return nil, err
	}
	cctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	resp, err := c.Pull(cctx, &pb.PullRequest{Job: spec.GetName(), Slot: slot})
	cancel()
	if err != nil {
		return nil, err
	}
	blocks := map[int64][]float32{}
	for _, t := range resp.GetTensors() {
		if t.GetName() != "w" {
			continue
		}
		lo, hi := l.BlockRange(p, t.GetBlock())
		if int64(len(t.GetData())) != 4*(hi-lo) {
			return nil, fmt.Errorf("slot %d block %d: %d bytes, want %d", slot, t.GetBlock(), len(t.GetData()), 4*(hi-lo))
		}
		v := make([]float32, hi-lo)
		wire.GetFloat32s(v, t.GetData())
		blocks[t.GetBlock()] = v
	}
	f := &SlotFinal{Slot: slot, Primary: o.Primary, Epoch: o.Epoch, Node: o.Node, Version: resp.GetVersion(), Values: make([]float32, len(elems))}
	for j, e := range elems {
		b, ok := blocks[e.block]
		if !ok {
			return nil, fmt.Errorf("slot %d: pull lacks block %d", slot, e.block)
		}
		f.Values[j] = b[e.off]
	}
	return f, nil
}

// CheckSlotPushes checks a replicated-slot job's pushes against its final
// state (one SlotFinal per slot), element by element: the element of an
// acknowledged push must be exactly 1 (applied once: 0 is a lost
// acknowledged push, 2 or more a doubled one), that of an indeterminate
// push 0 or 1, and every element no push used 0; each value must be a
// whole number. A lost or doubled push that a node other than the slot's
// final primary acknowledged is named as acknowledged by a deposed
// primary. Stats: "ok",
// "info", "info-applied" (indeterminate pushes that took effect),
// "acked-by-deposed" (acknowledged pushes answered by a primary that was
// later replaced), "slots".
func CheckSlotPushes(pushes []SlotPush, finals []SlotFinal) Result {
	r := newResult("slot-pushes")
	bySlot := map[int32]*SlotFinal{}
	for i := range finals {
		bySlot[finals[i].Slot] = &finals[i]
	}
	r.Stats["slots"] = len(finals)
	used := map[int32]map[int]bool{}
	for _, p := range pushes {
		f := bySlot[p.Slot]
		if f == nil || p.Elem < 0 || p.Elem >= len(f.Values) {
			r.violate("push %d of %s (slot %d element %d, %s): the slot's final state has no such element", p.PushID, p.Client, p.Slot, p.Elem, p.Status)
			continue
		}
		if used[p.Slot] == nil {
			used[p.Slot] = map[int]bool{}
		}
		if used[p.Slot][p.Elem] {
			r.violate("slot %d element %d pushed twice in the history (push %d): the workload reuses an element", p.Slot, p.Elem, p.PushID)
		}
		used[p.Slot][p.Elem] = true
		v := f.Values[p.Elem]
		n, whole := appliedTimes(v)
		who := fmt.Sprintf(" by %s at epoch %d (the slot's final epoch is %d)", p.Node, p.Epoch, f.Epoch)
		if p.Status == StatusOK && p.Node != f.Primary {
			r.Stats["acked-by-deposed"]++
			who = fmt.Sprintf(" by a deposed primary (%s at epoch %d; the final primary is %s at epoch %d)", p.Node, p.Epoch, f.Primary, f.Epoch)
		}
		switch {
		case !whole:
			r.violate("slot %d element %d (push %d, %s): final value %v is not a whole number of pushes", p.Slot, p.Elem, p.PushID, p.Status, v)
		case p.Status == StatusOK:
			r.Stats["ok"]++
			if n == 0 {
				r.violate("slot %d: push %d of %s acknowledged%s at %s (version %d) is lost: element %d is 0", p.Slot, p.PushID, p.Client, who, fmtNs(p.Return), p.Version, p.Elem)
			} else if n > 1 {
				r.violate("slot %d: push %d of %s acknowledged%s at %s (version %d) was applied %d times", p.Slot, p.PushID, p.Client, who, fmtNs(p.Return), p.Version, n)
			}
		case p.Status == StatusInfo:
			r.Stats["info"]++
			if n == 1 {
				r.Stats["info-applied"]++
			} else if n > 1 {
				r.violate("slot %d: indeterminate push %d of %s was applied %d times", p.Slot, p.PushID, p.Client, n)
			}
		default:
			if n != 0 {
				r.violate("slot %d: failed push %d of %s was applied %d times", p.Slot, p.PushID, p.Client, n)
			}
		}
	}
	for _, f := range finals {
		for j, v := range f.Values {
			if used[f.Slot][j] {
				continue
			}
			if v != 0 {
				r.violate("slot %d element %d is %v, but no push used it", f.Slot, j, v)
			}
		}
	}
	if r.Stats["ok"] == 0 {
		r.Verdict = VerdictUnknown
		r.Notes = append(r.Notes, "no push acknowledged")
	}
	return r
}

// appliedTimes is the number of pushes a final element value v stands for
// (whole is false if v is not a non-negative whole number).
func appliedTimes(v float32) (n int, whole bool) {
	f := float64(v)
	if f < 0 || f != math.Trunc(f) || f > 1<<24 {
		return 0, false
	}
	return int(f), true
}

// RunSlotFault injects one replicated-slot fault (kind in SlotFaults) on
// a primary of job (read from the slots' replica records through sc),
// holds it for hold, heals it (a killed node is restarted, a paused one
// resumed, partitions removed) and returns its record (Err set if it
// could not be applied). The fault is aimed at the first slot whose
// record has an in-sync backup (for FaultPartitionPrimaryLead, whose
// primary is not the Raft leader, if there is one).
func RunSlotFault(ctx context.Context, kind string, job string, slots int32, hs *Hosts, conns ConnSet, sc *SlotClients, h *History, hold time.Duration) Fault {
	f := Fault{Type: kind}
	fail := func(err error) {
		if err != nil && f.Err == "" {
			f.Err = err.Error()
		}
	}
	leader := conns.Leader(ctx, time.Second)
	var (
		target  *Host
		owner   SlotOwner
		slot    int32 = -1
		backups []*Host
	)
	for s := int32(0); s < slots; s++ {
		o, err := sc.Resolve(ctx, job, s, true)
		if err != nil || o.Primary == "" || len(o.Backups) == 0 || hs.Host(o.Primary) == nil {
			continue
		}
		better := target == nil || (kind == FaultPartitionPrimaryLead && owner.Primary == leader && o.Primary != leader)
		if better {
			target, owner, slot = hs.Host(o.Primary), o, s
		}
	}
	f.Start = h.Now()
	if target == nil {
		f.Err = "no slot of the job has a primary with an in-sync backup"
		f.End = h.Now()
		return f
	}
	for _, b := range owner.Backups {
		if bh := hs.Host(b); bh != nil {
			backups = append(backups, bh)
		}
	}
	f.Target = target.Name
	f.Detail = fmt.Sprintf("slot %d of %s: primary %s, backups %v, epoch %d; Raft leader %s", slot, job, owner.Primary, owner.Backups, owner.Epoch, leader)
	var heal func()
	switch kind {
	case FaultKillPrimary:
		target.Kill()
		heal = func() { fail(target.Restart()) }
	case FaultPausePrimary:
		fail(target.Pause())
		heal = func() { fail(target.Resume()) }
	case FaultPartitionPrimaryISR:
		fail(hs.Partition([]*Host{target}, backups))
	case FaultPartitionPrimaryLead:
		lh := hs.Host(leader)
		if lh == nil || lh == target {
			// The primary leads (or no leader is known): cut it off from
			// every other node, the leader's view of the fault.
			var others []*Host
			for _, n := range hs.Nodes {
				if n != target {
					others = append(others, n)
				}
			}
			f.Detail += "; the primary is the leader: isolated from every node"
			fail(hs.Partition([]*Host{target}, others))
		} else {
			fail(hs.Partition([]*Host{target}, []*Host{lh}))
		}
	default:
		f.Err = "unknown fault kind"
	}
	h.Notef("nemesis: %s on %s started: %s", f.Type, f.Target, f.Detail)
	sleepCtx(context.Background(), hold) // a fault always gets healed
	if heal != nil {
		heal()
	}
	fail(hs.Heal())
	f.End = h.Now()
	h.Add(Record{Type: "fault", At: f.Start, Fault: &f})
	h.Notef("nemesis: %s on %s healed", f.Type, f.Target)
	return f
}

// syncTrainerTTL is the TTL (seconds) of the lease the sync workload's
// trainers register under: longer than a phase, so that no fault ends
// it (membership changes are not what the scenario tests).
const syncTrainerTTL = 300

// RunSyncSteps runs w.Clients sync trainers over w.Spec (a sync job) until
// ctx ends, records every push in h and returns them. Each trainer t is
// registered under /jobs/<job>/trainers/jepsen-t<t> (a lease of
// syncTrainerTTL), and in each round pulls every slot, takes the lowest
// version as the step s (as psclient does), and pushes to every slot at
// once, with step s, the gradient −1 on the slot's element s·T+t (T =
// w.Clients) and 0 elsewhere in its block. Slot steps average their
// pushes, so element s·T+t of a slot ends at 1/k if trainer t was one of
// the k pushes counted in step s, 0 if not. After ctx ends, a trainer
// finishes its round, goes on while its slots are at different steps (20
// s at most) and then leaves the steps (LeaveStep), so the other trainers
// finish theirs alone.
func RunSyncSteps(ctx context.Context, w SlotWorkload, sc *SlotClients, h *History) ([]SlotPush, error) {
	elems, l, p, err := slotElements(w.Spec)
	if err != nil {
		return nil, err
	}
	job, slots, trainers := w.Spec.GetName(), w.Spec.GetNumPservers(), w.Clients
	if err := sc.registerTrainers(ctx, job, trainers); err != nil {
		return nil, err
	}
	capacity := len(elems[0]) // elements of the slot that holds the fewest
	for _, e := range elems {
		capacity = min(capacity, len(e))
	}
	var (
		mu  sync.Mutex
		out []SlotPush
		wg  sync.WaitGroup
	)
	for t := 0; t < trainers; t++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			name := syncTrainer(t)
			var drainUntil time.Time
			for {
				versions, ok := sc.pullVersions(w, job, slots)
				if ctx.Err() != nil {
					if drainUntil.IsZero() {
						drainUntil = time.Now().Add(20 * time.Second)
					}
					if (ok && slices.Min(versions) == slices.Max(versions)) || time.Now().After(drainUntil) {
						break
					}
				}
				if !ok {
					sleepCtx(context.Background(), 100*time.Millisecond)
					continue
				}
				step := slices.Min(versions)
				if int(step+1)*trainers > capacity {
					break // the elements are used up
				}
				ops := make([]SlotPush, slots)
				var pw sync.WaitGroup
				for s := int32(0); s < slots; s++ {
					pw.Add(1)
					go func() {
						defer pw.Done()
						j := int(step)*trainers + t
						e := elems[s][j]
						lo, hi := l.BlockRange(p, e.block)
						ops[s] = pushSyncOne(w, sc, h, name, s, j, step, lo, hi, e)
					}()
				}
				pw.Wait()
				mu.Lock()
				out = append(out, ops...)
				mu.Unlock()
				for i := range ops {
					h.Add(Record{Type: "slot-push", At: ops[i].Call, SlotPush: &ops[i]})
				}
			}
			sc.leaveSteps(job, name, slots)
		}()
	}
	wg.Wait()
	sort.Slice(out, func(i, j int) bool { return out[i].Call < out[j].Call })
	return out, nil
}

func syncTrainer(t int) string { return fmt.Sprintf("jepsen-t%d", t) }

// registerTrainers puts /jobs/<job>/trainers/jepsen-t<t> for each trainer
// under one lease of syncTrainerTTL, through the first node that takes it.
func (sc *SlotClients) registerTrainers(ctx context.Context, job string, trainers int) error {
	var lastErr error
	for attempt := 0; attempt < 3*len(sc.conns); attempt++ {
		c := sc.conns[attempt%len(sc.conns)]
		cctx, cancel := context.WithTimeout(ctx, 3*time.Second)
		lease, err := c.Lease.LeaseGrant(cctx, &pb.LeaseGrantRequest{Ttl: syncTrainerTTL})
		for t := 0; err == nil && t < trainers; t++ {
			_, err = c.KV.Put(cctx, &pb.PutRequest{Key: []byte(schema.TrainerKey(job, syncTrainer(t))),
				Value: schema.TrainerRecord{Node: "jepsen"}.Marshal(), Lease: lease.GetId()})
		}
		cancel()
		if err == nil {
			return nil
		}
		lastErr = err
		sleepCtx(ctx, 200*time.Millisecond)
	}
	return fmt.Errorf("jepsen: register the trainers of %s: %w", job, lastErr)
}

// pullVersions pulls every slot (each retried on its current owner for
// w.OpTimeout at most) and returns their versions; ok false if a slot did
// not answer.
func (sc *SlotClients) pullVersions(w SlotWorkload, job string, slots int32) ([]int64, bool) {
	ctx, cancel := context.WithTimeout(context.Background(), w.OpTimeout)
	defer cancel()
	out := make([]int64, slots)
	for s := int32(0); s < slots; s++ {
		for {
			_, err := sc.call(ctx, job, s, w.OpTimeout/4, func(ctx context.Context, c pb.PServerClient) error {
				resp, err := c.Pull(ctx, &pb.PullRequest{Job: job, Slot: s})
				out[s] = resp.GetVersion()
				return err
			})
			if err == nil {
				break
			}
			if !sleepCtx(ctx, 50*time.Millisecond) {
				return nil, false
			}
		}
	}
	return out, true
}

// leaveSteps tells every slot that trainer leaves the sync steps (best
// effort: a trainer that does not leave holds the others' last step up
// until their pushes time out, which the checker accepts as
// indeterminate).
func (sc *SlotClients) leaveSteps(job, trainer string, slots int32) {
	for s := int32(0); s < slots; s++ {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		for ctx.Err() == nil {
			_, err := sc.call(ctx, job, s, time.Second, func(ctx context.Context, c pb.PServerClient) error {
				_, err := c.LeaveStep(ctx, &pb.LeaveStepRequest{Job: job, Slot: s, Trainer: trainer})
				return err
			})
			if err == nil {
				break
			}
			sleepCtx(ctx, 100*time.Millisecond)
		}
		cancel()
	}
}

// pushSyncOne is pushOne for sync step step: a push refused as stale by
// every node that answered is a failure (its step went on without it),
// any other error leaves it indeterminate.
func pushSyncOne(w SlotWorkload, sc *SlotClients, h *History, name string, slot int32, j int, step, lo, hi int64, e slotElem) SlotPush {
	op := SlotPush{Job: w.Spec.GetName(), Client: name, Slot: slot, Elem: j, Step: step, PushID: pushID(slot, j), Call: h.Now()}
	unknown := false // some attempt may have been counted
	retryPush(w, sc, h, &op, elemRequest(op, lo, hi, e), func(err error) bool {
		if !errors.Is(rpctypes.FromStatus(err), wire.ErrStale) {
			unknown = true
			return false
		}
		op.Status = StatusFail
		if unknown {
			op.Status = StatusInfo
		}
		return true
	})
	return op
}

// CheckSyncSteps checks a sync replicated-slot job (RunSyncSteps with
// trainers trainers) against its final state: every slot ended at the
// same step N, and each slot's parameters equal a fault-free replay of
// its steps 0..N-1 from the history: step s averages the pushes counted
// in it, which are its acknowledged pushes plus some of its
// indeterminate ones (any subset; a failed push is counted nowhere), so
// element s·T+t is 1/k for each of the k counted trainers t and 0 for the
// others; elements of steps N and later are 0. An acknowledged push of a
// step the slot never completed, or answered with a version other than
// its step + 1, is a violation too. Stats: "ok", "info", "fail",
// "steps" (slot steps replayed), "acked-by-deposed".
func CheckSyncSteps(pushes []SlotPush, finals []SlotFinal, trainers int) Result {
	r := newResult("sync-steps")
	if len(finals) == 0 {
		r.Verdict = VerdictUnknown
		r.Notes = append(r.Notes, "no final state")
		return r
	}
	for _, f := range finals[1:] {
		if f.Version != finals[0].Version {
			var desc []string
			for _, g := range finals {
				desc = append(desc, fmt.Sprintf("slot %d at step %d", g.Slot, g.Version))
			}
			r.violate("the slots ended at different steps: %s", strings.Join(desc, ", "))
			break
		}
	}
	type sk struct {
		slot int32
		step int64
	}
	acked, indet := map[sk][]int{}, map[sk][]int{}
	bySlot := map[int32]SlotFinal{}
	for _, f := range finals {
		bySlot[f.Slot] = f
	}
	for _, p := range pushes {
		t, step := p.Elem%trainers, int64(p.Elem/trainers)
		if step != p.Step {
			r.violate("push %d of %s: element %d is not step %d's", p.PushID, p.Client, p.Elem, p.Step)
			continue
		}
		f, ok := bySlot[p.Slot]
		if !ok {
			r.violate("push %d of %s: slot %d has no final state", p.PushID, p.Client, p.Slot)
			continue
		}
		k := sk{p.Slot, step}
		switch p.Status {
		case StatusOK:
			r.Stats["ok"]++
			if p.Node != f.Primary {
				r.Stats["acked-by-deposed"]++
			}
			acked[k] = append(acked[k], t)
			if step >= f.Version {
				r.violate("slot %d: push %d of %s for step %d acknowledged by %s at epoch %d, but the slot ended at step %d", p.Slot, p.PushID, p.Client, step, p.Node, p.Epoch, f.Version)
			} else if p.Version != step+1 {
				r.violate("slot %d: push %d of %s for step %d acknowledged by %s with version %d, want %d", p.Slot, p.PushID, p.Client, step, p.Node, p.Version, step+1)
			}
		case StatusInfo:
			r.Stats["info"]++
			indet[k] = append(indet[k], t)
		default:
			r.Stats["fail"]++
		}
	}
	for _, f := range finals {
		for s := int64(0); s*int64(trainers) < int64(len(f.Values)); s++ {
			got := f.Values[s*int64(trainers) : min((s+1)*int64(trainers), int64(len(f.Values)))]
			if s >= f.Version {
				for t, v := range got {
					if v != 0 {
						r.violate("slot %d at step %d: element of step %d trainer %d is %v, want 0 (a step beyond the slot's)", f.Slot, f.Version, s, t, v)
					}
				}
				continue
			}
			r.Stats["steps"]++
			k := sk{f.Slot, s}
			if !replayMatches(got, acked[k], indet[k]) {
				r.violate("slot %d step %d: parameters %v, but no replay of its acknowledged pushes (trainers %v) and indeterminate ones (trainers %v) gives them",
					f.Slot, s, got, acked[k], indet[k])
			}
		}
	}
	if r.Stats["ok"] == 0 {
		r.Verdict = VerdictUnknown
		r.Notes = append(r.Notes, "no push acknowledged")
	}
	return r
}

// replayMatches reports whether got (one step's elements, one per
// trainer) is the step's update when the trainers acked and some subset
// of indet were counted: 1/k on each of the k counted, 0 elsewhere.
func replayMatches(got []float32, acked, indet []int) bool {
	for mask := 0; mask < 1<<len(indet); mask++ {
		counted := map[int]bool{}
		for _, t := range acked {
			counted[t] = true
		}
		for i, t := range indet {
			if mask&(1<<i) != 0 {
				counted[t] = true
			}
		}
		if len(counted) == 0 {
			continue // a step completes with at least one push
		}
		want := float32(1 / float64(len(counted)))
		ok := true
		for t, v := range got {
			if (counted[t] && v != want) || (!counted[t] && v != 0) {
				ok = false
				break
			}
		}
		if ok {
			return true
		}
	}
	return false
}
