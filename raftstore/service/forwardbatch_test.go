package service

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	pb "github.com/raftps/raftps/api/raftpspb"
	"github.com/raftps/raftps/fsm"
	"github.com/raftps/raftps/raftstore"
)

// echoLeader answers each forwarded command with a Result whose revision
// is the command's PutRequest lease (so a caller can tell its own answer),
// holding each call for delay; it records the size of every batch.
type echoLeader struct {
	pb.UnimplementedInternalServer
	delay   time.Duration
	noBatch bool // answer ForwardApplyBatch with Unimplemented (an older release)

	mu        sync.Mutex
	batches   []int
	singles   int
	deadlines []time.Duration // time left on each ForwardApplyBatch's deadline when it arrived
}

func echo(raw []byte) ([]byte, error) {
	var cmd pb.Command
	var put pb.PutRequest
	if err := proto.Unmarshal(raw, &cmd); err != nil {
		return nil, err
	}
	if err := proto.Unmarshal(cmd.Payload, &put); err != nil {
		return nil, err
	}
	if put.Lease < 0 {
		return nil, status.Error(codes.InvalidArgument, "negative lease")
	}
	return proto.Marshal(&pb.Result{Revision: put.Lease})
}

func (l *echoLeader) ForwardApply(_ context.Context, req *pb.ForwardApplyRequest) (*pb.ForwardApplyResponse, error) {
	l.mu.Lock()
	l.singles++
	l.mu.Unlock()
	time.Sleep(l.delay)
	b, err := echo(req.Command)
	if err != nil {
		return nil, err
	}
	return &pb.ForwardApplyResponse{Result: b}, nil
}

func (l *echoLeader) ForwardApplyBatch(ctx context.Context, req *pb.ForwardApplyBatchRequest) (*pb.ForwardApplyBatchResponse, error) {
	if l.noBatch {
		return nil, status.Error(codes.Unimplemented, "unknown method ForwardApplyBatch")
	}
	l.mu.Lock()
	l.batches = append(l.batches, len(req.Commands))
	if d, ok := ctx.Deadline(); ok {
		l.deadlines = append(l.deadlines, time.Until(d))
	}
	l.mu.Unlock()
	time.Sleep(l.delay)
	out := make([]*pb.ForwardOutcome, len(req.Commands))
	for i, raw := range req.Commands {
		b, err := echo(raw)
		out[i] = outcome(&pb.ForwardApplyResponse{Result: b}, err)
	}
	return &pb.ForwardApplyBatchResponse{Outcomes: out}, nil
}

// streamEcho is echoLeader with ForwardStream: it records each streamed
// batch's size and answers it after delay.
type streamEcho struct {
	*echoLeader
	streamed []int        // guarded by echoLeader.mu
	fail     error        // if set, every command's outcome
	hold     atomic.Int64 // ns each batch is held beyond delay; set while serving
}

func (l *streamEcho) ForwardStream(st pb.Internal_ForwardStreamServer) error {
	var mu sync.Mutex
	var wg sync.WaitGroup
	defer wg.Wait()
	for {
		req, err := st.Recv()
		if err != nil {
			return nil
		}
		l.mu.Lock()
		l.streamed = append(l.streamed, len(req.Commands))
		l.mu.Unlock()
		wg.Add(1)
		go func() {
			defer wg.Done()
			time.Sleep(l.delay + time.Duration(l.hold.Load()))
			out := make([]*pb.ForwardOutcome, len(req.Commands))
			for i, raw := range req.Commands {
				b, err := echo(raw)
				if l.fail != nil {
					err = ToStatus(l.fail)
				}
				out[i] = outcome(&pb.ForwardApplyResponse{Result: b}, err)
			}
			mu.Lock()
			defer mu.Unlock()
			st.Send(&pb.ForwardStreamResponse{Id: req.Id, Outcomes: out})
		}()
	}
}

func serveEcho(t *testing.T, l pb.InternalServer) *Forwarder {
	t.Helper()
	f, _ := serveEchoGRPC(t, l)
	return f
}

func serveEchoGRPC(t *testing.T, l pb.InternalServer) (*Forwarder, *grpc.Server) {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	g := grpc.NewServer()
	pb.RegisterInternalServer(g, l)
	go g.Serve(lis)
	t.Cleanup(g.Stop)
	f := NewForwarder(func(string) (string, bool) { return lis.Addr().String(), true })
	t.Cleanup(func() { f.Close() })
	return f, g
}

