package bench

import (
	"context"
	"errors"
	"io"

	"google.golang.org/grpc"

	pb "github.com/raftps/raftps/api/raftpspb"
	"github.com/raftps/raftps/raftstore/client"
)

// Store is the load generator's view of a metadata store: the operations
// measured on both raftps and etcd. Each call is one round trip (two for
// LeaseGrantKeepAlive) with the store's own client library.
type Store interface {
	// Put writes val (any length) at key.
	Put(ctx context.Context, key string, val []byte) error
	// Get is a linearizable read of key.
	Get(ctx context.Context, key string) error
	// Version returns key's version (number of puts since creation, 0 if absent).
	Version(ctx context.Context, key string) (int64, error)
	// CAS is one Txn: if key's version is version, put val; it reports
	// whether the compare held.
	CAS(ctx context.Context, key string, version int64, val []byte) (bool, error)
	// LeaseGrantKeepAlive grants a lease of ttl seconds and renews it once
	// on a keepalive stream; it returns the lease ID.
	LeaseGrantKeepAlive(ctx context.Context, ttl int64) (int64, error)
	// Revoke revokes lease id.
	Revoke(ctx context.Context, id int64) error
	Close() error
}

var errKeepAlive = errors.New("bench: keepalive returned no TTL")

// raftpsStore is Store over raftstore/client.
type raftpsStore struct{ c *client.Client }

var _ Store = (*raftpsStore)(nil)

func newRaftpsStore(endpoints []string, opts ...grpc.DialOption) (Store, error) {
	c, err := client.New(endpoints, opts...)
	if err != nil {
		return nil, err
	}
	return &raftpsStore{c}, nil
}

func (s *raftpsStore) Put(ctx context.Context, key string, val []byte) error {
	_, err := s.c.KV.Put(ctx, &pb.PutRequest{Key: []byte(key), Value: val})
	return err
}

func (s *raftpsStore) Get(ctx context.Context, key string) error {
	_, err := s.c.KV.Range(ctx, &pb.RangeRequest{Key: []byte(key)})
	return err
}

func (s *raftpsStore) Version(ctx context.Context, key string) (int64, error) {
	return rangeVersion(s.c.KV.Range(ctx, &pb.RangeRequest{Key: []byte(key)}))
}

func rangeVersion(r *pb.RangeResponse, err error) (int64, error) {
	if err != nil || len(r.Kvs) == 0 {
		return 0, err
	}
	return r.Kvs[0].Version, nil
}

// casTxn is the Txn of CAS: compare version, then put.
func casTxn(key string, version int64, val []byte) *pb.TxnRequest {
	return &pb.TxnRequest{
		Compare: []*pb.Compare{{Result: pb.Compare_EQUAL, Target: pb.Compare_VERSION, Key: []byte(key),
			TargetUnion: &pb.Compare_Version{Version: version}}},
		Success: []*pb.RequestOp{{Request: &pb.RequestOp_RequestPut{RequestPut: &pb.PutRequest{Key: []byte(key), Value: val}}}},
	}
}

func (s *raftpsStore) CAS(ctx context.Context, key string, version int64, val []byte) (bool, error) {
	r, err := s.c.KV.Txn(ctx, casTxn(key, version, val))
	if err != nil {
		return false, err
	}
	return r.Succeeded, nil
}

func (s *raftpsStore) LeaseGrantKeepAlive(ctx context.Context, ttl int64) (int64, error) {
	g, err := s.c.Lease.LeaseGrant(ctx, &pb.LeaseGrantRequest{Ttl: ttl})
	if err != nil {
		return 0, err
	}
	kctx, cancel := context.WithCancel(ctx)
	defer cancel()
	st, err := s.c.Lease.LeaseKeepAlive(kctx)
	if err != nil {
		return g.Id, err
	}
	if err := st.Send(&pb.LeaseKeepAliveRequest{Id: g.Id}); err != nil {
		return g.Id, err
	}
	r, err := st.Recv()
	if err == io.EOF || (err == nil && r.Ttl <= 0) {
		return g.Id, errKeepAlive
	}
	if err != nil {
		return g.Id, err
	}
	_ = st.CloseSend()
	return g.Id, nil
}

func (s *raftpsStore) Revoke(ctx context.Context, id int64) error {
	_, err := s.c.Lease.LeaseRevoke(ctx, &pb.LeaseRevokeRequest{Id: id})
	return err
}

func (s *raftpsStore) Close() error { return s.c.Close() }
