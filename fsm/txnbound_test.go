package fsm

import (
	"fmt"
	"runtime"
	"strings"
	"testing"

	pb "github.com/raftps/raftps/api/raftpspb"
)

// rangeOps returns n range ops over every key under "/h/".
func rangeOps(n int) []*pb.RequestOp {
	ops := make([]*pb.RequestOp, n)
	for i := range ops {
		ops[i] = &pb.RequestOp{Request: &pb.RequestOp_RequestRange{RequestRange: &pb.RangeRequest{Key: []byte("/h/"), RangeEnd: []byte("/h0")}}}
	}
	return ops
}

// allocated returns the bytes fn allocated.
func allocated(fn func()) uint64 {
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	fn()
	runtime.ReadMemStats(&after)
	return after.TotalAlloc - before.TotalAlloc
}

// TestApplyTxnBounded is issue 32 hole 1 in the FSM: entries already in a
// log (written before the store served read-only txns without the log and
// capped txn ops) must be applied with bounded work on every replica. A
// txn of 2,000 ranges over 100 KB of keys made Apply build and encode
// 2,000 copies of every key/value; now a txn whose results would exceed
// MaxTxnResponseBytes, with or without writes, is refused before anything
// is built or changed.
func TestApplyTxnBounded(t *testing.T) {
	f := newTestFSM(t)
	value := strings.Repeat("v", 1024)
	for i := range 100 {
		f.put(fmt.Sprintf("/h/%03d", i), value)
	}
	rev := f.Revision()

	readOnly := &pb.TxnRequest{Success: rangeOps(2000), Failure: rangeOps(10)}
	var err error
	n := allocated(func() { _, err = f.do(pb.CommandType_COMMAND_TXN, readOnly, nil) })
	if n > 8<<20 {
		t.Errorf("applying the read-only txn allocated %d bytes, want under 8 MiB", n)
	}
	wantErr(t, err, ErrTooLarge)

	mixed := &pb.TxnRequest{Success: append(rangeOps(2000), opPut("/x", "1"))}
	n = allocated(func() { _, err = f.do(pb.CommandType_COMMAND_TXN, mixed, nil) })
	wantErr(t, err, ErrTooLarge)
	if !strings.Contains(err.Error(), "txn response") {
		t.Errorf("error %q does not name the response limit", err)
	}
	if n > 8<<20 {
		t.Errorf("applying the mixed txn allocated %d bytes, want under 8 MiB", n)
	}
	if f.Revision() != rev || f.get("/x") != nil {
		t.Fatalf("a refused txn changed the store: revision %d (was %d), /x %v", f.Revision(), rev, f.get("/x"))
	}

	// A put earlier in the branch counts toward the ranges after it.
	big := strings.Repeat("b", MaxValueSize)
	puts := &pb.TxnRequest{Success: []*pb.RequestOp{opPut("/h/big", big)}}
	puts.Success = append(puts.Success, rangeOps(3)...)
	_, err = f.do(pb.CommandType_COMMAND_TXN, puts, nil)
	wantErr(t, err, ErrTooLarge)

	// Within the bound a mixed txn answers its ranges, later ones seeing
	// the earlier put.
	ok := &pb.TxnRequest{Success: []*pb.RequestOp{opPut("/h/new", "n")}}
	ok.Success = append(ok.Success, rangeOps(3)...)
	resp := &pb.TxnResponse{}
	if _, err := f.do(pb.CommandType_COMMAND_TXN, ok, resp); err != nil {
		t.Fatal(err)
	}
	if c := resp.Responses[3].GetResponseRange().GetCount(); c != 101 || len(resp.Responses[3].GetResponseRange().Kvs) != 101 {
		t.Fatalf("range after the put: count %d, %d kvs; want 101", c, len(resp.Responses[3].GetResponseRange().Kvs))
	}
}

// TestTxnRead: a read-only txn is answered from local state with the
// compares' branch, and refused past MaxTxnResponseBytes.
func TestTxnRead(t *testing.T) {
	f := newTestFSM(t)
	f.put("/h/a", "1")
	f.put("/h/b", "2")
	req := &pb.TxnRequest{
		Compare: []*pb.Compare{cmpOp("/h/a", pb.Compare_VALUE, pb.Compare_EQUAL, "1")},
		Success: []*pb.RequestOp{opGet("/h/b")},
		Failure: rangeOps(1),
	}
	resp, err := f.TxnRead(req)
	if err != nil {
		t.Fatal(err)
	}
	if !resp.Succeeded || string(resp.Responses[0].GetResponseRange().Kvs[0].Value) != "2" || resp.Header.Revision != f.Revision() {
		t.Fatalf("TxnRead: %v", resp)
	}
	req.Compare[0] = cmpOp("/h/a", pb.Compare_VALUE, pb.Compare_EQUAL, "x")
	if resp, err = f.TxnRead(req); err != nil || resp.Succeeded || resp.Responses[0].GetResponseRange().Count != 2 {
		t.Fatalf("TxnRead failure branch: %v %v", resp, err)
	}
	_, err = f.TxnRead(&pb.TxnRequest{Success: []*pb.RequestOp{opPut("/h/c", "3")}})
	wantErr(t, err, ErrInvalid)

	big := strings.Repeat("b", MaxValueSize)
	for i := range 3 {
		f.put(fmt.Sprintf("/h/big%d", i), big)
	}
	_, err = f.TxnRead(&pb.TxnRequest{Success: rangeOps(2)})
	wantErr(t, err, ErrTooLarge)
	if _, err := f.TxnRead(&pb.TxnRequest{Success: []*pb.RequestOp{{Request: &pb.RequestOp_RequestRange{RequestRange: &pb.RangeRequest{
		Key: []byte("/h/"), RangeEnd: []byte("/h0"), KeysOnly: true}}}}}); err != nil {
		t.Fatalf("keys-only range over big values: %v", err)
	}
}
