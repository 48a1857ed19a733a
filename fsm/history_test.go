package fsm

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	pb "github.com/raftps/raftps/api/raftpspb"
)

func evSummary(evs []*pb.Event) []string {
	var out []string
	for _, ev := range evs {
		out = append(out, fmt.Sprintf("%v %s@%d", ev.Type, ev.Kv.Key, ev.Kv.ModRevision))
	}
	return out
}

func TestEvents(t *testing.T) {
	f := newTestFSM(t)
	f.put("a", "1")                                                                                                // 2
	f.put("b/1", "1")                                                                                              // 3
	f.put("a", "2")                                                                                                // 4
	f.do(pb.CommandType_COMMAND_TXN, &pb.TxnRequest{Success: []*pb.RequestOp{opPut("b/2", "x"), opDel("a")}}, nil) // 5
	f.put("c", "1")                                                                                                // 6

	cases := []struct {
		name     string
		key, end string
		from     int64
		limit    int
		want     string
		wantErr  error
	}{
		{"all from 1", "\x00", "\x00", 1, 0, "[PUT a@2 PUT b/1@3 PUT a@4 PUT b/2@5 DELETE a@5 PUT c@6]", nil},
		{"from 0 means 1", "\x00", "\x00", 0, 0, "[PUT a@2 PUT b/1@3 PUT a@4 PUT b/2@5 DELETE a@5 PUT c@6]", nil},
		{"single key", "a", "", 1, 0, "[PUT a@2 PUT a@4 DELETE a@5]", nil},
		{"prefix", "b/", "b0", 1, 0, "[PUT b/1@3 PUT b/2@5]", nil},
		{"from revision", "\x00", "\x00", 5, 0, "[PUT b/2@5 DELETE a@5 PUT c@6]", nil},
		{"future revision gives none", "\x00", "\x00", 7, 0, "[]", nil},
		{"limit", "\x00", "\x00", 1, 2, "[PUT a@2 PUT b/1@3]", nil},
		{"limit never splits a revision", "\x00", "\x00", 4, 2, "[PUT a@4 PUT b/2@5 DELETE a@5]", nil},
		{"limit below one revision returns it whole", "\x00", "\x00", 5, 1, "[PUT b/2@5 DELETE a@5]", nil},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			evs, err := f.Events([]byte(tc.key), []byte(tc.end), tc.from, tc.limit)
			wantErr(t, err, tc.wantErr)
			if got := fmt.Sprint(evSummary(evs)); got != tc.want {
				t.Fatalf("events %s, want %s", got, tc.want)
			}
		})
	}
	t.Run("prev_kv", func(t *testing.T) {
		evs, _ := f.Events([]byte("a"), nil, 4, 0)
		if string(evs[0].PrevKv.GetValue()) != "1" || string(evs[1].PrevKv.GetValue()) != "2" || evs[1].Kv.Value != nil {
			t.Fatalf("events %v", evs)
		}
		evs[0].PrevKv = nil // caller owns the messages
		again, _ := f.Events([]byte("a"), nil, 4, 0)
		if again[0].PrevKv == nil {
			t.Fatal("Events shares its messages with the history")
		}
	})
}

func TestCompact(t *testing.T) {
	f := newTestFSM(t)
	for i := range 5 {
		f.put("k", fmt.Sprint(i)) // revisions 2..6
	}
	cases := []struct {
		name        string
		rev         int64
		wantErr     error
		wantCompact int64
	}{
		{"future", 7, ErrFutureRevision, 0},
		{"compact to 3", 3, nil, 3},
		{"again at 3", 3, ErrCompacted, 3},
		{"below", 2, ErrCompacted, 3},
		{"to current", 6, nil, 6},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r, err := f.do(pb.CommandType_COMMAND_COMPACT, &pb.CompactRequest{Revision: tc.rev}, nil)
			wantErr(t, err, tc.wantErr)
			if f.CompactRevision() != tc.wantCompact || r.Revision != 6 || f.Revision() != 6 {
				t.Fatalf("compact %d revision %d", f.CompactRevision(), f.Revision())
			}
			checkInvariants(t, f.FSM)
		})
	}
	f.put("k", "x") // 7
	if _, err := f.Events([]byte("k"), nil, 6, 0); !isErr(err, ErrCompacted) {
		t.Fatalf("events at the compact revision: %v", err)
	}
	if evs, err := f.Events([]byte("k"), nil, 7, 0); err != nil || len(evs) != 1 {
		t.Fatalf("events after compaction: %v %v", evs, err)
	}
}

func TestHistoryIsBounded(t *testing.T) {
	f := newTestFSM(t)
	f.histRevs = 10
	for i := range 25 {
		f.put(fmt.Sprint("k", i%3), "v")
	}
	// revisions 2..26: the last 10 (17..26) keep their events.
	if f.Revision() != 26 || f.CompactRevision() != 16 {
		t.Fatalf("revision %d compact %d", f.Revision(), f.CompactRevision())
	}
	if _, err := f.Events([]byte{0}, []byte{0}, 16, 0); !isErr(err, ErrCompacted) {
		t.Fatalf("err %v", err)
	}
	evs, err := f.Events([]byte{0}, []byte{0}, 17, 0)
	if err != nil || len(evs) != 10 || evs[0].Kv.ModRevision != 17 {
		t.Fatalf("events %v %v", evSummary(evs), err)
	}
	checkInvariants(t, f.FSM)
}

