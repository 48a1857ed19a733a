package service

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	spb "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	pb "github.com/raftps/raftps/api/raftpspb"
)

// maxForwardBatch is the most commands one ForwardApplyBatch carries (the
// leader's batcher's default MaxBatch); the leader refuses more.
const maxForwardBatch = 256

// maxForwardsInFlight bounds the ForwardApplyBatch calls a follower has in
// flight to one leader.
const maxForwardsInFlight = 64

// unimplementedBackoff is how long a follower forwards one command per call
// after the leader answered ForwardApplyBatch with Unimplemented (an older
// release during a rolling upgrade).
const unimplementedBackoff = time.Minute

var errForwarderClosed = errors.New("raftstore/service: forwarder closed")

// forwardCall is one ForwardApply waiting in a forwardQueue.
type forwardCall struct {
	ctx  context.Context
	cmd  []byte // an encoded Command
	done chan forwardResult
}

type forwardResult struct {
	res *pb.Result
	err error
}

func (c *forwardCall) answer(res *pb.Result, err error) { c.done <- forwardResult{res, err} }

// forwardQueue coalesces a follower's concurrent ForwardApply calls to one
// leader into ForwardApplyBatch calls: one gRPC call, and one handler on
// the leader, per batch instead of per command. It never waits for a batch
// to fill: each call takes the commands queued at that moment and leaves at
// once (up to maxForwardsInFlight calls in flight), so a lone command goes
// alone (from its caller's goroutine: no handoff to run's and send's), and
// under load (answers reach a follower's clients in bursts,
// which send again together) several share a call. Waiting here as the
// leader's batcher does (package groupcommit) was measured: it stacks on
// the leader's own wait and cut puts at 16 clients by a third.
type forwardQueue struct {
	f          *Forwarder
	leader     string
	calls      chan *forwardCall
	slots      chan struct{}
	mu         sync.Mutex
	noBatchAt  time.Time      // the leader's last Unimplemented answer to ForwardApplyBatch
	noStreamAt time.Time      // ... and to ForwardStream
	stream     *forwardStream // open to the leader, or nil
}

func newForwardQueue(f *Forwarder, leader string) *forwardQueue {
	q := &forwardQueue{f: f, leader: leader, calls: make(chan *forwardCall, 4*maxForwardBatch),
		slots: make(chan struct{}, maxForwardsInFlight)}
	f.wg.Add(1)
	go q.run()
	return q
}

// queue returns the forwardQueue of leaderID, starting it on first use.
func (f *Forwarder) queue(leaderID string) (*forwardQueue, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.closed {
		return nil, errForwarderClosed
	}
	q, ok := f.queues[leaderID]
	if !ok {
		q = newForwardQueue(f, leaderID)
		f.queues[leaderID] = q
	}
	return q, nil
}

// ForwardApply applies cmd on the leader and returns its result. Calls
// made while an earlier one to the same leader is in flight go together in
// one ForwardApplyBatch. If ctx ends after cmd was sent its outcome is
// unknown: the error is ctx's gRPC status, as a cancelled call's would be.
func (f *Forwarder) ForwardApply(ctx context.Context, leaderID, _ string, cmd *pb.Command) (*pb.Result, error) {
	b, err := proto.Marshal(cmd)
	if err != nil {
		return nil, err
	}
	q, err := f.queue(leaderID)
	if err != nil {
		return nil, err
	}
	call := &forwardCall{ctx: ctx, cmd: b, done: make(chan forwardResult, 1)}
	if q.solo() {
		// Nothing in flight or queued: the call leaves from this goroutine,
		// under ctx, instead of through run's and send's (two goroutine
		// wakeups less each way on a lone client's every put).
		sctx, cancel := withDefaultTimeout(ctx)
		q.send(sctx, []*forwardCall{call})
		cancel()
		<-q.slots
		r := <-call.done
		return r.res, r.err
	}
	select {
	case q.calls <- call:
	case <-ctx.Done():
		return nil, status.FromContextError(ctx.Err()).Err()
	case <-f.closing:
		return nil, errForwarderClosed
	}
	select {
	case r := <-call.done:
		return r.res, r.err
	case <-ctx.Done():
		return nil, status.FromContextError(ctx.Err()).Err()
	}
}

func (q *forwardQueue) run() {
	defer q.f.wg.Done()
	for {
		var first *forwardCall
		select {
		case first = <-q.calls:
		case <-q.f.closing:
			q.failQueued()
			return
		}
		select {
		case q.slots <- struct{}{}:
		case <-q.f.closing:
			first.answer(nil, errForwarderClosed)
			q.failQueued()
			return
		}
		batch := []*forwardCall{first}
	drain:
		for len(batch) < maxForwardBatch {
			select {
			case c := <-q.calls:
				batch = append(batch, c)
			default:
				break drain
			}
		}

		live := batch[:0]
		for _, c := range batch {
			if err := c.ctx.Err(); err != nil { // nothing sent: the caller has left
				c.answer(nil, status.FromContextError(err).Err())
				continue
			}
			live = append(live, c)
		}
		if len(live) == 0 {
			<-q.slots
			continue
		}
		q.f.wg.Add(1)
		go func() {
			defer q.f.wg.Done()
			defer func() { <-q.slots }()
			ctx, cancel := context.WithTimeout(context.Background(), forwardTimeout)
			defer cancel()
			q.send(ctx, live)
		}()
	}
}

