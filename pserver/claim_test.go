package pserver

import (
	"bytes"
	"context"
	"sync"
	"testing"

	pb "github.com/raftps/raftps/api/raftpspb"
	"github.com/raftps/raftps/schema"
)

// fakeMeta is a tiny in-memory etcd: enough Txn (CREATE compares, put,
// range) and Range for ClaimSlot.
type fakeMeta struct {
	mu  sync.Mutex
	rev int64
	kvs map[string]*pb.KeyValue
}

var _ Meta = (*fakeMeta)(nil)

func newFakeMeta() *fakeMeta { return &fakeMeta{kvs: map[string]*pb.KeyValue{}} }

func (m *fakeMeta) compare(c *pb.Compare) bool {
	kv := m.kvs[string(c.Key)]
	var got, want int64
	switch c.Target {
	case pb.Compare_CREATE:
		if kv != nil {
			got = kv.CreateRevision
		}
		want = c.GetCreateRevision()
	case pb.Compare_MOD:
		if kv != nil {
			got = kv.ModRevision
		}
		want = c.GetModRevision()
	case pb.Compare_VALUE:
		return kv != nil && bytes.Equal(kv.Value, c.GetValue())
	}
	return got == want
}

func (m *fakeMeta) Txn(_ context.Context, req *pb.TxnRequest) (*pb.TxnResponse, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	ok := true
	for _, c := range req.Compare {
		ok = ok && m.compare(c)
	}
	ops := req.Success
	if !ok {
		ops = req.Failure
	}
	resp := &pb.TxnResponse{Succeeded: ok}
	wrote := false
	for _, op := range ops {
		switch r := op.Request.(type) {
		case *pb.RequestOp_RequestPut:
			if !wrote {
				m.rev++
				wrote = true
			}
			k := string(r.RequestPut.Key)
			kv := m.kvs[k]
			if kv == nil {
				kv = &pb.KeyValue{Key: r.RequestPut.Key, CreateRevision: m.rev}
				m.kvs[k] = kv
			}
			kv.ModRevision, kv.Value, kv.Lease = m.rev, r.RequestPut.Value, r.RequestPut.Lease
			kv.Version++
			resp.Responses = append(resp.Responses, &pb.ResponseOp{Response: &pb.ResponseOp_ResponsePut{ResponsePut: &pb.PutResponse{}}})
		case *pb.RequestOp_RequestRange:
			rr := &pb.RangeResponse{}
			if kv := m.kvs[string(r.RequestRange.Key)]; kv != nil {
				rr.Kvs = append(rr.Kvs, kv)
			}
			resp.Responses = append(resp.Responses, &pb.ResponseOp{Response: &pb.ResponseOp_ResponseRange{ResponseRange: rr}})
		}
	}
	resp.Header = &pb.ResponseHeader{Revision: m.rev}
	return resp, nil
}

func (m *fakeMeta) Range(_ context.Context, req *pb.RangeRequest) (*pb.RangeResponse, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	rr := &pb.RangeResponse{Header: &pb.ResponseHeader{Revision: m.rev}}
	if kv := m.kvs[string(req.Key)]; kv != nil {
		rr.Kvs = append(rr.Kvs, kv)
	}
	return rr, nil
}

func (m *fakeMeta) Watch(context.Context, *pb.WatchRequest) (<-chan *pb.WatchResponse, error) {
	return make(chan *pb.WatchResponse), nil
}
func (m *fakeMeta) LeaseGrant(_ context.Context, req *pb.LeaseGrantRequest) (*pb.LeaseGrantResponse, error) {
	return &pb.LeaseGrantResponse{Id: 1, Ttl: req.Ttl}, nil
}
func (m *fakeMeta) LeaseKeepAlive(_ context.Context, id int64) (int64, error) { return 10, nil }

func (m *fakeMeta) expire(key string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.rev++
	delete(m.kvs, key)
}

func TestClaimSlot(t *testing.T) {
	ctx := context.Background()
	m := newFakeMeta()
	m.rev = 41
	inc, ok, err := ClaimSlot(ctx, m, "job", 2, "n1", "10.0.0.1:7000", 100)
	if err != nil || !ok || inc != 42 {
		t.Fatalf("claim: inc %d ok %v err %v", inc, ok, err)
	}
	v, err := schema.ParseSlotRecord(m.kvs[schema.SlotKey("job", 2)].Value)
	if err != nil || v != (schema.SlotRecord{Node: "n1", Addr: "10.0.0.1:7000", Incarnation: 42}) {
		t.Fatalf("ps value %+v %v", v, err)
	}
	if _, ok, _ := ClaimSlot(ctx, m, "job", 2, "n2", "x:1", 200); ok {
		t.Fatal("second node claimed a held slot")
	}
	// The same node retrying under the same lease gets its incarnation back.
	if inc2, ok, err := ClaimSlot(ctx, m, "job", 2, "n1", "10.0.0.1:7000", 100); !ok || err != nil || inc2 != inc {
		t.Fatalf("retry: %d %v %v", inc2, ok, err)
	}
	// Fencing: after the lease expires and n2 claims, n1's fenced write fails.
	m.expire(schema.SlotKey("job", 2))
	inc3, ok, err := ClaimSlot(ctx, m, "job", 2, "n2", "x:1", 200)
	if !ok || err != nil || inc3 <= inc {
		t.Fatalf("reclaim: %d %v %v", inc3, ok, err)
	}
	put := &pb.RequestOp{Request: &pb.RequestOp_RequestPut{RequestPut: &pb.PutRequest{Key: []byte(schema.CheckpointKey("job", 2)), Value: []byte("x")}}}
	resp, _ := m.Txn(ctx, &pb.TxnRequest{Compare: []*pb.Compare{FenceCompare("job", 2, inc)}, Success: []*pb.RequestOp{put}})
	if resp.Succeeded {
		t.Fatal("write fenced by the old incarnation succeeded")
	}
	resp, _ = m.Txn(ctx, &pb.TxnRequest{Compare: []*pb.Compare{FenceCompare("job", 2, inc3)}, Success: []*pb.RequestOp{put}})
	if !resp.Succeeded {
		t.Fatal("write fenced by the current incarnation failed")
	}
}
