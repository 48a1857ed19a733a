package etcdapi

import (
	"bytes"
	"context"
	"fmt"
	"slices"

	etcdpb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"

	pb "github.com/raftps/raftps/api/raftpspb"
	"github.com/raftps/raftps/fsm"
)

type kvServer struct {
	etcdpb.UnimplementedKVServer
	s *Server
}

func unimplemented(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{errUnimplemented}, args...)...)
}

func toKV(kv *pb.KeyValue) *mvccpb.KeyValue {
	if kv == nil {
		return nil
	}
	return &mvccpb.KeyValue{Key: kv.Key, CreateRevision: kv.CreateRevision, ModRevision: kv.ModRevision,
		Version: kv.Version, Value: kv.Value, Lease: kv.Lease}
}

func toKVs(kvs []*pb.KeyValue) []*mvccpb.KeyValue {
	if len(kvs) == 0 {
		return nil
	}
	out := make([]*mvccpb.KeyValue, len(kvs))
	for i, kv := range kvs {
		out[i] = toKV(kv)
	}
	return out
}

// Range reads keys, at the current revision or at r.Revision.
func (k kvServer) Range(ctx context.Context, r *etcdpb.RangeRequest) (*etcdpb.RangeResponse, error) {
	resp, err := k.s.rangeKV(ctx, r)
	if err != nil {
		return nil, ToStatus(ctx, err)
	}
	return resp, nil
}

// postProcessed reports whether r needs the whole range read and then
// filtered, sorted and limited here (etcd does the same).
func postProcessed(r *etcdpb.RangeRequest) bool {
	return r.SortOrder != etcdpb.RangeRequest_NONE || r.SortTarget != etcdpb.RangeRequest_KEY ||
		r.MinModRevision != 0 || r.MaxModRevision != 0 || r.MinCreateRevision != 0 || r.MaxCreateRevision != 0
}

func checkRange(r *etcdpb.RangeRequest) error {
	if len(r.Key) == 0 {
		return errEmptyKey
	}
	if _, ok := etcdpb.RangeRequest_SortOrder_name[int32(r.SortOrder)]; !ok {
		return errInvalidSort
	}
	if _, ok := etcdpb.RangeRequest_SortTarget_name[int32(r.SortTarget)]; !ok {
		return errInvalidSort
	}
	return nil
}

// raftpsRange is the raftps request that reads what r needs: the whole
// range (no limit, no count_only) if the result is post-processed here.
func raftpsRange(r *etcdpb.RangeRequest, whole bool) *pb.RangeRequest {
	req := &pb.RangeRequest{Key: r.Key, RangeEnd: r.RangeEnd, Limit: r.Limit, Serializable: r.Serializable,
		KeysOnly: r.KeysOnly, CountOnly: r.CountOnly, Revision: max(r.Revision, 0)} // etcd: <= 0 is the current revision
	if whole {
		req.Limit, req.CountOnly = 0, false
	}
	return req
}

func (s *Server) rangeKV(ctx context.Context, r *etcdpb.RangeRequest) (*etcdpb.RangeResponse, error) {
	if err := checkRange(r); err != nil {
		return nil, err
	}
	whole := postProcessed(r)
	out, err := s.store.Range(ctx, raftpsRange(r, whole))
	if err != nil {
		return nil, err
	}
	// The FSM serves r.Revision (fsm.ErrFutureRevision, fsm.ErrCompacted).
	cur, kvs := out.GetHeader().GetRevision(), out.Kvs
	resp := &etcdpb.RangeResponse{Header: s.header(cur)}
	if !whole {
		resp.Kvs, resp.More, resp.Count = toKVs(kvs), out.More, out.Count
		return resp, nil
	}
	finishRange(r, kvs, resp)
	return resp, nil
}

