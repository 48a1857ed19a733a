package fsm

import (
	"bytes"
	"slices"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"

	pb "github.com/raftps/raftps/api/raftpspb"
)

func TestEmptyStore(t *testing.T) {
	f := newTestFSM(t)
	if f.Revision() != 1 || f.CompactRevision() != 0 || f.AppliedIndex() != 0 {
		t.Fatalf("revision %d compact %d applied %d", f.Revision(), f.CompactRevision(), f.AppliedIndex())
	}
	resp, err := f.Range(&pb.RangeRequest{Key: []byte{0}, RangeEnd: []byte{0}})
	if err != nil || len(resp.Kvs) != 0 || resp.Header.Revision != 1 {
		t.Fatalf("range %v %v", resp, err)
	}
}

func TestPut(t *testing.T) {
	f := newTestFSM(t)
	lease := f.grant(0, 10)
	steps := []struct {
		name                         string
		req                          *pb.PutRequest
		wantErr                      error
		wantRev                      int64 // store revision after
		wantCreate, wantMod, wantVer int64
		wantPrev                     string // prev value, "-" for none
	}{
		{"create", &pb.PutRequest{Key: []byte("a"), Value: []byte("1")}, nil, 2, 2, 2, 1, "-"},
		{"overwrite keeps create revision", &pb.PutRequest{Key: []byte("a"), Value: []byte("2")}, nil, 3, 2, 3, 2, "-"},
		{"prev_kv", &pb.PutRequest{Key: []byte("a"), Value: []byte("3"), PrevKv: true}, nil, 4, 2, 4, 3, "2"},
		{"prev_kv of new key is empty", &pb.PutRequest{Key: []byte("b"), Value: []byte("x"), PrevKv: true}, nil, 5, 5, 5, 1, "-"},
		{"with lease", &pb.PutRequest{Key: []byte("c"), Value: []byte("l"), Lease: lease}, nil, 6, 6, 6, 1, "-"},
		{"empty value", &pb.PutRequest{Key: []byte("d")}, nil, 7, 7, 7, 1, "-"},
		{"empty key", &pb.PutRequest{Value: []byte("v")}, ErrInvalid, 7, 0, 0, 0, "-"},
		{"unknown lease", &pb.PutRequest{Key: []byte("e"), Lease: 999}, ErrLeaseNotFound, 7, 0, 0, 0, "-"},
		{"key at limit", &pb.PutRequest{Key: bytes.Repeat([]byte("k"), MaxKeySize)}, nil, 8, 8, 8, 1, "-"},
		{"key over limit", &pb.PutRequest{Key: bytes.Repeat([]byte("k"), MaxKeySize+1)}, ErrTooLarge, 8, 0, 0, 0, "-"},
		{"value at limit", &pb.PutRequest{Key: []byte("big"), Value: make([]byte, MaxValueSize)}, nil, 9, 9, 9, 1, "-"},
		{"value over limit", &pb.PutRequest{Key: []byte("big"), Value: make([]byte, MaxValueSize+1)}, ErrTooLarge, 9, 0, 0, 0, "-"},
	}
	for _, tc := range steps {
		t.Run(tc.name, func(t *testing.T) {
			resp := &pb.PutResponse{}
			r, err := f.do(pb.CommandType_COMMAND_PUT, tc.req, resp)
			wantErr(t, err, tc.wantErr)
			if r.Revision != tc.wantRev || f.Revision() != tc.wantRev {
				t.Fatalf("revision result %d store %d, want %d", r.Revision, f.Revision(), tc.wantRev)
			}
			if tc.wantErr != nil {
				if Code(err) != codes.InvalidArgument && Code(err) != codes.NotFound {
					t.Fatalf("code %v", Code(err))
				}
				return
			}
			if resp.Header.GetRevision() != tc.wantRev {
				t.Fatalf("header revision %d", resp.Header.GetRevision())
			}
			kv := f.get(string(tc.req.Key))
			if kv.CreateRevision != tc.wantCreate || kv.ModRevision != tc.wantMod || kv.Version != tc.wantVer ||
				!bytes.Equal(kv.Value, tc.req.Value) || kv.Lease != tc.req.Lease {
				t.Fatalf("kv %v", kv)
			}
			if tc.wantPrev == "-" {
				if resp.PrevKv != nil {
					t.Fatalf("prev_kv %v", resp.PrevKv)
				}
			} else if string(resp.PrevKv.GetValue()) != tc.wantPrev {
				t.Fatalf("prev_kv %v, want %q", resp.PrevKv, tc.wantPrev)
			}
			checkInvariants(t, f.FSM)
		})
	}
}

