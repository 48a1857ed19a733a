package jepsen

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	pb "github.com/raftps/raftps/api/raftpspb"
	"github.com/raftps/raftps/api/rpctypes"
	"github.com/raftps/raftps/pserver/wire"
	"github.com/raftps/raftps/schema"
)

// The replicated-slot workloads (slots.go): async pushes, one element
// per push (RunSlotPushes), and sync trainers stepping together
// (RunSyncSteps).

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