// finishRange applies r's filters, sort, limit, count_only and keys_only
// to kvs, the whole range in key order, with etcd's rules: count is the
// number of keys in the range before the filters; more is set if the
// limit cut the result.
func finishRange(r *etcdpb.RangeRequest, kvs []*pb.KeyValue, resp *etcdpb.RangeResponse) {
	resp.Count = int64(len(kvs))
	if r.CountOnly {
		return
	}
	keep := kvs[:0:0]
	for _, kv := range kvs {
		switch {
		case r.MinModRevision != 0 && kv.ModRevision < r.MinModRevision,
			r.MaxModRevision != 0 && kv.ModRevision > r.MaxModRevision,
			r.MinCreateRevision != 0 && kv.CreateRevision < r.MinCreateRevision,
			r.MaxCreateRevision != 0 && kv.CreateRevision > r.MaxCreateRevision:
			continue
		}
		keep = append(keep, kv)
	}
	order := r.SortOrder
	if order == etcdpb.RangeRequest_NONE && r.SortTarget != etcdpb.RangeRequest_KEY {
		order = etcdpb.RangeRequest_ASCEND // etcd's default for a target without an order
	}
	if order != etcdpb.RangeRequest_NONE {
		cmp := sortCompare(r.SortTarget)
		if order == etcdpb.RangeRequest_DESCEND {
			asc := cmp
			cmp = func(a, b *pb.KeyValue) int { return asc(b, a) }
		}
		slices.SortStableFunc(keep, cmp)
	}
	if r.Limit > 0 && int64(len(keep)) > r.Limit {
		keep, resp.More = keep[:r.Limit], true
	}
	resp.Kvs = toKVs(keep)
	if r.KeysOnly {
		for _, kv := range resp.Kvs {
			kv.Value = nil
		}
	}
}

func sortCompare(t etcdpb.RangeRequest_SortTarget) func(a, b *pb.KeyValue) int {
	num := func(f func(*pb.KeyValue) int64) func(a, b *pb.KeyValue) int {
		return func(a, b *pb.KeyValue) int {
			switch x, y := f(a), f(b); {
			case x < y:
				return -1
			case x > y:
				return 1
			}
			return 0
		}
	}
	switch t {
	case etcdpb.RangeRequest_VERSION:
		return num((*pb.KeyValue).GetVersion)
	case etcdpb.RangeRequest_CREATE:
		return num((*pb.KeyValue).GetCreateRevision)
	case etcdpb.RangeRequest_MOD:
		return num((*pb.KeyValue).GetModRevision)
	case etcdpb.RangeRequest_VALUE:
		return func(a, b *pb.KeyValue) int { return bytes.Compare(a.Value, b.Value) }
	default:
		return func(a, b *pb.KeyValue) int { return bytes.Compare(a.Key, b.Key) }
	}
}

// Put writes one key through Raft.
func (k kvServer) Put(ctx context.Context, r *etcdpb.PutRequest) (*etcdpb.PutResponse, error) {
	req, err := raftpsPut(r)
	if err != nil {
		return nil, ToStatus(ctx, err)
	}
	out, err := k.s.store.Put(ctx, req)
	if err != nil {
		return nil, ToStatus(ctx, err)
	}
	return &etcdpb.PutResponse{Header: k.s.header(out.GetHeader().GetRevision()), PrevKv: toKV(out.PrevKv)}, nil
}

func raftpsPut(r *etcdpb.PutRequest) (*pb.PutRequest, error) {
	switch {
	case len(r.Key) == 0:
		return nil, errEmptyKey
	case r.IgnoreValue || r.IgnoreLease:
		return nil, unimplemented("put with ignore_value or ignore_lease; read the key and write it in a Txn that compares its mod_revision")
	}
	return &pb.PutRequest{Key: r.Key, Value: r.Value, Lease: r.Lease, PrevKv: r.PrevKv}, nil
}

// DeleteRange deletes a key or range through Raft.
func (k kvServer) DeleteRange(ctx context.Context, r *etcdpb.DeleteRangeRequest) (*etcdpb.DeleteRangeResponse, error) {
	if len(r.Key) == 0 {
		return nil, ToStatus(ctx, errEmptyKey)
	}
	out, err := k.s.store.DeleteRange(ctx, raftpsDelete(r))
	if err != nil {
		return nil, ToStatus(ctx, err)
	}
	return &etcdpb.DeleteRangeResponse{Header: k.s.header(out.GetHeader().GetRevision()), Deleted: out.Deleted,
		PrevKvs: toKVs(out.PrevKvs)}, nil
}

func raftpsDelete(r *etcdpb.DeleteRangeRequest) *pb.DeleteRangeRequest {
	return &pb.DeleteRangeRequest{Key: r.Key, RangeEnd: r.RangeEnd, PrevKv: r.PrevKv}
}

