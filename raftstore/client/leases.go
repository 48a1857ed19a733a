package client

import (
	"context"
	"fmt"

	pb "github.com/raftps/raftps/api/raftpspb"
	"github.com/raftps/raftps/raftstore/client/concurrency"
)

// Leases is the client's Lease service in the shape concurrency.LeaseAPI
// asks for, so a concurrency.Session runs over a remote cluster:
//
//	s := concurrency.NewSession(c.Leases(), 10)
//
// Errors wrap raftps' sentinels (a gone lease: errs.ErrLeaseNotFound).
type Leases struct{ c pb.LeaseClient }

var _ concurrency.LeaseAPI = Leases{}

// Leases returns the adapter over c's Lease service.
func (c *Client) Leases() Leases { return Leases{c: c.Lease} }

// LeaseGrant grants a lease of req.Ttl seconds.
func (l Leases) LeaseGrant(ctx context.Context, req *pb.LeaseGrantRequest) (*pb.LeaseGrantResponse, error) {
	return l.c.LeaseGrant(ctx, req)
}

// LeaseKeepAlive renews lease id once (one request on a LeaseKeepAlive
// stream) and returns its TTL in seconds.
func (l Leases) LeaseKeepAlive(ctx context.Context, id int64) (int64, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel() // ends the stream
	st, err := l.c.LeaseKeepAlive(ctx)
	if err != nil {
		return 0, err
	}
	if err := st.Send(&pb.LeaseKeepAliveRequest{Id: id}); err != nil {
		// The server ended the stream; Recv has its status.
		if _, rerr := st.Recv(); rerr != nil {
			return 0, rerr
		}
		return 0, err
	}
	resp, err := st.Recv()
	if err != nil {
		return 0, err
	}
	if resp.Id != id {
		return 0, fmt.Errorf("client: keepalive of lease %d answered for lease %d", id, resp.Id)
	}
	_ = st.CloseSend()
	return resp.Ttl, nil
}

// LeaseRevoke revokes lease req.Id and deletes its keys.
func (l Leases) LeaseRevoke(ctx context.Context, req *pb.LeaseRevokeRequest) (*pb.LeaseRevokeResponse, error) {
	return l.c.LeaseRevoke(ctx, req)
}