func seedKeys(f *testFSM, keys ...string) {
	for _, k := range keys {
		f.put(k, "v"+k)
	}
}

func TestRange(t *testing.T) {
	f := newTestFSM(t)
	seedKeys(f, "a", "b", "foo", "foo/1", "foo/2", "foo/3", "fop", "z")
	cases := []struct {
		name      string
		req       *pb.RangeRequest
		wantErr   error
		wantKeys  []string
		wantCount int64
		wantMore  bool
		noValues  bool
	}{
		{"single key", &pb.RangeRequest{Key: []byte("foo")}, nil, []string{"foo"}, 1, false, false},
		{"missing key", &pb.RangeRequest{Key: []byte("nope")}, nil, nil, 0, false, false},
		{"prefix", &pb.RangeRequest{Key: []byte("foo/"), RangeEnd: []byte("foo0")}, nil, []string{"foo/1", "foo/2", "foo/3"}, 3, false, false},
		{"half-open range", &pb.RangeRequest{Key: []byte("b"), RangeEnd: []byte("foo/2")}, nil, []string{"b", "foo", "foo/1"}, 3, false, false},
		{"from key", &pb.RangeRequest{Key: []byte("fop"), RangeEnd: []byte{0}}, nil, []string{"fop", "z"}, 2, false, false},
		{"all keys", &pb.RangeRequest{Key: []byte{0}, RangeEnd: []byte{0}}, nil, []string{"a", "b", "foo", "foo/1", "foo/2", "foo/3", "fop", "z"}, 8, false, false},
		{"end before key", &pb.RangeRequest{Key: []byte("z"), RangeEnd: []byte("a")}, nil, nil, 0, false, false},
		{"end equals key", &pb.RangeRequest{Key: []byte("a"), RangeEnd: []byte("a")}, nil, nil, 0, false, false},
		{"limit", &pb.RangeRequest{Key: []byte("foo"), RangeEnd: []byte("fop"), Limit: 2}, nil, []string{"foo", "foo/1"}, 4, true, false},
		{"limit not reached", &pb.RangeRequest{Key: []byte("foo"), RangeEnd: []byte("fop"), Limit: 4}, nil, []string{"foo", "foo/1", "foo/2", "foo/3"}, 4, false, false},
		{"keys only", &pb.RangeRequest{Key: []byte("a"), RangeEnd: []byte("c"), KeysOnly: true}, nil, []string{"a", "b"}, 2, false, true},
		{"count only", &pb.RangeRequest{Key: []byte("foo/"), RangeEnd: []byte("foo0"), CountOnly: true, Limit: 1}, nil, nil, 3, false, false},
		{"empty key", &pb.RangeRequest{RangeEnd: []byte{0}}, ErrInvalid, nil, 0, false, false},
		{"negative limit", &pb.RangeRequest{Key: []byte("a"), Limit: -1}, ErrInvalid, nil, 0, false, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			resp, err := f.Range(tc.req)
			wantErr(t, err, tc.wantErr)
			if err != nil {
				return
			}
			if got := keysOf(resp.Kvs); !slices.Equal(got, tc.wantKeys) {
				t.Fatalf("keys %q, want %q", got, tc.wantKeys)
			}
			if resp.Count != tc.wantCount || resp.More != tc.wantMore || resp.Header.Revision != f.Revision() {
				t.Fatalf("count %d more %v header %v", resp.Count, resp.More, resp.Header)
			}
			for _, kv := range resp.Kvs {
				if tc.noValues != (kv.Value == nil) {
					t.Fatalf("value of %q: %q", kv.Key, kv.Value)
				}
				if kv.Version != 1 || kv.CreateRevision == 0 {
					t.Fatalf("kv %v", kv)
				}
			}
		})
	}
	t.Run("result is a copy", func(t *testing.T) {
		resp, _ := f.Range(&pb.RangeRequest{Key: []byte("a")})
		resp.Kvs[0].Version = 99
		if f.get("a").Version != 1 {
			t.Fatal("Range shares its KeyValue with the store")
		}
	})
}

