package agent

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/raftps/raftps/api/errs"
	pb "github.com/raftps/raftps/api/raftpspb"
)

// fakeMeta is an in-memory etcd-semantics metadata store for the agent:
// a global revision, per-key create/mod revisions, Range over [key,
// range_end), Txn with CREATE/MOD/VALUE compares, leases that delete their
// keys when they expire or are revoked, job events and a job list. Tests
// drive lease loss with expireLease and a partition with setUnreachable.
type fakeMeta struct {
	mu     sync.Mutex
	rev    int64
	kvs    map[string]*pb.KeyValue
	leases map[int64]bool
	nextID int64
	jobs   []*pb.JobStatus
	events []*pb.JobEvent
	// unreachable makes every lease call fail with Unavailable (a node cut
	// off from the leader: it cannot tell whether its lease still lives).
	unreachable bool
	keepalives  int
	jobsCalls   int // Jobs calls: one per reconciliation round
	// A Range whose key starts with slowPrefix signals slowEntered and
	// waits for slowGate to close (a restore stuck reading pointers).
	slowPrefix  string
	slowGate    chan struct{}
	slowEntered chan struct{}
}

// blockRanges makes Ranges under prefix block until the returned release
// is called; entered receives once per blocked Range.
func (f *fakeMeta) blockRanges(prefix string) (entered <-chan struct{}, release func()) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.slowPrefix, f.slowGate, f.slowEntered = prefix, make(chan struct{}), make(chan struct{}, 16)
	gate := f.slowGate
	var once sync.Once
	return f.slowEntered, func() { once.Do(func() { close(gate) }) }
}

func (f *fakeMeta) keepaliveCount() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.keepalives
}

var _ Meta = (*fakeMeta)(nil)

func newFakeMeta() *fakeMeta {
	return &fakeMeta{kvs: map[string]*pb.KeyValue{}, leases: map[int64]bool{}}
}

var errUnreachable = status.Error(codes.Unavailable, "fake: leader unreachable")

func (f *fakeMeta) setJobs(js ...*pb.JobStatus) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.jobs = js
}

func (f *fakeMeta) setUnreachable(v bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.unreachable = v
}

// expireLease ends lease id as its TTL running out would: its keys go.
func (f *fakeMeta) expireLease(id int64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.revokeLocked(id)
}

func (f *fakeMeta) revokeLocked(id int64) {
	if !f.leases[id] {
		return
	}
	delete(f.leases, id)
	f.rev++
	for k, kv := range f.kvs {
		if kv.GetLease() == id {
			delete(f.kvs, k)
		}
	}
}

func (f *fakeMeta) get(key string) *pb.KeyValue {
	f.mu.Lock()
	defer f.mu.Unlock()
	if kv, ok := f.kvs[key]; ok {
		return proto.Clone(kv).(*pb.KeyValue)
	}
	return nil
}

func (f *fakeMeta) put(key string, val []byte, lease int64) int64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.rev++
	f.putLocked(key, val, lease)
	return f.rev
}

func (f *fakeMeta) del(key string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.rev++
	delete(f.kvs, key)
}

func (f *fakeMeta) putLocked(key string, val []byte, lease int64) {
	kv, ok := f.kvs[key]
	if !ok {
		kv = &pb.KeyValue{Key: []byte(key), CreateRevision: f.rev}
		f.kvs[key] = kv
	}
	kv.ModRevision = f.rev
	kv.Version++
	kv.Value = bytes.Clone(val)
	kv.Lease = lease
}

func (f *fakeMeta) rangeLocked(r *pb.RangeRequest) *pb.RangeResponse {
	resp := &pb.RangeResponse{Header: &pb.ResponseHeader{Revision: f.rev}}
	var keys []string
	for k := range f.kvs {
		switch {
		case len(r.GetRangeEnd()) == 0:
			if k == string(r.GetKey()) {
				keys = append(keys, k)
			}
		case k >= string(r.GetKey()) && (string(r.GetRangeEnd()) == "\x00" || k < string(r.GetRangeEnd())):
			keys = append(keys, k)
		}
	}
	sort.Strings(keys)
	for _, k := range keys {
		kv := proto.Clone(f.kvs[k]).(*pb.KeyValue)
		if r.GetKeysOnly() {
			kv.Value = nil
		}
		resp.Kvs = append(resp.Kvs, kv)
	}
	resp.Count = int64(len(resp.Kvs))
	return resp
}

func (f *fakeMeta) Range(ctx context.Context, r *pb.RangeRequest) (*pb.RangeResponse, error) {
	f.mu.Lock()
	if f.slowPrefix != "" && strings.HasPrefix(string(r.GetKey()), f.slowPrefix) {
		gate, entered := f.slowGate, f.slowEntered
		f.mu.Unlock()
		select {
		case entered <- struct{}{}:
		default:
		}
		select {
		case <-gate:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		f.mu.Lock()
	}
	defer f.mu.Unlock()
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
			return false
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
			if l := r.RequestPut.GetLease(); l != 0 && !f.leases[l] {
				return nil, fmt.Errorf("fake txn: %w", errs.ErrLeaseNotFound)
			}
			if !wrote {
				f.rev++
				wrote = true
			}
			f.putLocked(string(r.RequestPut.GetKey()), r.RequestPut.GetValue(), r.RequestPut.GetLease())
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

func (f *fakeMeta) Put(_ context.Context, r *pb.PutRequest) (*pb.PutResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.rev++
	f.putLocked(string(r.GetKey()), r.GetValue(), r.GetLease())
	return &pb.PutResponse{Header: &pb.ResponseHeader{Revision: f.rev}}, nil
}

func (f *fakeMeta) DeleteRange(_ context.Context, r *pb.DeleteRangeRequest) (*pb.DeleteRangeResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.rev++
	delete(f.kvs, string(r.GetKey()))
	return &pb.DeleteRangeResponse{Header: &pb.ResponseHeader{Revision: f.rev}}, nil
}

func (f *fakeMeta) Watch(context.Context, *pb.WatchRequest) (<-chan *pb.WatchResponse, error) {
	return nil, errors.New("fake: no watch")
}

func (f *fakeMeta) LeaseGrant(_ context.Context, ttl int64) (int64, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.unreachable {
		return 0, errUnreachable
	}
	f.nextID++
	f.leases[f.nextID] = true
	return f.nextID, nil
}

func (f *fakeMeta) LeaseKeepAlive(_ context.Context, id int64) (int64, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.keepalives++
	if f.unreachable {
		return 0, errUnreachable
	}
	if !f.leases[id] {
		return 0, fmt.Errorf("keepalive %d: %w", id, errs.ErrLeaseNotFound)
	}
	return 1, nil
}

func (f *fakeMeta) LeaseRevoke(_ context.Context, id int64) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.unreachable {
		return errUnreachable
	}
	f.revokeLocked(id)
	return nil
}

func (f *fakeMeta) RecordJobEvent(_ context.Context, ev *pb.JobEvent) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.events = append(f.events, proto.Clone(ev).(*pb.JobEvent))
	return nil
}

func (f *fakeMeta) Jobs() []*pb.JobStatus {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.jobsCalls++
	return f.jobs
}

// rounds is the number of reconciliation rounds an agent started.
func (f *fakeMeta) rounds() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.jobsCalls
}

// deletePrefix deletes every key under prefix (a job delete).
func (f *fakeMeta) deletePrefix(prefix string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.rev++
	for k := range f.kvs {
		if strings.HasPrefix(k, prefix) {
			delete(f.kvs, k)
		}
	}
}
