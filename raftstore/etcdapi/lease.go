package etcdapi

import (
	"context"
	"errors"
	"io"

	etcdpb "go.etcd.io/etcd/api/v3/etcdserverpb"

	pb "github.com/raftps/raftps/api/raftpspb"
	"github.com/raftps/raftps/fsm"
	"github.com/raftps/raftps/security"
)

type leaseServer struct {
	etcdpb.UnimplementedLeaseServer
	s *Server
}

// LeaseGrant creates a lease through Raft (TTL raised to raftps' minimum)
// owned by the caller's certificate (security.LeaseOwner).
func (l leaseServer) LeaseGrant(ctx context.Context, r *etcdpb.LeaseGrantRequest) (*etcdpb.LeaseGrantResponse, error) {
	out, err := l.s.store.LeaseGrant(ctx, &pb.LeaseGrantRequest{Ttl: r.TTL, Id: r.ID,
		Owner: security.LeaseOwner(ctx), OwnerLimit: security.LeaseOwnerLimit(ctx)})
	if err != nil {
		return nil, ToStatus(ctx, err)
	}
	return &etcdpb.LeaseGrantResponse{Header: l.s.header(out.GetHeader().GetRevision()), ID: out.Id, TTL: out.Ttl}, nil
}

// checkLease is security.CheckLease over the store's lease owners.
func (l leaseServer) checkLease(ctx context.Context, id int64, read bool) error {
	return security.CheckLease(ctx, id, read, func() (string, error) { return l.s.store.LeaseOwner(ctx, id) })
}

// LeaseRevoke revokes a lease and deletes its keys through Raft (the
// caller must own it: checkLease).
func (l leaseServer) LeaseRevoke(ctx context.Context, r *etcdpb.LeaseRevokeRequest) (*etcdpb.LeaseRevokeResponse, error) {
	if err := l.checkLease(ctx, r.ID, false); err != nil {
		return nil, ToStatus(ctx, err)
	}
	out, err := l.s.store.LeaseRevoke(ctx, &pb.LeaseRevokeRequest{Id: r.ID})
	if err != nil {
		return nil, ToStatus(ctx, err)
	}
	return &etcdpb.LeaseRevokeResponse{Header: l.s.header(out.GetHeader().GetRevision())}, nil
}

// LeaseKeepAlive renews leases on the leader for as long as the client
// streams requests. A lease that does not exist (or expired) answers
// TTL 0, as etcd does; etcd's client then reports it expired. Each
// keepalive is checked against the lease's owner (checkLease).
func (l leaseServer) LeaseKeepAlive(stream etcdpb.Lease_LeaseKeepAliveServer) error {
	ctx := stream.Context()
	for {
		req, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		err = l.checkLease(ctx, req.ID, false)
		var ttl int64
		if err == nil {
			ttl, err = l.s.store.LeaseKeepAlive(ctx, req.ID)
		}
		if errors.Is(err, fsm.ErrLeaseNotFound) {
			ttl, err = 0, nil
		}
		if err != nil {
			return ToStatus(ctx, err)
		}
		if err := stream.Send(&etcdpb.LeaseKeepAliveResponse{Header: l.s.header(0), ID: req.ID, TTL: ttl}); err != nil {
			return err
		}
	}
}

// LeaseTimeToLive reports a lease's remaining seconds (the leader's
// timer), granted TTL and, with r.Keys, its keys. A lease that does not
// exist answers TTL -1, as etcd does.
func (l leaseServer) LeaseTimeToLive(ctx context.Context, r *etcdpb.LeaseTimeToLiveRequest) (*etcdpb.LeaseTimeToLiveResponse, error) {
	// The keys come from this node's FSM: read linearizably, so a key
	// attached by a write this client saw is there on a follower too.
	if err := l.s.store.LinearizableRead(ctx); err != nil {
		return nil, ToStatus(ctx, err)
	}
	err := l.checkLease(ctx, r.ID, true)
	var ttl int64
	if err == nil {
		ttl, err = l.s.store.LeaseTimeToLive(ctx, r.ID)
	}
	if errors.Is(err, fsm.ErrLeaseNotFound) {
		return &etcdpb.LeaseTimeToLiveResponse{Header: l.s.header(0), ID: r.ID, TTL: -1}, nil
	}
	if err != nil {
		return nil, ToStatus(ctx, err)
	}
	out := &etcdpb.LeaseTimeToLiveResponse{Header: l.s.header(0), ID: r.ID, TTL: ttl}
	if info, ok := l.s.store.FSM().Lease(r.ID); ok {
		out.GrantedTTL = info.TTL
		if r.Keys {
			out.Keys = info.Keys
		}
	}
	return out, nil
}

// LeaseLeases lists the leases (a linearizable read).
func (l leaseServer) LeaseLeases(ctx context.Context, _ *etcdpb.LeaseLeasesRequest) (*etcdpb.LeaseLeasesResponse, error) {
	if err := l.s.store.LinearizableRead(ctx); err != nil {
		return nil, ToStatus(ctx, err)
	}
	out := &etcdpb.LeaseLeasesResponse{Header: l.s.header(0)}
	for _, info := range l.s.store.FSM().Leases() {
		out.Leases = append(out.Leases, &etcdpb.LeaseStatus{ID: info.ID})
	}
	return out, nil
}
