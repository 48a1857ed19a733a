package fsm

import (
	"bytes"
	"fmt"

	pb "github.com/raftps/raftps/api/raftpspb"
)

// keyRange is a parsed key/range_end pair with etcd's semantics: an empty end
// is the single key, "\x00" is every key >= key, anything else is [key, end).
type keyRange struct {
	key, end []byte
	single   bool
	toEnd    bool
}

func parseRange(key, end []byte) keyRange {
	switch {
	case len(end) == 0:
		return keyRange{key: key, single: true}
	case len(end) == 1 && end[0] == 0:
		return keyRange{key: key, toEnd: true}
	default:
		return keyRange{key: key, end: end}
	}
}

func (r keyRange) contains(k []byte) bool {
	switch {
	case r.single:
		return bytes.Equal(k, r.key)
	case r.toEnd:
		return bytes.Compare(k, r.key) >= 0
	default:
		return bytes.Compare(k, r.key) >= 0 && bytes.Compare(k, r.end) < 0
	}
}

// ascend calls fn for every stored key in r, in key order, until fn returns false.
func (f *FSM) ascend(r keyRange, fn func(*pb.KeyValue) bool) {
	switch {
	case r.single:
		if kv, ok := f.kvs.Get(&pb.KeyValue{Key: r.key}); ok {
			fn(kv)
		}
	case r.toEnd:
		f.kvs.AscendGreaterOrEqual(&pb.KeyValue{Key: r.key}, fn)
	default:
		if bytes.Compare(r.key, r.end) >= 0 {
			return
		}
		f.kvs.AscendRange(&pb.KeyValue{Key: r.key}, &pb.KeyValue{Key: r.end}, fn)
	}
}

func (f *FSM) get(key []byte) (*pb.KeyValue, bool) {
	return f.kvs.Get(&pb.KeyValue{Key: key})
}

// copyKV returns a fresh KeyValue sharing kv's byte slices (which are never
// mutated), so callers may change the message without touching the store.
func copyKV(kv *pb.KeyValue, withValue bool) *pb.KeyValue {
	if kv == nil {
		return nil
	}
	c := &pb.KeyValue{Key: kv.Key, CreateRevision: kv.CreateRevision, ModRevision: kv.ModRevision, Version: kv.Version, Lease: kv.Lease}
	if withValue {
		c.Value = kv.Value
	}
	return c
}

// Range reads keys from the local state (the caller provides
// linearizability). Header.Revision is the store revision. An empty key is
// ErrInvalid, a negative limit ErrInvalid. Count is the number of keys in the
// range regardless of limit; More is set when limit cut the result.
func (f *FSM) Range(req *pb.RangeRequest) (*pb.RangeResponse, error) {
	if err := validateRange(req); err != nil {
		return nil, err
	}
	f.mu.RLock()
	defer f.mu.RUnlock()
	resp := f.rangeLocked(req)
	resp.Header = &pb.ResponseHeader{Revision: f.rev}
	return resp, nil
}

func validateRange(req *pb.RangeRequest) error {
	if len(req.GetKey()) == 0 {
		return fmt.Errorf("%w: range: empty key", ErrInvalid)
	}
	if req.GetLimit() < 0 {
		return fmt.Errorf("%w: range: negative limit %d", ErrInvalid, req.GetLimit())
	}
	return nil
}

func (f *FSM) rangeLocked(req *pb.RangeRequest) *pb.RangeResponse {
	resp := &pb.RangeResponse{}
	limit := req.GetLimit()
	f.ascend(parseRange(req.GetKey(), req.GetRangeEnd()), func(kv *pb.KeyValue) bool {
		resp.Count++
		if req.GetCountOnly() {
			return true
		}
		if limit > 0 && int64(len(resp.Kvs)) >= limit {
			resp.More = true
			return true // keep counting
		}
		resp.Kvs = append(resp.Kvs, copyKV(kv, !req.GetKeysOnly()))
		return true
	})
	if req.GetCountOnly() {
		resp.More = false
	}
	return resp
}

