package service

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	pb "github.com/raftps/raftps/api/raftpspb"
	"github.com/raftps/raftps/api/rpctypes"
	"github.com/raftps/raftps/fsm"
	"github.com/raftps/raftps/raftstore"
	"github.com/raftps/raftps/security"
)

// Store is what the KV, Lease, Watch and Internal services need of the
// Raft store. *raftstore.Store implements it.
type Store interface {
	raftstore.KV
	raftstore.Lessor
	RecordJobEvent(ctx context.Context, ev *pb.JobEvent) (*pb.JobEvent, error)
	ApplyLocal(ctx context.Context, cmd *pb.Command) (*pb.Result, error)
	ReadIndex(ctx context.Context) (uint64, error)
	LeaseOwner(ctx context.Context, id int64) (string, error)
	Stats() raftstore.Status
	FSM() *fsm.FSM
	IsLeader() bool
	ReadIndexLocal(ctx context.Context) (uint64, error)
	LeaseKeepAliveLocal(ctx context.Context, id int64) (int64, error)
	LeaseTimeToLiveLocal(ctx context.Context, id int64) (int64, error)
}

var _ Store = (*raftstore.Store)(nil)

// Service implements the client-facing KV, Lease and Watch services and the
// node-to-node Internal service on top of a Store. Register it with Register.
type Service struct {
	pb.UnimplementedKVServer
	pb.UnimplementedLeaseServer
	pb.UnimplementedWatchServer

	store Store
}

// internal is the node-to-node Internal service: leader-only, never
// forwarding again (a call that reaches a node that is no longer the leader
// answers Unavailable "not leader" and the caller retries).
type internal struct {
	pb.UnimplementedInternalServer
	s *Service
}

// New returns a Service over s.
func New(s Store) *Service { return &Service{store: s} }

// Register registers the KV, Lease, Watch and Internal services on g.
func (s *Service) Register(g *grpc.Server) {
	pb.RegisterKVServer(g, s)
	pb.RegisterLeaseServer(g, s)
	pb.RegisterWatchServer(g, s)
	pb.RegisterInternalServer(g, &internal{s: s})
}

// ToStatus maps an error of raftps' lower layers to a gRPC status error:
// rpctypes.ToStatus, the one table at the boundary (etcd's togRPCError).
func ToStatus(err error) error { return rpctypes.ToStatus(err) }

func (s *Service) header(rev int64) *pb.ResponseHeader {
	st := s.store.Stats()
	if rev == 0 {
		rev = st.Revision
	}
	return &pb.ResponseHeader{Revision: rev, RaftTerm: st.Term, MemberId: st.ID}
}

// Range reads keys; linearizable unless req.Serializable.
func (s *Service) Range(ctx context.Context, req *pb.RangeRequest) (*pb.RangeResponse, error) {
	resp, err := s.store.Range(ctx, req)
	if err != nil {
		return nil, ToStatus(err)
	}
	resp.Header = s.header(resp.GetHeader().GetRevision())
	return resp, nil
}

// Put writes one key through Raft.
func (s *Service) Put(ctx context.Context, req *pb.PutRequest) (*pb.PutResponse, error) {
	ctx, err := rpctypes.IncomingRequestID(ctx)
	if err != nil {
		return nil, ToStatus(err)
	}
	out, err := s.store.Put(ctx, req)
	if err != nil {
		return nil, ToStatus(err)
	}
	out.Header = s.header(out.GetHeader().GetRevision())
	return out, nil
}

// DeleteRange deletes a key or range through Raft.
func (s *Service) DeleteRange(ctx context.Context, req *pb.DeleteRangeRequest) (*pb.DeleteRangeResponse, error) {
	ctx, err := rpctypes.IncomingRequestID(ctx)
	if err != nil {
		return nil, ToStatus(err)
	}
	out, err := s.store.DeleteRange(ctx, req)
	if err != nil {
		return nil, ToStatus(err)
	}
	out.Header = s.header(out.GetHeader().GetRevision())
	return out, nil
}

// Txn runs a transaction through Raft; one without puts and deletes is a
// linearizable read served without the log (raftstore.Store.Txn, which
// also caps its ops and response size).
func (s *Service) Txn(ctx context.Context, req *pb.TxnRequest) (*pb.TxnResponse, error) {
	ctx, err := rpctypes.IncomingRequestID(ctx)
	if err != nil {
		return nil, ToStatus(err)
	}
	out, err := s.store.Txn(ctx, req)
	if err != nil {
		return nil, ToStatus(err)
	}
	out.Header = s.header(out.GetHeader().GetRevision())
	return out, nil
}

// LeaseGrant creates a lease through Raft, owned by the caller's
// certificate (security.LeaseOwner; a client's owner is overwritten) and
// within its role's lease count (security.LeaseOwnerLimit).
func (s *Service) LeaseGrant(ctx context.Context, req *pb.LeaseGrantRequest) (*pb.LeaseGrantResponse, error) {
	ctx, err := rpctypes.IncomingRequestID(ctx)
	if err != nil {
		return nil, ToStatus(err)
	}
	req = proto.CloneOf(req)
	req.Owner, req.OwnerLimit, req.RandomId = security.LeaseOwner(ctx), security.LeaseOwnerLimit(ctx), false
	out, err := s.store.LeaseGrant(ctx, req)
	if err != nil {
		return nil, ToStatus(err)
	}
	out.Header = s.header(out.GetHeader().GetRevision())
	return out, nil
}