func TestDeleteRange(t *testing.T) {
	cases := []struct {
		name        string
		req         *pb.DeleteRangeRequest
		wantErr     error
		wantDeleted int64
		wantLeft    []string
		wantPrev    []string
	}{
		{"single", &pb.DeleteRangeRequest{Key: []byte("b")}, nil, 1, []string{"a", "c", "c/1", "c/2", "d"}, nil},
		{"missing", &pb.DeleteRangeRequest{Key: []byte("x")}, nil, 0, []string{"a", "b", "c", "c/1", "c/2", "d"}, nil},
		{"prefix with prev_kv", &pb.DeleteRangeRequest{Key: []byte("c/"), RangeEnd: []byte("c0"), PrevKv: true}, nil, 2, []string{"a", "b", "c", "d"}, []string{"c/1", "c/2"}},
		{"from key", &pb.DeleteRangeRequest{Key: []byte("c"), RangeEnd: []byte{0}}, nil, 4, []string{"a", "b"}, nil},
		{"all", &pb.DeleteRangeRequest{Key: []byte{0}, RangeEnd: []byte{0}}, nil, 6, nil, nil},
		{"end before key", &pb.DeleteRangeRequest{Key: []byte("d"), RangeEnd: []byte("a")}, nil, 0, []string{"a", "b", "c", "c/1", "c/2", "d"}, nil},
		{"empty key", &pb.DeleteRangeRequest{RangeEnd: []byte{0}}, ErrInvalid, 0, []string{"a", "b", "c", "c/1", "c/2", "d"}, nil},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			f := newTestFSM(t)
			seedKeys(f, "a", "b", "c", "c/1", "c/2", "d")
			before := f.Revision()
			resp := &pb.DeleteRangeResponse{}
			r, err := f.do(pb.CommandType_COMMAND_DELETE_RANGE, tc.req, resp)
			wantErr(t, err, tc.wantErr)
			wantRev := before
			if tc.wantDeleted > 0 {
				wantRev++ // one revision however many keys
			}
			if r.Revision != wantRev || f.Revision() != wantRev {
				t.Fatalf("revision %d/%d, want %d", r.Revision, f.Revision(), wantRev)
			}
			all, _ := f.Range(&pb.RangeRequest{Key: []byte{0}, RangeEnd: []byte{0}})
			if got := keysOf(all.Kvs); !slices.Equal(got, tc.wantLeft) {
				t.Fatalf("left %q, want %q", got, tc.wantLeft)
			}
			if err != nil {
				return
			}
			if resp.Deleted != tc.wantDeleted || !slices.Equal(keysOf(resp.PrevKvs), tc.wantPrev) {
				t.Fatalf("deleted %d prev %q", resp.Deleted, keysOf(resp.PrevKvs))
			}
			for _, kv := range resp.PrevKvs {
				if string(kv.Value) != "v"+string(kv.Key) {
					t.Fatalf("prev kv %v", kv)
				}
			}
			evs, _ := f.Events([]byte{0}, []byte{0}, before+1, 0)
			if int64(len(evs)) != tc.wantDeleted {
				t.Fatalf("%d events", len(evs))
			}
			for _, ev := range evs {
				if ev.Type != pb.Event_DELETE || ev.Kv.ModRevision != wantRev || ev.PrevKv == nil || ev.Kv.Value != nil {
					t.Fatalf("event %v", ev)
				}
			}
			checkInvariants(t, f.FSM)
		})
	}
	t.Run("recreate after delete restarts version", func(t *testing.T) {
		f := newTestFSM(t)
		f.put("k", "1")
		f.put("k", "2")
		f.do(pb.CommandType_COMMAND_DELETE_RANGE, &pb.DeleteRangeRequest{Key: []byte("k")}, nil)
		f.put("k", "3")
		kv := f.get("k")
		if kv.Version != 1 || kv.CreateRevision != 5 || kv.ModRevision != 5 {
			t.Fatalf("kv %v", kv)
		}
	})
}