// forwardMany makes n concurrent ForwardApply calls, call i a put with
// lease i (lease -1 for every bad-th call, which the leader refuses), and
// checks each caller got its own answer.
func forwardMany(t *testing.T, f *Forwarder, n, bad int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			lease := int64(i)
			if bad > 0 && i%bad == 0 {
				lease = -1
			}
			cmd, err := fsm.NewCommand(pb.CommandType_COMMAND_PUT, &pb.PutRequest{Key: []byte("k"), Lease: lease})
			if err != nil {
				errs <- err
				return
			}
			res, err := f.ForwardApply(ctx, "leader", "", cmd)
			switch {
			case lease < 0 && status.Code(err) != codes.InvalidArgument:
				errs <- fmt.Errorf("call %d: err %v, want InvalidArgument", i, err)
			case lease >= 0 && err != nil:
				errs <- fmt.Errorf("call %d: %v", i, err)
			case lease >= 0 && res.Revision != lease:
				errs <- fmt.Errorf("call %d got the answer of call %d", i, res.Revision)
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

// More concurrent forwards than calls may be in flight: the rest queue and
// leave together, each caller still gets its own answer, and a refused
// command fails alone.
func TestForwardBatchesQueuedCalls(t *testing.T) {
	l := &echoLeader{delay: 20 * time.Millisecond}
	f := serveEcho(t, l)
	n := 4 * maxForwardsInFlight
	forwardMany(t, f, n, 7)
	l.mu.Lock()
	defer l.mu.Unlock()
	sum, most := 0, 0
	for _, b := range l.batches {
		sum += b
		most = max(most, b)
	}
	if sum != n || l.singles != 0 {
		t.Fatalf("leader saw %d commands in batches and %d single calls, want %d and 0", sum, l.singles, n)
	}
	if len(l.batches) >= n || most < 2 {
		t.Fatalf("%d calls for %d commands (largest batch %d): nothing was batched", len(l.batches), n, most)
	}
}

// Once the connection is up, batches go on the leader's ForwardStream
// (none by ForwardApplyBatch), queued calls still share batches, each
// caller gets its own answer and a refused command fails alone.
func TestForwardStreamCarriesBatches(t *testing.T) {
	l := &streamEcho{echoLeader: &echoLeader{delay: 20 * time.Millisecond}}
	f := serveEcho(t, l)
	forwardMany(t, f, 1, 0) // the first goes by ForwardApplyBatch and brings the connection up
	l.mu.Lock()
	unary := len(l.batches)
	l.mu.Unlock()
	n := 4 * maxForwardsInFlight
	forwardMany(t, f, n, 7)
	l.mu.Lock()
	defer l.mu.Unlock()
	sum, most := 0, 0
	for _, b := range l.streamed {
		sum += b
		most = max(most, b)
	}
	if sum != n || len(l.batches) != unary || l.singles != 0 {
		t.Fatalf("leader saw %d commands streamed, %d more batch calls and %d single calls; want %d, 0 and 0", sum, len(l.batches)-unary, l.singles, n)
	}
	if len(l.streamed) >= n || most < 2 {
		t.Fatalf("%d streamed batches for %d commands (largest %d): nothing was batched", len(l.streamed), n, most)
	}
}

// On the stream, as in calls, a leader's "not leader" is ErrNotLeader (the
// store retries on the next leader); a batch in flight when the stream
// breaks has an unknown outcome (not retried); once the leader is gone, a
// batch that was never sent is ErrNotLeader again.
func TestForwardStreamErrorsMapBack(t *testing.T) {
	l := &streamEcho{echoLeader: &echoLeader{}, fail: raftstore.ErrNotLeader}
	f, g := serveEchoGRPC(t, l)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd, err := fsm.NewCommand(pb.CommandType_COMMAND_PUT, &pb.PutRequest{Key: []byte("k")})
	if err != nil {
		t.Fatal(err)
	}
	for range 3 { // the first goes by ForwardApplyBatch (echoLeader answers it)
		f.ForwardApply(ctx, "leader", "", cmd)
	}
	l.hold.Store(int64(5 * time.Second))
	l.mu.Lock()
	streamed := len(l.streamed)
	l.mu.Unlock()
	if streamed == 0 {
		t.Fatal("nothing was streamed")
	}
	if _, err := f.ForwardApply(ctx, "leader", "", cmd); !errors.Is(err, raftstore.ErrNotLeader) {
		t.Fatalf("leader's not-leader on the stream: %v, want ErrNotLeader", err)
	}

	errc := make(chan error, 1)
	go func() {
		_, err := f.ForwardApply(ctx, "leader", "", cmd)
		errc <- err
	}()
	for {
		l.mu.Lock()
		n := len(l.streamed)
		l.mu.Unlock()
		if n > streamed+1 {
			break
		}
		time.Sleep(time.Millisecond)
	}
	g.Stop() // the leader is gone with the batch in flight
	if err := <-errc; err == nil || errors.Is(err, raftstore.ErrNotLeader) {
		t.Fatalf("batch in flight when the stream broke: %v, want an unknown outcome (not ErrNotLeader)", err)
	}
	if _, err := f.ForwardApply(ctx, "leader", "", cmd); !errors.Is(err, raftstore.ErrNotLeader) {
		t.Fatalf("forward after the leader is gone: %v, want ErrNotLeader (nothing sent)", err)
	}
}

// A leader of an older release answers ForwardApplyBatch with
// Unimplemented: the follower forwards each command with ForwardApply.
func TestForwardBatchFallsBackToSingleCalls(t *testing.T) {
	l := &echoLeader{noBatch: true}
	f := serveEcho(t, l)
	forwardMany(t, f, 50, 5)
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.singles != 50 {
		t.Fatalf("leader saw %d single calls, want 50", l.singles)
	}
}

// To a leader without ForwardStream (echoLeader), a lone call (none in
// flight or queued) leaves from its caller's goroutine under the caller's
// deadline, which the leader sees, rather than through the queue under
// forwardTimeout.
func TestForwardLoneCallCarriesCallerDeadline(t *testing.T) {
	l := &echoLeader{}
	f := serveEcho(t, l)
	cmd, err := fsm.NewCommand(pb.CommandType_COMMAND_PUT, &pb.PutRequest{Key: []byte("k"), Lease: 7})
	if err != nil {
		t.Fatal(err)
	}
	const deadline = 3 * time.Second
	for range 5 {
		ctx, cancel := context.WithTimeout(context.Background(), deadline)
		res, err := f.ForwardApply(ctx, "leader", "", cmd)
		cancel()
		if err != nil || res.Revision != 7 {
			t.Fatalf("forward: %v %v", res, err)
		}
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.deadlines) != 5 {
		t.Fatalf("leader saw %d deadlines, want 5", len(l.deadlines))
	}
	for i, d := range l.deadlines {
		if d > deadline {
			t.Fatalf("call %d reached the leader with %v left, more than the caller's %v: it went through the queue", i, d, deadline)
		}
	}
}

// After Close no call dials the leader again (a connection nobody would
// close).
func TestForwarderClosedDialsNothing(t *testing.T) {
	f := serveEcho(t, &echoLeader{})
	f.Close()
	if _, err := f.client("leader"); !errors.Is(err, errForwarderClosed) {
		t.Fatalf("client after Close: %v, want errForwarderClosed", err)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.conns) != 0 {
		t.Fatalf("%d connections after Close, want 0", len(f.conns))
	}
}

// Close fails the calls still queued and waits for the queue's goroutines.
func TestForwarderCloseFailsQueued(t *testing.T) {
	l := &echoLeader{delay: 5 * time.Second}
	f := serveEcho(t, l)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd, err := fsm.NewCommand(pb.CommandType_COMMAND_PUT, &pb.PutRequest{Key: []byte("k")})
	if err != nil {
		t.Fatal(err)
	}
	// Fill every in-flight slot with a call of its own (each waits for the
	// leader to see the previous one), then queue more behind them.
	n := maxForwardsInFlight + 10
	errs := make(chan error, n)
	for i := range n {
		go func() {
			_, err := f.ForwardApply(ctx, "leader", "", cmd)
			errs <- err
		}()
		for i < maxForwardsInFlight {
			l.mu.Lock()
			seen := len(l.batches)
			l.mu.Unlock()
			if seen > i {
				break
			}
			time.Sleep(time.Millisecond)
		}
	}
	time.Sleep(50 * time.Millisecond)
	f.Close()
	closed := 0
	for range n {
		if err := <-errs; errors.Is(err, errForwarderClosed) {
			closed++
		}
	}
	if closed != 10 {
		t.Fatalf("%d calls failed with errForwarderClosed, want the 10 queued", closed)
	}
	if _, err := f.ForwardApply(ctx, "leader", "", cmd); !errors.Is(err, errForwarderClosed) {
		t.Fatalf("after Close: %v, want errForwarderClosed", err)
	}
}

// Through real stores: concurrent writes on a follower, some refused by
// the FSM, each get their own outcome, and the accepted ones are applied.
func TestForwardBatchOnCluster(t *testing.T) {
	c := startGRPCCluster(t, 3)
	ctx := ctxT(t, 30*time.Second)
	fol := c.follower(t, ctx)
	const n = 100
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			key := []byte(fmt.Sprintf("k%03d", i))
			if i%10 == 0 {
				key = nil // empty key: fsm.ErrInvalid
			}
			_, err := fol.Put(ctx, &pb.PutRequest{Key: key, Value: []byte("v")})
			switch {
			case key == nil && !errors.Is(err, fsm.ErrInvalid):
				errs <- fmt.Errorf("put %d with an empty key: %v, want fsm.ErrInvalid", i, err)
			case key != nil && err != nil:
				errs <- fmt.Errorf("put %d: %v", i, err)
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	r, err := c.leader(t, ctx).Range(ctx, &pb.RangeRequest{Key: []byte("k"), RangeEnd: []byte("l"), CountOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	if r.Count != n-n/10 {
		t.Fatalf("leader holds %d keys, want %d", r.Count, n-n/10)
	}
}
