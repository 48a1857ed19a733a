package service

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"

	pb "github.com/raftps/raftps/api/raftpspb"
	"github.com/raftps/raftps/api/rpctypes"
	"github.com/raftps/raftps/raftstore"
)

// AddrResolver maps a node id to its gRPC address (from gossip metadata).
type AddrResolver func(nodeID string) (grpcAddr string, ok bool)

// Forwarder sends leader-only work from a follower to the leader over the
// Internal gRPC service. It implements raftstore.Forwarder.
type Forwarder struct {
	resolve AddrResolver
	dial    []grpc.DialOption

	mu     sync.Mutex
	conns  map[string]*grpc.ClientConn
	queues map[string]*forwardQueue // by leader ID: ForwardApply's batching
	closed bool

	closing chan struct{} // closed by Close
	wg      sync.WaitGroup

	noStream bool // batches go by ForwardApplyBatch only (BenchmarkPutFollowerVsLeader compares the two)
}

var _ raftstore.Forwarder = (*Forwarder)(nil)

// NewForwarder returns a Forwarder that finds the leader's gRPC address
// with r; opts are added to its dial options (a node's TLS credentials
// replace the plaintext default).
func NewForwarder(r AddrResolver, opts ...grpc.DialOption) *Forwarder {
	return &Forwarder{resolve: r, dial: opts, conns: map[string]*grpc.ClientConn{},
		queues: map[string]*forwardQueue{}, closing: make(chan struct{})}
}

func (f *Forwarder) client(leaderID string) (pb.InternalClient, error) {
	cc, err := f.conn(leaderID)
	if err != nil {
		return nil, err
	}
	return pb.NewInternalClient(cc), nil
}

// conn returns the pooled connection to leaderID's address, dialing it on
// first use.
func (f *Forwarder) conn(leaderID string) (*grpc.ClientConn, error) {
	addr, ok := f.resolve(leaderID)
	if !ok || addr == "" {
		return nil, fmt.Errorf("%w (leader %q)", errNoAddr, leaderID)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.closed { // a call leaving after Close must not dial a connection nobody closes
		return nil, errForwarderClosed
	}
	cc, ok := f.conns[addr]
	if !ok {
		var err error
		// One connection carries every forwarded write of this node: 1 MiB
		// socket buffers and static windows, as the leader's node-to-node
		// port has (node/grpc.go), for fewer syscalls per batch.
		cc, err = grpc.NewClient(addr, append([]grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials()),
			grpc.WithReadBufferSize(1 << 20), grpc.WithWriteBufferSize(1 << 20),
			grpc.WithInitialWindowSize(1 << 20), grpc.WithInitialConnWindowSize(8 << 20),
			grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(64<<20), grpc.MaxCallSendMsgSize(64<<20))}, f.dial...)...)
		if err != nil {
			return nil, fmt.Errorf("dial leader %s at %s: %w", leaderID, addr, err)
		}
		f.conns[addr] = cc
	}
	return cc, nil
}

// fromStatus maps a forwarded call's error back to our sentinels
// (rpctypes.FromStatus: the leader's NotFound for a lease is
// fsm.ErrLeaseNotFound again) and marks as raftstore.ErrNotLeader the
// answers that prove the call was not applied, so the store retries
// against the next leader: the leader's own "not leader"/"no leader"
// (it lost leadership after we resolved it), and an Unavailable call that
// never reached a transport stream (the leader is dead or unreachable;
// nothing was sent), which sent tells apart (a grpc.Peer filled, which
// happens only once a stream exists, or a ForwardStream opened). Any other
// error keeps its status: a write whose outcome is unknown must not be
// retried blindly.
func fromStatus(err error, sent bool) error {
	if err == nil {
		return nil
	}
	err = rpctypes.FromStatus(err)
	if errors.Is(err, raftstore.ErrNotLeader) {
		return err
	}
	if errors.Is(err, raftstore.ErrNoLeader) {
		return fmt.Errorf("%w: %w", raftstore.ErrNotLeader, err)
	}
	if status.Code(err) == codes.Unavailable && !sent {
		return fmt.Errorf("%w: leader unreachable, nothing sent: %w", raftstore.ErrNotLeader, err)
	}
	return err
}

// ReadIndex asks the leader for its read index.
func (f *Forwarder) ReadIndex(ctx context.Context, leaderID, _ string) (uint64, error) {
	c, err := f.client(leaderID)
	if err != nil {
		return 0, err
	}
	ctx, cancel := withDefaultTimeout(ctx)
	defer cancel()
	var p peer.Peer
	resp, err := c.ReadIndex(ctx, &pb.ReadIndexRequest{}, grpc.Peer(&p))
	if err != nil {
		return 0, fromStatus(err, p.Addr != nil)
	}
	return resp.Index, nil
}

// LeaseKeepAlive renews lease id on the leader.
func (f *Forwarder) LeaseKeepAlive(ctx context.Context, leaderID, _ string, id int64) (int64, error) {
	c, err := f.client(leaderID)
	if err != nil {
		return 0, err
	}
	ctx, cancel := withDefaultTimeout(ctx)
	defer cancel()
	var p peer.Peer
	resp, err := c.LeaseKeepAliveOnce(ctx, &pb.LeaseKeepAliveRequest{Id: id}, grpc.Peer(&p))
	if err != nil {
		return 0, fromStatus(err, p.Addr != nil)
	}
	return resp.Ttl, nil
}

// LeaseTimeToLive asks the leader for lease id's remaining time.
func (f *Forwarder) LeaseTimeToLive(ctx context.Context, leaderID, _ string, id int64) (int64, error) {
	c, err := f.client(leaderID)
	if err != nil {
		return 0, err
	}
	ctx, cancel := withDefaultTimeout(ctx)
	defer cancel()
	var p peer.Peer
	resp, err := c.LeaseTimeToLive(ctx, &pb.LeaseTimeToLiveRequest{Id: id}, grpc.Peer(&p))
	if err != nil {
		return 0, fromStatus(err, p.Addr != nil)
	}
	return resp.Ttl, nil
}

// Close fails the queued ForwardApply calls, closes every pooled
// connection (the calls in flight fail) and waits for the queues'
// goroutines. It is safe to call twice.
func (f *Forwarder) Close() error {
	f.mu.Lock()
	if !f.closed {
		f.closed = true
		close(f.closing)
	}
	for a, cc := range f.conns {
		cc.Close()
		delete(f.conns, a)
	}
	f.mu.Unlock()
	f.wg.Wait()
	return nil
}