func cmpOp(key string, target pb.Compare_CompareTarget, result pb.Compare_CompareResult, v any) *pb.Compare {
	c := &pb.Compare{Key: []byte(key), Target: target, Result: result}
	switch target {
	case pb.Compare_VERSION:
		c.TargetUnion = &pb.Compare_Version{Version: int64(v.(int))}
	case pb.Compare_CREATE:
		c.TargetUnion = &pb.Compare_CreateRevision{CreateRevision: int64(v.(int))}
	case pb.Compare_MOD:
		c.TargetUnion = &pb.Compare_ModRevision{ModRevision: int64(v.(int))}
	case pb.Compare_LEASE:
		c.TargetUnion = &pb.Compare_Lease{Lease: int64(v.(int))}
	case pb.Compare_VALUE:
		c.TargetUnion = &pb.Compare_Value{Value: []byte(v.(string))}
	}
	return c
}

func opPut(k, v string) *pb.RequestOp {
	return &pb.RequestOp{Request: &pb.RequestOp_RequestPut{RequestPut: &pb.PutRequest{Key: []byte(k), Value: []byte(v), PrevKv: true}}}
}

func opGet(k string) *pb.RequestOp {
	return &pb.RequestOp{Request: &pb.RequestOp_RequestRange{RequestRange: &pb.RangeRequest{Key: []byte(k)}}}
}

func opDel(k string) *pb.RequestOp {
	return &pb.RequestOp{Request: &pb.RequestOp_RequestDeleteRange{RequestDeleteRange: &pb.DeleteRangeRequest{Key: []byte(k), PrevKv: true}}}
}

// TestTxnCompare covers every compare target with every result, on a key
// "k" (create 2, mod 3, version 2, value "v2", lease L) and a missing key.
func TestTxnCompare(t *testing.T) {
	f := newTestFSM(t)
	l := f.grant(0, 10)      // revision stays 1
	f.putLease("k", "v1", l) // rev 2
	f.putLease("k", "v2", l) // rev 3
	L := int(l)
	const (
		EQ = pb.Compare_EQUAL
		NE = pb.Compare_NOT_EQUAL
		GT = pb.Compare_GREATER
		LT = pb.Compare_LESS
	)
	cases := []struct {
		name string
		cmp  *pb.Compare
		want bool
	}{
		{"version equal", cmpOp("k", pb.Compare_VERSION, EQ, 2), true},
		{"version equal false", cmpOp("k", pb.Compare_VERSION, EQ, 1), false},
		{"version not equal", cmpOp("k", pb.Compare_VERSION, NE, 1), true},
		{"version greater", cmpOp("k", pb.Compare_VERSION, GT, 1), true},
		{"version greater false", cmpOp("k", pb.Compare_VERSION, GT, 2), false},
		{"version less", cmpOp("k", pb.Compare_VERSION, LT, 3), true},
		{"version of missing key is 0", cmpOp("missing", pb.Compare_VERSION, EQ, 0), true},
		{"create equal", cmpOp("k", pb.Compare_CREATE, EQ, 2), true},
		{"create not equal", cmpOp("k", pb.Compare_CREATE, NE, 2), false},
		{"create greater", cmpOp("k", pb.Compare_CREATE, GT, 1), true},
		{"create less", cmpOp("k", pb.Compare_CREATE, LT, 2), false},
		{"create of missing key is 0", cmpOp("missing", pb.Compare_CREATE, EQ, 0), true},
		{"mod equal", cmpOp("k", pb.Compare_MOD, EQ, 3), true},
		{"mod not equal", cmpOp("k", pb.Compare_MOD, NE, 3), false},
		{"mod greater", cmpOp("k", pb.Compare_MOD, GT, 3), false},
		{"mod less", cmpOp("k", pb.Compare_MOD, LT, 4), true},
		{"mod of missing key is 0", cmpOp("missing", pb.Compare_MOD, LT, 1), true},
		{"value equal", cmpOp("k", pb.Compare_VALUE, EQ, "v2"), true},
		{"value equal false", cmpOp("k", pb.Compare_VALUE, EQ, "v1"), false},
		{"value not equal", cmpOp("k", pb.Compare_VALUE, NE, "v1"), true},
		{"value greater", cmpOp("k", pb.Compare_VALUE, GT, "v1"), true},
		{"value less", cmpOp("k", pb.Compare_VALUE, LT, "v3"), true},
		{"value less false", cmpOp("k", pb.Compare_VALUE, LT, "v"), false},
		{"value of missing key fails equal", cmpOp("missing", pb.Compare_VALUE, EQ, ""), false},
		{"value of missing key fails not equal", cmpOp("missing", pb.Compare_VALUE, NE, "x"), false},
		{"lease equal", cmpOp("k", pb.Compare_LEASE, EQ, L), true},
		{"lease not equal", cmpOp("k", pb.Compare_LEASE, NE, L), false},
		{"lease greater", cmpOp("k", pb.Compare_LEASE, GT, 0), true},
		{"lease less", cmpOp("k", pb.Compare_LEASE, LT, L+1), true},
		{"lease of missing key is 0", cmpOp("missing", pb.Compare_LEASE, EQ, 0), true},
		{"target union of another kind compares with 0", &pb.Compare{Key: []byte("k"), Target: pb.Compare_VERSION, Result: GT, TargetUnion: &pb.Compare_Value{Value: []byte("x")}}, true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			before := f.Revision()
			resp := &pb.TxnResponse{}
			req := &pb.TxnRequest{
				Compare: []*pb.Compare{tc.cmp},
				Success: []*pb.RequestOp{opGet("k")},
				Failure: []*pb.RequestOp{opGet("missing"), opGet("k")},
			}
			if _, err := f.do(pb.CommandType_COMMAND_TXN, req, resp); err != nil {
				t.Fatal(err)
			}
			if resp.Succeeded != tc.want {
				t.Fatalf("succeeded %v, want %v", resp.Succeeded, tc.want)
			}
			wantOps := 1
			if !tc.want {
				wantOps = 2
			}
			if len(resp.Responses) != wantOps || f.Revision() != before || resp.Header.Revision != before {
				t.Fatalf("responses %d revision %d header %v", len(resp.Responses), f.Revision(), resp.Header)
			}
		})
	}
}