// checkLease is security.CheckLease over the store's lease owners.
func (s *Service) checkLease(ctx context.Context, id int64, read bool) error {
	err := security.CheckLease(ctx, id, read, func() (string, error) { return s.store.LeaseOwner(ctx, id) })
	return ToStatus(err)
}

// LeaseRevoke revokes a lease and deletes its keys through Raft (the
// caller must own it: checkLease).
func (s *Service) LeaseRevoke(ctx context.Context, req *pb.LeaseRevokeRequest) (*pb.LeaseRevokeResponse, error) {
	ctx, err := rpctypes.IncomingRequestID(ctx)
	if err != nil {
		return nil, ToStatus(err)
	}
	if err := s.checkLease(ctx, req.Id, false); err != nil {
		return nil, err
	}
	out, err := s.store.LeaseRevoke(ctx, req)
	if err != nil {
		return nil, ToStatus(err)
	}
	out.Header = s.header(out.GetHeader().GetRevision())
	return out, nil
}

// LeaseKeepAlive renews leases for as long as the client streams requests.
// Each keepalive goes to the leader (forwarded when this node follows);
// each is checked against the lease's owner (checkLease).
func (s *Service) LeaseKeepAlive(stream pb.Lease_LeaseKeepAliveServer) error {
	for {
		req, err := stream.Recv()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return err
		}
		if err := s.checkLease(stream.Context(), req.Id, false); err != nil {
			return err
		}
		ttl, err := s.store.LeaseKeepAlive(stream.Context(), req.Id)
		if err != nil {
			return ToStatus(err)
		}
		if err := stream.Send(&pb.LeaseKeepAliveResponse{Header: s.header(0), Id: req.Id, Ttl: ttl}); err != nil {
			return err
		}
	}
}

// LeaseTimeToLive reports a lease's remaining time (leader's timer) and keys.
func (s *Service) LeaseTimeToLive(ctx context.Context, req *pb.LeaseTimeToLiveRequest) (*pb.LeaseTimeToLiveResponse, error) {
	if err := s.checkLease(ctx, req.Id, true); err != nil {
		return nil, err
	}
	ttl, err := s.store.LeaseTimeToLive(ctx, req.Id)
	if err != nil {
		return nil, ToStatus(err)
	}
	out := &pb.LeaseTimeToLiveResponse{Header: s.header(0), Id: req.Id, Ttl: ttl}
	if info, ok := s.store.FSM().Lease(req.Id); ok {
		out.GrantedTtl = info.TTL
		if req.Keys {
			out.Keys = info.Keys
		}
	}
	return out, nil
}

// Watch streams the events of a key or range from a start revision.
func (s *Service) Watch(req *pb.WatchRequest, stream pb.Watch_WatchServer) error {
	if len(req.Key) == 0 {
		return ToStatus(fmt.Errorf("%w: watch: key is empty", fsm.ErrInvalid))
	}
	ch, err := s.store.Watch(stream.Context(), req)
	if err != nil {
		if errors.Is(err, fsm.ErrCompacted) {
			_ = stream.Send(&pb.WatchResponse{Header: s.header(0), Canceled: true,
				CompactRevision: s.store.FSM().CompactRevision(), CancelReason: err.Error()})
		}
		return ToStatus(err)
	}
	for resp := range ch {
		if resp.Header == nil {
			resp.Header = s.header(0)
		}
		if err := stream.Send(resp); err != nil {
			return err
		}
		if resp.Canceled {
			// The store cancels a watch whose events were compacted
			// away: OutOfRange, with the store's reason as the message.
			return ToStatus(fmt.Errorf("%w: %s", fsm.ErrCompacted, strings.TrimPrefix(resp.CancelReason, fsm.ErrCompacted.Error()+": ")))
		}
	}
	return stream.Context().Err()
}

// ForwardApply applies a command forwarded by a follower. It runs only on
// the leader; a node that lost leadership meanwhile answers Unavailable.
func (in *internal) ForwardApply(ctx context.Context, req *pb.ForwardApplyRequest) (*pb.ForwardApplyResponse, error) {
	cmd := &pb.Command{}
	if err := proto.Unmarshal(req.Command, cmd); err != nil {
		return nil, ToStatus(fmt.Errorf("%w: forward: %v", fsm.ErrMalformed, err))
	}
	res, err := in.s.store.ApplyLocal(ctx, cmd)
	if err != nil {
		return nil, ToStatus(err)
	}
	b, err := proto.Marshal(res)
	if err != nil {
		return nil, status.Error(codes.Internal, err.Error())
	}
	return &pb.ForwardApplyResponse{Result: b}, nil
}

