package checkpoint

import (
	"bytes"
	"context"
	"sort"
	"sync"

	"google.golang.org/protobuf/proto"

	pb "github.com/raftps/raftps/api/raftpspb"
)

// fakeMeta is an in-memory etcd-semantics KV: global revision, per-key
// create/mod revision and version, Range by key or [key, range_end), Txn
// with compares on VERSION/CREATE/MOD/VALUE (a missing key compares as
// zero revisions / empty value, as in etcd).
type fakeMeta struct {
	mu  sync.Mutex
	rev int64
	kvs map[string]*pb.KeyValue
	// failTxn / failRange, if set, are returned by every Txn / Range.
	failTxn, failRange error
}

var _ Meta = (*fakeMeta)(nil)

func newFakeMeta() *fakeMeta { return &fakeMeta{kvs: map[string]*pb.KeyValue{}} }

func (f *fakeMeta) put(key string, val []byte) int64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.rev++
	f.putLocked(key, val)
	return f.rev
}

func (f *fakeMeta) del(key string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, ok := f.kvs[key]; ok {
		f.rev++
		delete(f.kvs, key)
	}
}

func (f *fakeMeta) putLocked(key string, val []byte) {
	kv, ok := f.kvs[key]
	if !ok {
		kv = &pb.KeyValue{Key: []byte(key), CreateRevision: f.rev}
		f.kvs[key] = kv
	}
	kv.ModRevision = f.rev
	kv.Version++
	kv.Value = bytes.Clone(val)
}

func (f *fakeMeta) rangeLocked(r *pb.RangeRequest) *pb.RangeResponse {
	resp := &pb.RangeResponse{Header: &pb.ResponseHeader{Revision: f.rev}}
	if len(r.GetRangeEnd()) == 0 {
		if kv, ok := f.kvs[string(r.GetKey())]; ok {
			resp.Kvs = append(resp.Kvs, proto.Clone(kv).(*pb.KeyValue))
		}
	} else {
		var keys []string
		for k := range f.kvs {
			if k >= string(r.GetKey()) && (string(r.GetRangeEnd()) == "\x00" || k < string(r.GetRangeEnd())) {
				keys = append(keys, k)
			}
		}
		sort.Strings(keys)
		for _, k := range keys {
			resp.Kvs = append(resp.Kvs, proto.Clone(f.kvs[k]).(*pb.KeyValue))
		}
	}
	resp.Count = int64(len(resp.Kvs))
	return resp
}

func (f *fakeMeta) Range(_ context.Context, r *pb.RangeRequest) (*pb.RangeResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.failRange != nil {
		return nil, f.failRange
	}
	return f.rangeLocked(r), nil
}

func cmpInt(a, b int64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

func (f *fakeMeta) compare(c *pb.Compare) bool {
	kv := f.kvs[string(c.GetKey())]
	if kv == nil {
		kv = &pb.KeyValue{}
	}
	var r int
	switch c.GetTarget() {
	case pb.Compare_VERSION:
		r = cmpInt(kv.GetVersion(), c.GetVersion())
	case pb.Compare_CREATE:
		r = cmpInt(kv.GetCreateRevision(), c.GetCreateRevision())
	case pb.Compare_MOD:
		r = cmpInt(kv.GetModRevision(), c.GetModRevision())
	case pb.Compare_VALUE:
		if f.kvs[string(c.GetKey())] == nil {
			return false // etcd: a value compare on a missing key fails
		}
		r = bytes.Compare(kv.GetValue(), c.GetValue())
	case pb.Compare_LEASE:
		r = cmpInt(kv.GetLease(), c.GetLease())
	}
	switch c.GetResult() {
	case pb.Compare_EQUAL:
		return r == 0
	case pb.Compare_NOT_EQUAL:
		return r != 0
	case pb.Compare_GREATER:
		return r > 0
	case pb.Compare_LESS:
		return r < 0
	}
	return false
}

func (f *fakeMeta) Txn(_ context.Context, t *pb.TxnRequest) (*pb.TxnResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.failTxn != nil {
		return nil, f.failTxn
	}
	ok := true
	for _, c := range t.GetCompare() {
		if !f.compare(c) {
			ok = false
			break
		}
	}
	ops := t.GetSuccess()
	if !ok {
		ops = t.GetFailure()
	}
	resp := &pb.TxnResponse{Succeeded: ok}
	wrote := false
	for _, op := range ops {
		switch r := op.GetRequest().(type) {
		case *pb.RequestOp_RequestRange:
			resp.Responses = append(resp.Responses, &pb.ResponseOp{Response: &pb.ResponseOp_ResponseRange{ResponseRange: f.rangeLocked(r.RequestRange)}})
		case *pb.RequestOp_RequestPut:
			if !wrote {
				f.rev++
				wrote = true
			}
			f.putLocked(string(r.RequestPut.GetKey()), r.RequestPut.GetValue())
			resp.Responses = append(resp.Responses, &pb.ResponseOp{Response: &pb.ResponseOp_ResponsePut{ResponsePut: &pb.PutResponse{}}})
		case *pb.RequestOp_RequestDeleteRange:
			if !wrote {
				f.rev++
				wrote = true
			}
			delete(f.kvs, string(r.RequestDeleteRange.GetKey()))
			resp.Responses = append(resp.Responses, &pb.ResponseOp{Response: &pb.ResponseOp_ResponseDeleteRange{ResponseDeleteRange: &pb.DeleteRangeResponse{}}})
		}
	}
	resp.Header = &pb.ResponseHeader{Revision: f.rev}
	return resp, nil
}