func TestTxn(t *testing.T) {
	cases := []struct {
		name          string
		req           *pb.TxnRequest
		wantErr       error
		wantSucceeded bool
		wantRevDelta  int64
		wantKeys      map[string]string // after; "" = absent
		check         func(t *testing.T, resp *pb.TxnResponse)
	}{
		{
			name: "success branch: create if absent",
			req: &pb.TxnRequest{
				Compare: []*pb.Compare{cmpOp("new", pb.Compare_CREATE, pb.Compare_EQUAL, 0)},
				Success: []*pb.RequestOp{opPut("new", "1")},
				Failure: []*pb.RequestOp{opPut("lost", "1")},
			},
			wantSucceeded: true, wantRevDelta: 1,
			wantKeys: map[string]string{"new": "1", "lost": ""},
		},
		{
			name: "failure branch",
			req: &pb.TxnRequest{
				Compare: []*pb.Compare{cmpOp("a", pb.Compare_VALUE, pb.Compare_EQUAL, "nope")},
				Success: []*pb.RequestOp{opPut("won", "1")},
				Failure: []*pb.RequestOp{opPut("lost", "1"), opGet("a")},
			},
			wantSucceeded: false, wantRevDelta: 1,
			wantKeys: map[string]string{"won": "", "lost": "1"},
			check: func(t *testing.T, resp *pb.TxnResponse) {
				if string(resp.Responses[1].GetResponseRange().Kvs[0].Value) != "va" {
					t.Fatalf("range in txn %v", resp.Responses[1])
				}
			},
		},
		{
			name: "all compares must hold",
			req: &pb.TxnRequest{
				Compare: []*pb.Compare{
					cmpOp("a", pb.Compare_VALUE, pb.Compare_EQUAL, "va"),
					cmpOp("b", pb.Compare_VERSION, pb.Compare_EQUAL, 7),
				},
				Success: []*pb.RequestOp{opPut("won", "1")},
			},
			wantSucceeded: false, wantRevDelta: 0,
			wantKeys: map[string]string{"won": ""},
		},
		{
			name:          "no compares takes success",
			req:           &pb.TxnRequest{Success: []*pb.RequestOp{opDel("a")}},
			wantSucceeded: true, wantRevDelta: 1,
			wantKeys: map[string]string{"a": ""},
		},
		{
			name: "many writes are one revision and later ops see earlier ones",
			req: &pb.TxnRequest{Success: []*pb.RequestOp{
				opPut("x", "1"), opPut("x", "2"), opGet("x"), opDel("a"), opPut("a", "again"),
			}},
			wantSucceeded: true, wantRevDelta: 1,
			wantKeys: map[string]string{"x": "2", "a": "again"},
			check: func(t *testing.T, resp *pb.TxnResponse) {
				rev := resp.Header.Revision
				got := resp.Responses[2].GetResponseRange().Kvs[0]
				if string(got.Value) != "2" || got.Version != 2 || got.CreateRevision != rev || got.ModRevision != rev {
					t.Fatalf("range in txn %v (revision %d)", got, rev)
				}
				if prev := resp.Responses[1].GetResponsePut().PrevKv; string(prev.GetValue()) != "1" {
					t.Fatalf("prev of second put %v", prev)
				}
				for _, r := range resp.Responses {
					var h *pb.ResponseHeader
					switch x := r.Response.(type) {
					case *pb.ResponseOp_ResponsePut:
						h = x.ResponsePut.Header
					case *pb.ResponseOp_ResponseRange:
						h = x.ResponseRange.Header
					case *pb.ResponseOp_ResponseDeleteRange:
						h = x.ResponseDeleteRange.Header
					}
					if h.GetRevision() != rev {
						t.Fatalf("inner header %v, txn revision %d", h, rev)
					}
				}
			},
		},
		{
			name:          "read-only txn does not bump",
			req:           &pb.TxnRequest{Success: []*pb.RequestOp{opGet("a"), opDel("missing")}},
			wantSucceeded: true, wantRevDelta: 0,
		},
		{
			name:     "invalid op rejects the whole txn",
			req:      &pb.TxnRequest{Success: []*pb.RequestOp{opPut("x", "1"), opPut("", "2")}},
			wantErr:  ErrInvalid,
			wantKeys: map[string]string{"x": ""},
		},
		{
			name:     "unknown lease in branch rejects the txn",
			req:      &pb.TxnRequest{Success: []*pb.RequestOp{opDel("a"), {Request: &pb.RequestOp_RequestPut{RequestPut: &pb.PutRequest{Key: []byte("y"), Lease: 77}}}}},
			wantErr:  ErrLeaseNotFound,
			wantKeys: map[string]string{"a": "va"},
		},
		{
			name:     "too large value in branch rejects the txn",
			req:      &pb.TxnRequest{Success: []*pb.RequestOp{opPut("x", "1"), opPut("y", strings.Repeat("v", MaxValueSize+1))}},
			wantErr:  ErrTooLarge,
			wantKeys: map[string]string{"x": ""},
		},
		{
			name:          "invalid op in the branch not taken is fine",
			req:           &pb.TxnRequest{Success: []*pb.RequestOp{opGet("a")}, Failure: []*pb.RequestOp{opPut("", "")}},
			wantSucceeded: true,
		},
		{
			name:    "empty op",
			req:     &pb.TxnRequest{Success: []*pb.RequestOp{{}}},
			wantErr: ErrInvalid,
		},
		{
			name:    "compare with empty key",
			req:     &pb.TxnRequest{Compare: []*pb.Compare{cmpOp("", pb.Compare_VERSION, pb.Compare_EQUAL, 0)}},
			wantErr: ErrInvalid,
		},
		{
			name:    "compare with unknown result",
			req:     &pb.TxnRequest{Compare: []*pb.Compare{{Key: []byte("a"), Result: 9}}},
			wantErr: ErrInvalid,
		},
		{
			name:    "compare with unknown target",
			req:     &pb.TxnRequest{Compare: []*pb.Compare{{Key: []byte("a"), Target: 9}}},
			wantErr: ErrInvalid,
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			f := newTestFSM(t)
			seedKeys(f, "a", "b")
			before := f.Revision()
			resp := &pb.TxnResponse{}
			r, err := f.do(pb.CommandType_COMMAND_TXN, tc.req, resp)
			wantErr(t, err, tc.wantErr)
			if f.Revision() != before+tc.wantRevDelta || r.Revision != f.Revision() {
				t.Fatalf("revision %d (result %d), want %d", f.Revision(), r.Revision, before+tc.wantRevDelta)
			}
			for k, v := range tc.wantKeys {
				kv := f.get(k)
				if (v == "") != (kv == nil) || (kv != nil && string(kv.Value) != v) {
					t.Fatalf("key %q = %v, want %q", k, kv, v)
				}
			}
			checkInvariants(t, f.FSM)
			if err != nil {
				return
			}
			if resp.Succeeded != tc.wantSucceeded || resp.Header.Revision != f.Revision() {
				t.Fatalf("succeeded %v header %v", resp.Succeeded, resp.Header)
			}
			if tc.check != nil {
				tc.check(t, resp)
			}
		})
	}
}
