package jepsen

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	pb "github.com/raftps/raftps/api/raftpspb"
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