// Txn runs a transaction through Raft: compares against the state before
// it, then one branch, as one revision. A txn without puts and deletes is
// a linearizable read served without the log (raftstore.Store.Txn).
func (k kvServer) Txn(ctx context.Context, r *etcdpb.TxnRequest) (*etcdpb.TxnResponse, error) {
	resp, err := k.s.txn(ctx, r)
	if err != nil {
		return nil, ToStatus(ctx, err)
	}
	return resp, nil
}

func (s *Server) txn(ctx context.Context, r *etcdpb.TxnRequest) (*etcdpb.TxnResponse, error) {
	req := &pb.TxnRequest{}
	if max := s.store.MaxTxnOps(); len(r.Compare) > max {
		return nil, fmt.Errorf("%w: %d compares (max %d)", errTooManyOps, len(r.Compare), max)
	}
	for _, c := range r.Compare {
		pc, err := raftpsCompare(c)
		if err != nil {
			return nil, err
		}
		req.Compare = append(req.Compare, pc)
	}
	var err error
	if req.Success, err = raftpsOps(r.Success, s.store.MaxTxnOps()); err != nil {
		return nil, err
	}
	if req.Failure, err = raftpsOps(r.Failure, s.store.MaxTxnOps()); err != nil {
		return nil, err
	}
	out, err := s.store.Txn(ctx, req)
	if err != nil {
		return nil, err
	}
	ops := r.Success
	if !out.Succeeded {
		ops = r.Failure
	}
	if len(ops) != len(out.Responses) {
		return nil, fmt.Errorf("etcdapi: txn answered %d responses for %d ops", len(out.Responses), len(ops))
	}
	resp := &etcdpb.TxnResponse{Header: s.header(out.GetHeader().GetRevision()), Succeeded: out.Succeeded}
	for i, op := range out.Responses {
		resp.Responses = append(resp.Responses, s.etcdResponseOp(ops[i], op))
	}
	return resp, nil
}

func raftpsCompare(c *etcdpb.Compare) (*pb.Compare, error) {
	if len(c.RangeEnd) > 0 {
		return nil, unimplemented("txn compare over a range (range_end); compare each key")
	}
	pc := &pb.Compare{Result: pb.Compare_CompareResult(c.Result), Target: pb.Compare_CompareTarget(c.Target), Key: c.Key}
	switch u := c.TargetUnion.(type) {
	case *etcdpb.Compare_Version:
		pc.TargetUnion = &pb.Compare_Version{Version: u.Version}
	case *etcdpb.Compare_CreateRevision:
		pc.TargetUnion = &pb.Compare_CreateRevision{CreateRevision: u.CreateRevision}
	case *etcdpb.Compare_ModRevision:
		pc.TargetUnion = &pb.Compare_ModRevision{ModRevision: u.ModRevision}
	case *etcdpb.Compare_Value:
		pc.TargetUnion = &pb.Compare_Value{Value: u.Value}
	case *etcdpb.Compare_Lease:
		pc.TargetUnion = &pb.Compare_Lease{Lease: u.Lease}
	}
	return pc, nil
}

// raftpsOps converts one branch, after etcd's checks: at most max ops
// (Store.MaxTxnOps; more is "etcdserver: too many operations in txn
// request"), non-empty keys, no key put twice or put and deleted.
func raftpsOps(ops []*etcdpb.RequestOp, max int) ([]*pb.RequestOp, error) {
	if len(ops) > max {
		return nil, fmt.Errorf("%w: %d ops (max %d, --max-txn-ops)", errTooManyOps, len(ops), max)
	}
	out := make([]*pb.RequestOp, 0, len(ops))
	for _, op := range ops {
		switch o := op.Request.(type) {
		case *etcdpb.RequestOp_RequestRange:
			if err := checkRange(o.RequestRange); err != nil {
				return nil, err
			}
			if o.RequestRange.Revision != 0 {
				return nil, unimplemented("a range at a revision inside a txn; read it with its own Range")
			}
			out = append(out, &pb.RequestOp{Request: &pb.RequestOp_RequestRange{
				RequestRange: raftpsRange(o.RequestRange, postProcessed(o.RequestRange))}})
		case *etcdpb.RequestOp_RequestPut:
			p, err := raftpsPut(o.RequestPut)
			if err != nil {
				return nil, err
			}
			out = append(out, &pb.RequestOp{Request: &pb.RequestOp_RequestPut{RequestPut: p}})
		case *etcdpb.RequestOp_RequestDeleteRange:
			if len(o.RequestDeleteRange.Key) == 0 {
				return nil, errEmptyKey
			}
			out = append(out, &pb.RequestOp{Request: &pb.RequestOp_RequestDeleteRange{
				RequestDeleteRange: raftpsDelete(o.RequestDeleteRange)}})
		case *etcdpb.RequestOp_RequestTxn:
			return nil, unimplemented("nested txn; flatten it into one txn")
		default:
			return nil, fmt.Errorf("%w: empty txn op", fsm.ErrInvalid)
		}
	}
	return out, checkDuplicates(out)
}