// solo takes a slot for a call that may leave at once, alone: none is in
// flight to this leader and none is queued. The caller sends it and frees
// the slot.
func (q *forwardQueue) solo() bool {
	select {
	case q.slots <- struct{}{}:
	default:
		return false
	}
	if len(q.slots) == 1 && len(q.calls) == 0 {
		return true
	}
	<-q.slots
	return false
}

func (q *forwardQueue) failQueued() {
	for {
		select {
		case c := <-q.calls:
			c.answer(nil, errForwarderClosed)
		default:
			return
		}
	}
}

// batchOK reports whether the leader is not known to lack ForwardApplyBatch.
func (q *forwardQueue) batchOK(unimplemented bool) bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	if unimplemented {
		q.noBatchAt = time.Now()
	}
	return q.noBatchAt.IsZero() || time.Since(q.noBatchAt) > unimplementedBackoff
}

// send forwards batch in one ForwardApplyBatch under ctx and answers each
// call.
func (q *forwardQueue) send(ctx context.Context, batch []*forwardCall) {
	c, err := q.f.client(q.leader)
	if err != nil {
		for _, call := range batch {
			call.answer(nil, err)
		}
		return
	}
	if !q.batchOK(false) {
		q.sendEach(c, batch)
		return
	}
	if q.sendStream(ctx, batch) {
		return
	}
	req := &pb.ForwardApplyBatchRequest{Commands: make([][]byte, len(batch))}
	for i, call := range batch {
		req.Commands[i] = call.cmd
	}
	var p peer.Peer
	resp, err := c.ForwardApplyBatch(ctx, req, grpc.Peer(&p))
	if status.Code(err) == codes.Unimplemented {
		q.batchOK(true)
		q.sendEach(c, batch)
		return
	}
	answerBatch(batch, resp.GetOutcomes(), err, p.Addr != nil)
}

// answerBatch answers each call of batch with its outcome, or every call
// with err (mapped by fromStatus; sent says whether the batch may have
// reached the leader).
func answerBatch(batch []*forwardCall, outcomes []*pb.ForwardOutcome, err error, sent bool) {
	if err == nil && len(outcomes) != len(batch) {
		err = status.Errorf(codes.Internal, "forward: leader answered %d outcomes for %d commands; outcome unknown", len(outcomes), len(batch))
	}
	if err != nil {
		err = fromStatus(err, sent)
		for _, call := range batch {
			call.answer(nil, err)
		}
		return
	}
	for i, o := range outcomes {
		batch[i].answer(decodeOutcome(o))
	}
}

// sendEach forwards each call with ForwardApply, concurrently.
func (q *forwardQueue) sendEach(c pb.InternalClient, batch []*forwardCall) {
	done := make(chan struct{})
	for _, call := range batch {
		go func() {
			call.answer(forwardOne(call.ctx, c, call.cmd))
			done <- struct{}{}
		}()
	}
	for range batch {
		<-done
	}
}

// forwardOne sends one encoded command with ForwardApply.
func forwardOne(ctx context.Context, c pb.InternalClient, cmd []byte) (*pb.Result, error) {
	ctx, cancel := withDefaultTimeout(ctx)
	defer cancel()
	var p peer.Peer
	resp, err := c.ForwardApply(ctx, &pb.ForwardApplyRequest{Command: cmd}, grpc.Peer(&p))
	if err != nil {
		return nil, fromStatus(err, p.Addr != nil)
	}
	return decodeResult(resp.Result)
}

// decodeOutcome is a ForwardOutcome (which the leader sent) as
// ForwardApply's answer would be.
func decodeOutcome(o *pb.ForwardOutcome) (*pb.Result, error) {
	if len(o.Status) > 0 {
		var sp spb.Status
		if err := proto.Unmarshal(o.Status, &sp); err != nil {
			return nil, status.Errorf(codes.Internal, "forward: malformed status from the leader (outcome unknown): %v", err)
		}
		if err := status.FromProto(&sp).Err(); err != nil {
			return nil, fromStatus(err, true)
		}
	}
	return decodeResult(o.Result)
}

func decodeResult(b []byte) (*pb.Result, error) {
	res := &pb.Result{}
	if err := proto.Unmarshal(b, res); err != nil {
		return nil, fmt.Errorf("decode forwarded result: %w", err)
	}
	return res, nil
}
