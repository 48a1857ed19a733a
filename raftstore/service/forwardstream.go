package service

import (
	"context"
	"io"
	"sync"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/status"

	pb "github.com/raftps/raftps/api/raftpspb"
)

// forwardStream is a follower's Internal.ForwardStream to one leader: its
// forwardQueue's batches go on it as they leave, without a gRPC call (and
// its stream, headers and handler goroutine on both ends) each, and one
// goroutine receives the answers and hands each to the batch waiting for
// its id. (etcd's followers likewise send proposals to the leader on
// long-lived peer streams.)
type forwardStream struct {
	q      *forwardQueue
	stream pb.Internal_ForwardStreamClient
	cancel context.CancelFunc

	mu      sync.Mutex // serializes Send; guards the fields below
	next    uint64     // the last batch's id
	pending map[uint64]chan streamAnswer
	err     error // why the stream ended, once it has
}

type streamAnswer struct {
	outcomes []*pb.ForwardOutcome
	err      error // the stream's end: the batch's outcome is unknown
}

// openStream returns q's ForwardStream, opening it if the connection to the
// leader is ready; nil while it is not (the batch goes by ForwardApplyBatch,
// which also brings the connection up, so opening never waits for a dial)
// and for unimplementedBackoff after the leader answered Unimplemented.
func (q *forwardQueue) openStream() *forwardStream {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.stream != nil {
		return q.stream
	}
	if q.f.noStream || !q.noStreamAt.IsZero() && time.Since(q.noStreamAt) < unimplementedBackoff {
		return nil
	}
	cc, err := q.f.conn(q.leader)
	if err != nil || cc.GetState() != connectivity.Ready {
		return nil
	}
	ctx, cancel := context.WithCancel(context.Background())
	st, err := pb.NewInternalClient(cc).ForwardStream(ctx)
	if err != nil {
		cancel()
		return nil
	}
	q.f.mu.Lock() // Close waits for recv: count it before Close can wait
	if q.f.closed {
		q.f.mu.Unlock()
		cancel()
		return nil
	}
	q.f.wg.Add(1)
	q.f.mu.Unlock()
	s := &forwardStream{q: q, stream: st, cancel: cancel, pending: map[uint64]chan streamAnswer{}}
	q.stream = s
	go s.recv()
	return s
}

// recv hands each answer to its batch until the stream ends.
func (s *forwardStream) recv() {
	defer s.q.f.wg.Done()
	for {
		resp, err := s.stream.Recv()
		if err != nil {
			s.end(err)
			return
		}
		s.mu.Lock()
		ch := s.pending[resp.Id]
		delete(s.pending, resp.Id)
		s.mu.Unlock()
		if ch != nil {
			ch <- streamAnswer{outcomes: resp.Outcomes}
		}
	}
}

// end closes s for new batches and fails the ones sent with err.
func (s *forwardStream) end(err error) {
	if err == io.EOF {
		err = status.Error(codes.Unavailable, "forward: the leader closed the stream")
	}
	s.q.mu.Lock()
	if s.q.stream == s {
		s.q.stream = nil
	}
	s.q.mu.Unlock()
	s.mu.Lock()
	s.err = err
	pending := s.pending
	s.pending = nil
	s.mu.Unlock()
	s.cancel()
	for _, ch := range pending {
		ch <- streamAnswer{err: err}
	}
}

// send sends cmds as one batch and returns its id and the channel its
// answer comes on; sent is false if the stream had already ended (nothing
// was sent).
func (s *forwardStream) send(cmds [][]byte) (id uint64, answer chan streamAnswer, sent bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.err != nil {
		return 0, nil, false
	}
	s.next++
	id, answer = s.next, make(chan streamAnswer, 1)
	s.pending[id] = answer
	// An error means the stream is broken: recv gets its status and
	// answers every pending batch with it.
	_ = s.stream.Send(&pb.ForwardStreamRequest{Id: id, Commands: cmds})
	return id, answer, true
}

// forget drops batch id, whose caller stopped waiting.
func (s *forwardStream) forget(id uint64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.pending, id)
}

// sendStream forwards batch on the leader's ForwardStream, waiting until
// ctx ends, and answers each call. It answers none and returns false when
// the batch was not sent on a stream: none is open (send then uses
// ForwardApplyBatch), or the leader answered Unimplemented (an older
// release: nothing was applied).
func (q *forwardQueue) sendStream(ctx context.Context, batch []*forwardCall) bool {
	s := q.openStream()
	if s == nil {
		return false
	}
	cmds := make([][]byte, len(batch))
	for i, call := range batch {
		cmds[i] = call.cmd
	}
	id, answer, sent := s.send(cmds)
	if !sent {
		return false
	}
	var a streamAnswer
	select {
	case a = <-answer:
	case <-ctx.Done():
		s.forget(id)
		a.err = status.FromContextError(ctx.Err()).Err()
	}
	if status.Code(a.err) == codes.Unimplemented {
		q.mu.Lock()
		q.noStreamAt = time.Now()
		q.mu.Unlock()
		return false
	}
	answerBatch(batch, a.outcomes, a.err, true)
	return true
}