func validatePut(f *FSM, req *pb.PutRequest) error {
	switch {
	case len(req.GetKey()) == 0:
		return fmt.Errorf("%w: put: empty key", ErrInvalid)
	case len(req.GetKey()) > MaxKeySize:
		return fmt.Errorf("%w: put: key of %d bytes (max %d)", ErrTooLarge, len(req.GetKey()), MaxKeySize)
	case len(req.GetValue()) > MaxValueSize:
		return fmt.Errorf("%w: put: value of %d bytes (max %d)", ErrTooLarge, len(req.GetValue()), MaxValueSize)
	}
	if id := req.GetLease(); id != 0 {
		if _, ok := f.leases[id]; !ok {
			return fmt.Errorf("%w: put: lease %d", ErrLeaseNotFound, id)
		}
	}
	return nil
}

func validateDelete(req *pb.DeleteRangeRequest) error {
	if len(req.GetKey()) == 0 {
		return fmt.Errorf("%w: delete range: empty key", ErrInvalid)
	}
	return nil
}

// writeTxn collects the writes of one command (one revision at most).
type writeTxn struct {
	f       *FSM
	rev     int64 // the revision the writes get
	events  []*pb.Event
	headers []*pb.ResponseHeader
}

func (f *FSM) begin() *writeTxn { return &writeTxn{f: f, rev: f.rev + 1} }

func (w *writeTxn) header() *pb.ResponseHeader {
	h := &pb.ResponseHeader{}
	w.headers = append(w.headers, h)
	return h
}

// end commits the revision if anything changed and fills the headers.
func (w *writeTxn) end() {
	f := w.f
	if len(w.events) > 0 {
		f.rev = w.rev
		f.record(w.rev, w.events)
	}
	for _, h := range w.headers {
		h.Revision = f.rev
	}
}

// put stores req (already validated).
func (w *writeTxn) put(req *pb.PutRequest) *pb.PutResponse {
	f := w.f
	resp := &pb.PutResponse{Header: w.header()}
	kv := &pb.KeyValue{
		Key:            req.Key, // req was decoded for this command alone: the store may keep its bytes
		Value:          req.Value,
		ModRevision:    w.rev,
		CreateRevision: w.rev,
		Version:        1,
		Lease:          req.Lease,
	}
	// One traversal: insert, then complete kv from the item it replaced (kv
	// is new and unshared, so finishing it in place is safe).
	prev, had := f.kvs.ReplaceOrInsert(kv)
	if had {
		kv.CreateRevision = prev.CreateRevision
		kv.Version = prev.Version + 1
		if req.PrevKv {
			resp.PrevKv = copyKV(prev, true)
		}
		if prev.Lease != kv.Lease {
			f.detach(prev.Lease, prev.Key)
		}
	} else {
		prev = nil
	}
	f.attach(kv.Lease, kv.Key)
	w.events = append(w.events, &pb.Event{Type: pb.Event_PUT, Kv: kv, PrevKv: prev})
	return resp
}

// deleteRange deletes the keys of req (already validated).
func (w *writeTxn) deleteRange(req *pb.DeleteRangeRequest) *pb.DeleteRangeResponse {
	resp := &pb.DeleteRangeResponse{Header: w.header()}
	var victims []*pb.KeyValue
	w.f.ascend(parseRange(req.Key, req.RangeEnd), func(kv *pb.KeyValue) bool {
		victims = append(victims, kv)
		return true
	})
	for _, kv := range victims {
		w.deleteKey(kv)
		if req.PrevKv {
			resp.PrevKvs = append(resp.PrevKvs, copyKV(kv, true))
		}
	}
	resp.Deleted = int64(len(victims))
	return resp
}

func (w *writeTxn) deleteKey(kv *pb.KeyValue) {
	w.f.kvs.Delete(kv)
	w.f.detach(kv.Lease, kv.Key)
	w.events = append(w.events, &pb.Event{
		Type:   pb.Event_DELETE,
		Kv:     &pb.KeyValue{Key: kv.Key, ModRevision: w.rev},
		PrevKv: kv,
	})
}

func (f *FSM) applyPut(_ *applyCtx, req *pb.PutRequest) (*pb.PutResponse, error) {
	if err := validatePut(f, req); err != nil {
		return nil, err
	}
	w := f.begin()
	resp := w.put(req)
	w.end()
	return resp, nil
}

func (f *FSM) applyDeleteRange(_ *applyCtx, req *pb.DeleteRangeRequest) (*pb.DeleteRangeResponse, error) {
	if err := validateDelete(req); err != nil {
		return nil, err
	}
	w := f.begin()
	resp := w.deleteRange(req)
	w.end()
	return resp, nil
}

