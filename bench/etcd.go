package bench

import (
	"context"
	"fmt"
	"io"
	"sync/atomic"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/resolver"
	"google.golang.org/grpc/resolver/manual"
	"google.golang.org/protobuf/encoding/protowire"

	pb "github.com/raftps/raftps/api/raftpspb"
)

// etcdStore speaks etcd's v3 gRPC API (etcdserverpb) directly.
//
// It sends raftps' own request messages (the "etcd client" section drives
// both systems with etcd's Go client instead, etcdclient.go). raftps' KV
// and Lease messages were modelled on etcd's and have the same field numbers for
// everything sent here (PutRequest, RangeRequest without serializable,
// TxnRequest/Compare/RequestOp, LeaseGrant/KeepAlive/Revoke) and read here
// (RangeResponse.kvs with version, TxnResponse.succeeded, lease id and TTL),
// so they are sent on etcd's method names. The response headers differ
// and are not read. Status is decoded by hand (etcdStatus).
//
// Connections are like etcd's clientv3: round robin over the endpoints
// (etcd's followers forward proposals to the leader inside Raft). raftps'
// client balances the same way but sends writes to the leader
// (raftstore/client/route.go); the put rows also compare with etcd
// reached through its leader's endpoint alone.
type etcdStore struct{ conn *grpc.ClientConn }

var _ Store = (*etcdStore)(nil)

var etcdSchemeSeq atomic.Int64

// dialEtcd connects lazily to host:port endpoints with round robin.
func dialEtcd(endpoints []string) (*grpc.ClientConn, error) {
	r := manual.NewBuilderWithScheme(fmt.Sprintf("etcdbench%d", etcdSchemeSeq.Add(1)))
	var addrs []resolver.Address
	for _, e := range endpoints {
		addrs = append(addrs, resolver.Address{Addr: e})
	}
	r.InitialState(resolver.State{Addresses: addrs})
	return grpc.NewClient(r.Scheme()+":///etcd", grpc.WithResolvers(r),
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultServiceConfig(`{"loadBalancingConfig":[{"round_robin":{}}]}`))
}

func newEtcdStore(endpoints []string) (Store, error) {
	conn, err := dialEtcd(endpoints)
	if err != nil {
		return nil, fmt.Errorf("etcd %v: %w", endpoints, err)
	}
	return &etcdStore{conn}, nil
}

const (
	etcdPut       = "/etcdserverpb.KV/Put"
	etcdRange     = "/etcdserverpb.KV/Range"
	etcdTxn       = "/etcdserverpb.KV/Txn"
	etcdGrant     = "/etcdserverpb.Lease/LeaseGrant"
	etcdRevoke    = "/etcdserverpb.Lease/LeaseRevoke"
	etcdKeepAlive = "/etcdserverpb.Lease/LeaseKeepAlive"
	etcdStatusRPC = "/etcdserverpb.Maintenance/Status"
)

func (s *etcdStore) Put(ctx context.Context, key string, val []byte) error {
	return s.conn.Invoke(ctx, etcdPut, &pb.PutRequest{Key: []byte(key), Value: val}, new(pb.PutResponse))
}

func (s *etcdStore) Get(ctx context.Context, key string) error {
	return s.conn.Invoke(ctx, etcdRange, &pb.RangeRequest{Key: []byte(key)}, new(pb.RangeResponse))
}

func (s *etcdStore) Version(ctx context.Context, key string) (int64, error) {
	r := new(pb.RangeResponse)
	return rangeVersion(r, s.conn.Invoke(ctx, etcdRange, &pb.RangeRequest{Key: []byte(key)}, r))
}

func (s *etcdStore) CAS(ctx context.Context, key string, version int64, val []byte) (bool, error) {
	r := new(pb.TxnResponse)
	if err := s.conn.Invoke(ctx, etcdTxn, casTxn(key, version, val), r); err != nil {
		return false, err
	}
	return r.Succeeded, nil
}

var keepAliveDesc = &grpc.StreamDesc{StreamName: "LeaseKeepAlive", ServerStreams: true, ClientStreams: true}