func TestHistoryBytesBound(t *testing.T) {
	f := newTestFSM(t)
	f.histBytes = 1000
	val := string(make([]byte, 300))
	for range 10 {
		f.put("k", val) // each revision ~ 64+1+300 (+prev 301) bytes
	}
	f.mu.RLock()
	size, groups := f.histSize, len(f.hist)
	f.mu.RUnlock()
	if size > 1000 || groups < 1 || f.CompactRevision() != f.Revision()-int64(groups) {
		t.Fatalf("history %d bytes in %d revisions, compact %d revision %d", size, groups, f.CompactRevision(), f.Revision())
	}
	// A single revision bigger than the bound is kept.
	f.put("big", string(make([]byte, 5000)))
	if evs, err := f.Events([]byte("big"), nil, f.Revision(), 0); err != nil || len(evs) != 1 {
		t.Fatalf("latest revision lost: %v %v", evs, err)
	}
	checkInvariants(t, f.FSM)
	g := New(nil)
	if err := restore(g, mustSnapshot(t, f.FSM)); err != nil {
		t.Fatal(err)
	}
	if g.histSize != f.histSize {
		t.Fatalf("restored history size %d, want %d", g.histSize, f.histSize)
	}
}

// TestRangeAtRevision (issue 37, `raftps kv get --rev`): Range with a
// revision reads the keys as they were then (values, deletions, keys
// created later absent, limit, count and keys_only applied), refuses a
// compacted revision with ErrCompacted and a future one with
// ErrFutureRevision, and a range inside a txn refuses a revision.
func TestRangeAtRevision(t *testing.T) {
	f := newTestFSM(t)
	r1 := f.put("/r/a", "1").Header.Revision
	f.put("/r/b", "1")
	r2 := f.put("/r/a", "2").Header.Revision
	if _, err := f.do(pb.CommandType_COMMAND_DELETE_RANGE, &pb.DeleteRangeRequest{Key: []byte("/r/b")}, nil); err != nil {
		t.Fatal(err)
	}
	f.put("/r/c", "1")
	at := func(rev int64, extra func(*pb.RangeRequest)) (string, int64, bool, error) {
		req := &pb.RangeRequest{Key: []byte("/r/"), RangeEnd: []byte("/r0"), Revision: rev}
		if extra != nil {
			extra(req)
		}
		resp, err := f.Range(req)
		if err != nil {
			return "", 0, false, err
		}
		var s []string
		for _, kv := range resp.Kvs {
			s = append(s, fmt.Sprintf("%s=%s@%d", kv.Key, kv.Value, kv.ModRevision))
		}
		if resp.Header.Revision != f.Revision() {
			t.Errorf("header revision %d, store %d", resp.Header.Revision, f.Revision())
		}
		return strings.Join(s, " "), resp.Count, resp.More, nil
	}
	for _, c := range []struct {
		rev   int64
		extra func(*pb.RangeRequest)
		want  string
		count int64
		more  bool
	}{
		{r1, nil, fmt.Sprintf("/r/a=1@%d", r1), 1, false},
		{r1 + 1, nil, fmt.Sprintf("/r/a=1@%d /r/b=1@%d", r1, r1+1), 2, false},
		{r2, nil, fmt.Sprintf("/r/a=2@%d /r/b=1@%d", r2, r1+1), 2, false},
		{r2 + 1, nil, fmt.Sprintf("/r/a=2@%d", r2), 1, false},
		{0, nil, fmt.Sprintf("/r/a=2@%d /r/c=1@%d", r2, r2+2), 2, false},
		{r2, func(r *pb.RangeRequest) { r.Limit = 1 }, fmt.Sprintf("/r/a=2@%d", r2), 2, true},
		{r2, func(r *pb.RangeRequest) { r.KeysOnly = true }, fmt.Sprintf("/r/a=@%d /r/b=@%d", r2, r1+1), 2, false},
		{r2, func(r *pb.RangeRequest) { r.CountOnly = true }, "", 2, false},
	} {
		got, count, more, err := at(c.rev, c.extra)
		if err != nil || got != c.want || count != c.count || more != c.more {
			t.Errorf("range at %d: %q count %d more %v, %v; want %q count %d more %v", c.rev, got, count, more, err, c.want, c.count, c.more)
		}
	}
	if _, _, _, err := at(f.Revision()+1, nil); !errors.Is(err, ErrFutureRevision) {
		t.Errorf("range at a future revision: %v, want ErrFutureRevision", err)
	}
	if _, err := f.do(pb.CommandType_COMMAND_COMPACT, &pb.CompactRequest{Revision: r2}, nil); err != nil {
		t.Fatal(err)
	}
	if _, _, _, err := at(r1, nil); !errors.Is(err, ErrCompacted) {
		t.Errorf("range at a compacted revision: %v, want ErrCompacted", err)
	}
	if got, _, _, err := at(r2, nil); err != nil || got != fmt.Sprintf("/r/a=2@%d /r/b=1@%d", r2, r1+1) {
		t.Errorf("range at the compact revision: %q, %v", got, err)
	}
	txn := &pb.TxnRequest{Success: []*pb.RequestOp{{Request: &pb.RequestOp_RequestRange{RequestRange: &pb.RangeRequest{Key: []byte("/r/a"), Revision: r2}}}}}
	if _, err := f.do(pb.CommandType_COMMAND_TXN, txn, nil); !errors.Is(err, ErrInvalid) {
		t.Errorf("txn range at a revision: %v, want ErrInvalid", err)
	}
	if _, err := f.Range(&pb.RangeRequest{Key: []byte("/r/a"), Revision: -1}); !errors.Is(err, ErrInvalid) {
		t.Errorf("range at revision -1: %v, want ErrInvalid", err)
	}
}