// applyTxn evaluates the compares against the state before the txn, then
// applies the chosen branch as one revision. Every op of the branch is
// validated first, so an invalid op rejects the whole txn unchanged. Later
// ops see the writes of earlier ones.
func (f *FSM) applyTxn(_ *applyCtx, req *pb.TxnRequest) (*pb.TxnResponse, error) {
	for i, c := range req.Compare {
		if err := validateCompare(c); err != nil {
			return nil, fmt.Errorf("txn compare %d: %w", i, err)
		}
	}
	ok := true
	for _, c := range req.Compare {
		if !f.compare(c) {
			ok = false
			break
		}
	}
	ops := req.Success
	if !ok {
		ops = req.Failure
	}
	for i, op := range ops {
		var err error
		switch r := op.GetRequest().(type) {
		case *pb.RequestOp_RequestRange:
			err = validateRange(r.RequestRange)
		case *pb.RequestOp_RequestPut:
			err = validatePut(f, r.RequestPut)
		case *pb.RequestOp_RequestDeleteRange:
			err = validateDelete(r.RequestDeleteRange)
		default:
			err = fmt.Errorf("%w: empty request op", ErrInvalid)
		}
		if err != nil {
			return nil, fmt.Errorf("txn op %d: %w", i, err)
		}
	}
	w := f.begin()
	resp := &pb.TxnResponse{Header: w.header(), Succeeded: ok, Responses: make([]*pb.ResponseOp, len(ops))}
	for i, op := range ops {
		switch r := op.GetRequest().(type) {
		case *pb.RequestOp_RequestRange:
			rr := f.rangeLocked(r.RequestRange)
			rr.Header = w.header()
			resp.Responses[i] = &pb.ResponseOp{Response: &pb.ResponseOp_ResponseRange{ResponseRange: rr}}
		case *pb.RequestOp_RequestPut:
			resp.Responses[i] = &pb.ResponseOp{Response: &pb.ResponseOp_ResponsePut{ResponsePut: w.put(r.RequestPut)}}
		case *pb.RequestOp_RequestDeleteRange:
			resp.Responses[i] = &pb.ResponseOp{Response: &pb.ResponseOp_ResponseDeleteRange{ResponseDeleteRange: w.deleteRange(r.RequestDeleteRange)}}
		}
	}
	w.end()
	return resp, nil
}

func validateCompare(c *pb.Compare) error {
	if len(c.GetKey()) == 0 {
		return fmt.Errorf("%w: empty key", ErrInvalid)
	}
	if _, ok := pb.Compare_CompareResult_name[int32(c.GetResult())]; !ok {
		return fmt.Errorf("%w: compare result %d", ErrInvalid, int32(c.GetResult()))
	}
	if _, ok := pb.Compare_CompareTarget_name[int32(c.GetTarget())]; !ok {
		return fmt.Errorf("%w: compare target %d", ErrInvalid, int32(c.GetTarget()))
	}
	return nil
}

// compare evaluates c with etcd's rules: a missing key has version, create
// and mod revision and lease 0, and fails every VALUE compare.
func (f *FSM) compare(c *pb.Compare) bool {
	kv, ok := f.get(c.Key)
	var cmp int
	switch c.Target {
	case pb.Compare_VALUE:
		if !ok {
			return false
		}
		cmp = bytes.Compare(kv.Value, c.GetValue())
	case pb.Compare_VERSION:
		cmp = cmpInt(kv.GetVersion(), c.GetVersion())
	case pb.Compare_CREATE:
		cmp = cmpInt(kv.GetCreateRevision(), c.GetCreateRevision())
	case pb.Compare_MOD:
		cmp = cmpInt(kv.GetModRevision(), c.GetModRevision())
	case pb.Compare_LEASE:
		cmp = cmpInt(kv.GetLease(), c.GetLease())
	default:
		return false
	}
	switch c.Result {
	case pb.Compare_EQUAL:
		return cmp == 0
	case pb.Compare_NOT_EQUAL:
		return cmp != 0
	case pb.Compare_GREATER:
		return cmp > 0
	case pb.Compare_LESS:
		return cmp < 0
	}
	return false
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