func (s *etcdStore) LeaseGrantKeepAlive(ctx context.Context, ttl int64) (int64, error) {
	g := new(pb.LeaseGrantResponse)
	if err := s.conn.Invoke(ctx, etcdGrant, &pb.LeaseGrantRequest{Ttl: ttl}, g); err != nil {
		return 0, err
	}
	kctx, cancel := context.WithCancel(ctx)
	defer cancel()
	st, err := s.conn.NewStream(kctx, keepAliveDesc, etcdKeepAlive)
	if err != nil {
		return g.Id, err
	}
	if err := st.SendMsg(&pb.LeaseKeepAliveRequest{Id: g.Id}); err != nil {
		return g.Id, err
	}
	r := new(pb.LeaseKeepAliveResponse)
	err = st.RecvMsg(r)
	if err == io.EOF || (err == nil && r.Ttl <= 0) {
		return g.Id, errKeepAlive
	}
	if err != nil {
		return g.Id, err
	}
	_ = st.CloseSend()
	return g.Id, nil
}

func (s *etcdStore) Revoke(ctx context.Context, id int64) error {
	return s.conn.Invoke(ctx, etcdRevoke, &pb.LeaseRevokeRequest{Id: id}, new(pb.LeaseRevokeResponse))
}

func (s *etcdStore) Close() error { return s.conn.Close() }

// rawCodec passes []byte through (for the hand-decoded Status call).
type rawCodec struct{}

func (rawCodec) Marshal(v any) ([]byte, error) { return *(v.(*[]byte)), nil }
func (rawCodec) Unmarshal(data []byte, v any) error {
	*(v.(*[]byte)) = append((*(v.(*[]byte)))[:0], data...)
	return nil
}
func (rawCodec) Name() string { return "proto" }

// etcdStatus calls Maintenance.Status on one endpoint and returns the
// member's ID (header.member_id, field 2 of field 1) and its leader's
// (field 4) of etcdserverpb.StatusResponse.
func etcdStatus(ctx context.Context, endpoint string) (member, leader uint64, err error) {
	conn, err := dialEtcd([]string{endpoint})
	if err != nil {
		return 0, 0, err
	}
	defer conn.Close()
	in, out := []byte{}, []byte{}
	if err := conn.Invoke(ctx, etcdStatusRPC, &in, &out, grpc.ForceCodec(rawCodec{})); err != nil {
		return 0, 0, err
	}
	return decodeEtcdStatus(out)
}

// decodeEtcdStatus reads header.member_id and leader from a serialized
// etcdserverpb.StatusResponse.
func decodeEtcdStatus(b []byte) (member, leader uint64, err error) {
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return 0, 0, protowire.ParseError(n)
		}
		b = b[n:]
		switch {
		case num == 1 && typ == protowire.BytesType:
			h, n := protowire.ConsumeBytes(b)
			if n < 0 {
				return 0, 0, protowire.ParseError(n)
			}
			b = b[n:]
			for len(h) > 0 {
				hn, ht, k := protowire.ConsumeTag(h)
				if k < 0 {
					return 0, 0, protowire.ParseError(k)
				}
				h = h[k:]
				if hn == 2 && ht == protowire.VarintType {
					v, k := protowire.ConsumeVarint(h)
					if k < 0 {
						return 0, 0, protowire.ParseError(k)
					}
					member, h = v, h[k:]
					continue
				}
				k = protowire.ConsumeFieldValue(hn, ht, h)
				if k < 0 {
					return 0, 0, protowire.ParseError(k)
				}
				h = h[k:]
			}
		case num == 4 && typ == protowire.VarintType:
			v, n := protowire.ConsumeVarint(b)
			if n < 0 {
				return 0, 0, protowire.ParseError(n)
			}
			leader, b = v, b[n:]
		default:
			n := protowire.ConsumeFieldValue(num, typ, b)
			if n < 0 {
				return 0, 0, protowire.ParseError(n)
			}
			b = b[n:]
		}
	}
	return member, leader, nil
}