// checkDuplicates is etcd's rule for one branch: a key may be put once,
// and not both put and deleted.
func checkDuplicates(ops []*pb.RequestOp) error {
	puts := map[string]bool{}
	for _, op := range ops {
		if p := op.GetRequestPut(); p != nil {
			if puts[string(p.Key)] {
				return fmt.Errorf("%w: %q", errDuplicateKey, p.Key)
			}
			puts[string(p.Key)] = true
		}
	}
	for _, op := range ops {
		d := op.GetRequestDeleteRange()
		if d == nil {
			continue
		}
		for k := range puts {
			if inRange([]byte(k), d.Key, d.RangeEnd) {
				return fmt.Errorf("%w: %q is put and deleted", errDuplicateKey, k)
			}
		}
	}
	return nil
}

// inRange is etcd's key/range_end rule: an empty end is the key alone,
// "\x00" every key >= key, else [key, end).
func inRange(k, key, end []byte) bool {
	switch {
	case len(end) == 0:
		return bytes.Equal(k, key)
	case len(end) == 1 && end[0] == 0:
		return bytes.Compare(k, key) >= 0
	default:
		return bytes.Compare(k, key) >= 0 && bytes.Compare(k, end) < 0
	}
}

func (s *Server) etcdResponseOp(req *etcdpb.RequestOp, op *pb.ResponseOp) *etcdpb.ResponseOp {
	switch o := op.Response.(type) {
	case *pb.ResponseOp_ResponseRange:
		rr := o.ResponseRange
		out := &etcdpb.RangeResponse{Header: s.header(rr.GetHeader().GetRevision())}
		if r := req.GetRequestRange(); postProcessed(r) {
			finishRange(r, rr.Kvs, out)
		} else {
			out.Kvs, out.More, out.Count = toKVs(rr.Kvs), rr.More, rr.Count
		}
		return &etcdpb.ResponseOp{Response: &etcdpb.ResponseOp_ResponseRange{ResponseRange: out}}
	case *pb.ResponseOp_ResponsePut:
		return &etcdpb.ResponseOp{Response: &etcdpb.ResponseOp_ResponsePut{ResponsePut: &etcdpb.PutResponse{
			Header: s.header(o.ResponsePut.GetHeader().GetRevision()), PrevKv: toKV(o.ResponsePut.PrevKv)}}}
	case *pb.ResponseOp_ResponseDeleteRange:
		d := o.ResponseDeleteRange
		return &etcdpb.ResponseOp{Response: &etcdpb.ResponseOp_ResponseDeleteRange{ResponseDeleteRange: &etcdpb.DeleteRangeResponse{
			Header: s.header(d.GetHeader().GetRevision()), Deleted: d.Deleted, PrevKvs: toKVs(d.PrevKvs)}}}
	}
	return &etcdpb.ResponseOp{}
}

// Compact is not served: raftps compacts its watch history itself.
func (kvServer) Compact(context.Context, *etcdpb.CompactionRequest) (*etcdpb.CompactionResponse, error) {
	return nil, ToStatus(context.Background(), unimplemented("compaction: raftps compacts its watch history itself (the last %d revisions are kept)", fsm.HistoryRevisions))
}

// RangeStream is not served; Range answers the same.
func (kvServer) RangeStream(*etcdpb.RangeRequest, etcdpb.KV_RangeStreamServer) error {
	return ToStatus(context.Background(), unimplemented("RangeStream; use Range"))
}
