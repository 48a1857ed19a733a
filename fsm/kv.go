package fsm

import (
	"bytes"
	"fmt"
	"slices"
	"sort"

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
// ErrInvalid, a negative limit or revision ErrInvalid. Count is the number
// of keys in the range regardless of limit; More is set when limit cut the
// result. A non-zero req.Revision reads the range as it was at that
// revision (etcd's MVCC read), rebuilt from the watch history: a revision
// below the compact revision is ErrCompacted, one above the store's
// ErrFutureRevision.
func (f *FSM) Range(req *pb.RangeRequest) (*pb.RangeResponse, error) {
	if err := validateRange(req); err != nil {
		return nil, err
	}
	f.mu.RLock()
	defer f.mu.RUnlock()
	var resp *pb.RangeResponse
	if rev := req.GetRevision(); rev != 0 && rev != f.rev {
		var err error
		if resp, err = f.rangeAtLocked(req); err != nil {
			return nil, err
		}
	} else {
		resp = f.rangeLocked(req)
	}
	resp.Header = &pb.ResponseHeader{Revision: f.rev}
	return resp, nil
}

// rangeAtLocked is Range at req.Revision (not the current revision): the
// keys of the range now, less those an event after req.Revision touched,
// plus the value each of those had before its first such event (its
// prev_kv; none if that event created it).
func (f *FSM) rangeAtLocked(req *pb.RangeRequest) (*pb.RangeResponse, error) {
	rev := req.GetRevision()
	switch {
	case rev > f.rev:
		return nil, fmt.Errorf("%w: range at revision %d, store at %d", ErrFutureRevision, rev, f.rev)
	case rev < f.compactRev:
		return nil, fmt.Errorf("%w: range at revision %d, compacted to %d", ErrCompacted, rev, f.compactRev)
	}
	r := parseRange(req.GetKey(), req.GetRangeEnd())
	touched := map[string]bool{}
	var kvs []*pb.KeyValue
	for i := sort.Search(len(f.hist), func(i int) bool { return f.hist[i].rev > rev }); i < len(f.hist); i++ {
		for _, ev := range f.hist[i].events {
			if k := string(ev.Kv.Key); r.contains(ev.Kv.Key) && !touched[k] {
				touched[k] = true
				if ev.PrevKv != nil {
					kvs = append(kvs, ev.PrevKv)
				}
			}
		}
	}
	f.ascend(r, func(kv *pb.KeyValue) bool {
		if !touched[string(kv.Key)] {
			kvs = append(kvs, kv)
		}
		return true
	})
	slices.SortFunc(kvs, func(a, b *pb.KeyValue) int { return bytes.Compare(a.Key, b.Key) })
	resp := &pb.RangeResponse{Count: int64(len(kvs))}
	if req.GetCountOnly() {
		return resp, nil
	}
	if limit := req.GetLimit(); limit > 0 && int64(len(kvs)) > limit {
		kvs, resp.More = kvs[:limit], true
	}
	for _, kv := range kvs {
		resp.Kvs = append(resp.Kvs, copyKV(kv, !req.GetKeysOnly()))
	}
	return resp, nil
}

func validateRange(req *pb.RangeRequest) error {
	if len(req.GetKey()) == 0 {
		return fmt.Errorf("%w: range: empty key", ErrInvalid)
	}
	if req.GetLimit() < 0 {
		return fmt.Errorf("%w: range: negative limit %d", ErrInvalid, req.GetLimit())
	}
	if req.GetRevision() < 0 {
		return fmt.Errorf("%w: range: negative revision %d", ErrInvalid, req.GetRevision())
	}
	return nil
}

// validateTxnRange is validateRange for a range inside a txn, which reads
// the current revision only (etcd refuses a revision there too).
func validateTxnRange(req *pb.RangeRequest) error {
	if req.GetRevision() != 0 {
		return fmt.Errorf("%w: range at revision %d inside a txn: a txn reads the current revision; read older ones with a plain range", ErrInvalid, req.GetRevision())
	}
	return validateRange(req)
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
	f.account(kv, 1)
	if had {
		f.account(prev, -1)
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
	w.f.account(kv, -1)
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
	if err := f.checkQuota([]*pb.PutRequest{req}); err != nil {
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
//
// Bounded work on every replica, also for entries written by older
// binaries (which proposed read-only txns and any number of ops): a txn
// whose range results could exceed MaxTxnResponseBytes is refused
// (ErrTooLarge) before anything is built or changed (txnResponseBound).
// The store no longer proposes read-only txns (it serves them with
// TxnRead), but an old entry of one still applies, within the same bound.
func (f *FSM) applyTxn(_ *applyCtx, req *pb.TxnRequest) (*pb.TxnResponse, error) {
	ok, ops, err := f.txnBranch(req)
	if err != nil {
		return nil, err
	}
	for i, op := range ops {
		var err error
		switch r := op.GetRequest().(type) {
		case *pb.RequestOp_RequestRange:
			err = validateTxnRange(r.RequestRange)
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
	if err := f.checkQuota(putsOf(ops)); err != nil {
		return nil, err
	}
	if err := f.txnResponseBound(ops); err != nil {
		return nil, err
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

// txnBranch validates req's compares, evaluates them against the current
// state and returns the outcome and the branch it chose.
func (f *FSM) txnBranch(req *pb.TxnRequest) (bool, []*pb.RequestOp, error) {
	for i, c := range req.Compare {
		if err := validateCompare(c); err != nil {
			return false, nil, fmt.Errorf("txn compare %d: %w", i, err)
		}
	}
	for _, c := range req.Compare {
		if !f.compare(c) {
			return false, req.Failure, nil
		}
	}
	return true, req.Success, nil
}

// TxnReadOnly reports whether req has no put and no delete in either
// branch: then it changes nothing whatever its compares answer, and is a
// read (etcd's isTxnReadonly).
func TxnReadOnly(req *pb.TxnRequest) bool {
	for _, ops := range [][]*pb.RequestOp{req.GetSuccess(), req.GetFailure()} {
		for _, op := range ops {
			if op.GetRequestRange() == nil {
				return false
			}
		}
	}
	return true
}

// TxnRead answers a read-only txn (TxnReadOnly) from the local state, as
// one consistent view: the compares, then the ranges of the chosen
// branch, at Header.Revision (the caller provides linearizability, as for
// Range). Errors: ErrInvalid if req writes or is malformed, ErrTooLarge if
// the ranges' results exceed MaxTxnResponseBytes (nothing is built past
// the cap).
func (f *FSM) TxnRead(req *pb.TxnRequest) (*pb.TxnResponse, error) {
	if !TxnReadOnly(req) {
		return nil, fmt.Errorf("%w: txn read: the txn writes", ErrInvalid)
	}
	f.mu.RLock()
	defer f.mu.RUnlock()
	ok, ops, err := f.txnBranch(req)
	if err != nil {
		return nil, err
	}
	for i, op := range ops {
		if err := validateTxnRange(op.GetRequestRange()); err != nil {
			return nil, fmt.Errorf("txn op %d: %w", i, err)
		}
	}
	if err := f.txnResponseBound(ops); err != nil {
		return nil, err
	}
	h := &pb.ResponseHeader{Revision: f.rev}
	resp := &pb.TxnResponse{Header: h, Succeeded: ok, Responses: make([]*pb.ResponseOp, len(ops))}
	for i, op := range ops {
		rr := f.rangeLocked(op.GetRequestRange())
		rr.Header = &pb.ResponseHeader{Revision: f.rev}
		resp.Responses[i] = &pb.ResponseOp{Response: &pb.ResponseOp_ResponseRange{ResponseRange: rr}}
	}
	return resp, nil
}

// CheckTxn reports, against the current state, whether Apply would refuse
// req for its response size (txnResponseBound on both branches, which
// bounds whichever the compares choose). The store calls it before
// proposing, so such a txn never reaches the log; Apply checks again
// against the state it applies to.
func (f *FSM) CheckTxn(req *pb.TxnRequest) error {
	f.mu.RLock()
	defer f.mu.RUnlock()
	if err := f.txnResponseBound(req.GetSuccess()); err != nil {
		return err
	}
	return f.txnResponseBound(req.GetFailure())
}

// kvResponseSize is what one key/value adds to a range response, in
// bytes: its key and value and a fixed allowance for the revisions,
// version, lease and framing.
func kvResponseSize(key, value []byte, withValue bool) int64 {
	n := int64(len(key)) + 48
	if withValue {
		n += int64(len(value))
	}
	return n
}

// txnResponseBound refuses with ErrTooLarge a branch whose range results
// could exceed MaxTxnResponseBytes: each range is measured against the
// current state (stopping as soon as the total is over, so the work is
// bounded by the cap, not by the store), plus every put earlier in the
// branch whose key it covers. Deletes only shrink results. Deterministic:
// it reads only replicated state.
func (f *FSM) txnResponseBound(ops []*pb.RequestOp) error {
	var total int64
	over := func() error {
		return fmt.Errorf("%w: txn response of more than %d bytes (max %d): read the keys with Range and a limit, or in smaller txns",
			ErrTooLarge, total, MaxTxnResponseBytes)
	}
	for i, op := range ops {
		r := op.GetRequestRange()
		if r == nil || r.GetCountOnly() {
			continue
		}
		withValue := !r.GetKeysOnly()
		kr := parseRange(r.GetKey(), r.GetRangeEnd())
		var n int64
		f.ascend(kr, func(kv *pb.KeyValue) bool {
			if lim := r.GetLimit(); lim > 0 && n >= lim {
				return false
			}
			n++
			total += kvResponseSize(kv.Key, kv.Value, withValue)
			return total <= MaxTxnResponseBytes
		})
		for _, prev := range ops[:i] {
			if p := prev.GetRequestPut(); p != nil && kr.contains(p.GetKey()) {
				total += kvResponseSize(p.GetKey(), p.GetValue(), withValue)
			}
		}
		if total > MaxTxnResponseBytes {
			return over()
		}
	}
	return nil
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