// ForwardApplyBatch applies the commands a follower forwarded in one call,
// each as ForwardApply would (concurrently, so the leader's batcher
// coalesces them), and returns each one's result or status in order.
func (in *internal) ForwardApplyBatch(ctx context.Context, req *pb.ForwardApplyBatchRequest) (*pb.ForwardApplyBatchResponse, error) {
	out, err := in.applyBatch(ctx, req.Commands)
	if err != nil {
		return nil, err
	}
	return &pb.ForwardApplyBatchResponse{Outcomes: out}, nil
}

// applyBatch applies cmds as ForwardApplyBatch does (a lone command in
// this goroutine) and returns their outcomes in order.
func (in *internal) applyBatch(ctx context.Context, cmds [][]byte) ([]*pb.ForwardOutcome, error) {
	if len(cmds) > maxForwardBatch {
		return nil, ToStatus(fmt.Errorf("%w: forward: %d commands in one batch (max %d)", fsm.ErrInvalid, len(cmds), maxForwardBatch))
	}
	out := make([]*pb.ForwardOutcome, len(cmds))
	if len(cmds) == 1 {
		out[0] = outcome(in.ForwardApply(ctx, &pb.ForwardApplyRequest{Command: cmds[0]}))
		return out, nil
	}
	var wg sync.WaitGroup
	for i, raw := range cmds {
		wg.Add(1)
		go func() {
			defer wg.Done()
			out[i] = outcome(in.ForwardApply(ctx, &pb.ForwardApplyRequest{Command: raw}))
		}()
	}
	wg.Wait()
	return out, nil
}

// ForwardStream applies each batch a follower sends on its stream as
// ForwardApplyBatch would, concurrently and under forwardTimeout each, and
// answers each by id as it finishes. A batch refused whole (too many
// commands) is answered with that status as every command's outcome.
func (in *internal) ForwardStream(stream pb.Internal_ForwardStreamServer) error {
	var mu sync.Mutex // serializes Send
	var wg sync.WaitGroup
	defer wg.Wait() // no Send after the handler returns
	for {
		req, err := stream.Recv()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return err
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx, cancel := context.WithTimeout(stream.Context(), forwardTimeout)
			out, err := in.applyBatch(ctx, req.Commands)
			cancel()
			if err != nil {
				out = make([]*pb.ForwardOutcome, len(req.Commands))
				for i := range out {
					out[i] = outcome(nil, err)
				}
			}
			mu.Lock()
			defer mu.Unlock()
			// A failed Send means the stream is gone: the follower fails
			// the batches it still waits for.
			_ = stream.Send(&pb.ForwardStreamResponse{Id: req.Id, Outcomes: out})
		}()
	}
}

// outcome encodes a ForwardApply answer as a ForwardOutcome.
func outcome(resp *pb.ForwardApplyResponse, err error) *pb.ForwardOutcome {
	if err == nil {
		return &pb.ForwardOutcome{Result: resp.Result}
	}
	b, merr := proto.Marshal(status.Convert(err).Proto())
	if merr != nil {
		b, _ = proto.Marshal(status.New(codes.Internal, merr.Error()).Proto())
	}
	return &pb.ForwardOutcome{Status: b}
}

// ReadIndex returns the leader's read index for a follower's linearizable read.
func (in *internal) ReadIndex(ctx context.Context, _ *pb.ReadIndexRequest) (*pb.ReadIndexResponse, error) {
	idx, err := in.s.store.ReadIndexLocal(ctx)
	if err != nil {
		return nil, ToStatus(err)
	}
	return &pb.ReadIndexResponse{Index: idx}, nil
}

// LeaseKeepAliveOnce renews a lease on the leader for a follower.
func (in *internal) LeaseKeepAliveOnce(ctx context.Context, req *pb.LeaseKeepAliveRequest) (*pb.LeaseKeepAliveResponse, error) {
	ttl, err := in.s.store.LeaseKeepAliveLocal(ctx, req.Id)
	if err != nil {
		return nil, ToStatus(err)
	}
	return &pb.LeaseKeepAliveResponse{Id: req.Id, Ttl: ttl}, nil
}

// LeaseTimeToLive reports a lease's remaining time from the leader's timer.
func (in *internal) LeaseTimeToLive(ctx context.Context, req *pb.LeaseTimeToLiveRequest) (*pb.LeaseTimeToLiveResponse, error) {
	ttl, err := in.s.store.LeaseTimeToLiveLocal(ctx, req.Id)
	if err != nil {
		return nil, ToStatus(err)
	}
	return &pb.LeaseTimeToLiveResponse{Id: req.Id, Ttl: ttl}, nil
}

// forwardTimeout bounds one forwarded call when the caller set no deadline.
const forwardTimeout = 10 * time.Second

func withDefaultTimeout(ctx context.Context) (context.Context, context.CancelFunc) {
	if _, ok := ctx.Deadline(); ok {
		return context.WithCancel(ctx)
	}
	return context.WithTimeout(ctx, forwardTimeout)
}

var errNoAddr = fmt.Errorf("%w: leader's gRPC address unknown", raftstore.ErrNoLeader)
