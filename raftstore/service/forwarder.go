package service

import (
	"context"
	"fmt"
	"strings"
	"sync"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	pb "github.com/raftps/raftps/api/raftpspb"
	"github.com/raftps/raftps/raftstore"
)

// AddrResolver maps a node id to its gRPC address (from gossip metadata).
type AddrResolver func(nodeID string) (grpcAddr string, ok bool)

// Forwarder sends leader-only work from a follower to the leader over the
// Internal gRPC service. It implements raftstore.Forwarder.
type Forwarder struct {
	resolve AddrResolver

	mu    sync.Mutex
	conns map[string]*grpc.ClientConn
}

var _ raftstore.Forwarder = (*Forwarder)(nil)

// NewForwarder returns a Forwarder that finds the leader's gRPC address with r.
func NewForwarder(r AddrResolver) *Forwarder {
	return &Forwarder{resolve: r, conns: map[string]*grpc.ClientConn{}}
}

func (f *Forwarder) client(leaderID string) (pb.InternalClient, error) {
	addr, ok := f.resolve(leaderID)
	if !ok || addr == "" {
		return nil, fmt.Errorf("%w (leader %q)", errNoAddr, leaderID)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	cc, ok := f.conns[addr]
	if !ok {
		var err error
		cc, err = grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()),
			grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(64<<20), grpc.MaxCallSendMsgSize(64<<20)))
		if err != nil {
			return nil, fmt.Errorf("dial leader %s at %s: %w", leaderID, addr, err)
		}
		f.conns[addr] = cc
	}
	return pb.NewInternalClient(cc), nil
}

// notLeader turns answers that prove the request was not applied into
// raftstore.ErrNotLeader, so the store retries against the next leader:
// the leader's "not leader" (it lost leadership after we resolved it), and
// a failure to connect to it at all (it died; nothing was sent). Any other
// error is returned as it is: a write whose outcome is unknown must not be
// retried blindly.
func notLeader(err error) error {
	if err == nil {
		return nil
	}
	msg := status.Convert(err).Message()
	if status.Code(err) != codes.Unavailable {
		return err
	}
	if strings.Contains(msg, raftstore.ErrNotLeader.Error()) || strings.Contains(msg, raftstore.ErrNoLeader.Error()) ||
		strings.Contains(msg, "Error while dialing") {
		return fmt.Errorf("%w: %v", raftstore.ErrNotLeader, err)
	}
	return err
}

// ForwardApply applies cmd on the leader and returns its result.
func (f *Forwarder) ForwardApply(ctx context.Context, leaderID, _ string, cmd *pb.Command) (*pb.Result, error) {
	c, err := f.client(leaderID)
	if err != nil {
		return nil, err
	}
	b, err := proto.Marshal(cmd)
	if err != nil {
		return nil, err
	}
	ctx, cancel := withDefaultTimeout(ctx)
	defer cancel()
	resp, err := c.ForwardApply(ctx, &pb.ForwardApplyRequest{Command: b})
	if err != nil {
		return nil, notLeader(err)
	}
	res := &pb.Result{}
	if err := proto.Unmarshal(resp.Result, res); err != nil {
		return nil, fmt.Errorf("decode forwarded result: %w", err)
	}
	return res, nil
}

// ReadIndex asks the leader for its read index.
func (f *Forwarder) ReadIndex(ctx context.Context, leaderID, _ string) (uint64, error) {
	c, err := f.client(leaderID)
	if err != nil {
		return 0, err
	}
	ctx, cancel := withDefaultTimeout(ctx)
	defer cancel()
	resp, err := c.ReadIndex(ctx, &pb.ReadIndexRequest{})
	if err != nil {
		return 0, notLeader(err)
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
	resp, err := c.LeaseKeepAliveOnce(ctx, &pb.LeaseKeepAliveRequest{Id: id})
	if err != nil {
		return 0, notLeader(err)
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
	resp, err := c.LeaseTimeToLive(ctx, &pb.LeaseTimeToLiveRequest{Id: id})
	if err != nil {
		return 0, notLeader(err)
	}
	return resp.Ttl, nil
}

// Close closes every pooled connection.
func (f *Forwarder) Close() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	for a, cc := range f.conns {
		cc.Close()
		delete(f.conns, a)
	}
	return nil
}
