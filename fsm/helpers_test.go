package fsm

import (
	"bytes"
	"errors"
	"log/slog"
	"slices"
	"testing"

	"github.com/hashicorp/raft"
	"google.golang.org/protobuf/proto"

	pb "github.com/raftps/raftps/api/raftpspb"
	"github.com/raftps/raftps/internal/testing/testutil"
)

// testFSM wraps an FSM with a log index counter.
type testFSM struct {
	*FSM
	tb    testing.TB
	index uint64
}

func testLogger(tb testing.TB) *slog.Logger { return testutil.LoggerLevel(tb, slog.LevelDebug) }

func newTestFSM(tb testing.TB) *testFSM {
	tb.Helper()
	return &testFSM{FSM: New(testLogger(tb)), tb: tb}
}

func mustCmd(tb testing.TB, t pb.CommandType, m proto.Message) *pb.Command {
	tb.Helper()
	c, err := NewCommand(t, m)
	if err != nil {
		tb.Fatal(err)
	}
	return c
}

func putCmd(tb testing.TB, k, v string) *pb.Command {
	return mustCmd(tb, pb.CommandType_COMMAND_PUT, &pb.PutRequest{Key: []byte(k), Value: []byte(v)})
}

// applyRaw applies data as the next log entry.
func (f *testFSM) applyRaw(data []byte) *ApplyResult {
	f.tb.Helper()
	f.index++
	r, ok := f.Apply(&raft.Log{Index: f.index, Term: 1, Type: raft.LogCommand, Data: data}).(*ApplyResult)
	if !ok {
		f.tb.Fatalf("Apply returned %T", r)
	}
	return r
}

// apply applies cmds as one entry stamped now and returns the results.
func (f *testFSM) apply(now int64, cmds ...*pb.Command) []*pb.Result {
	f.tb.Helper()
	data, err := EncodeEntry(now, cmds)
	if err != nil {
		f.tb.Fatal(err)
	}
	r := f.applyRaw(data)
	if r.Err != nil {
		f.tb.Fatalf("apply: %v", r.Err)
	}
	if len(r.Results) != len(cmds) {
		f.tb.Fatalf("%d results for %d commands", len(r.Results), len(cmds))
	}
	return r.Results
}

// do applies one command of type t and decodes its response into resp; it
// returns the command's error.
func (f *testFSM) do(t pb.CommandType, req, resp proto.Message) (*pb.Result, error) {
	f.tb.Helper()
	r := f.apply(0, mustCmd(f.tb, t, req))[0]
	if err := ResultError(r); err != nil {
		return r, err
	}
	if resp != nil {
		if err := proto.Unmarshal(r.Payload, resp); err != nil {
			f.tb.Fatalf("decode %T: %v", resp, err)
		}
	}
	return r, nil
}

func (f *testFSM) put(k, v string) *pb.PutResponse {
	f.tb.Helper()
	resp := &pb.PutResponse{}
	if _, err := f.do(pb.CommandType_COMMAND_PUT, &pb.PutRequest{Key: []byte(k), Value: []byte(v)}, resp); err != nil {
		f.tb.Fatalf("put %q: %v", k, err)
	}
	return resp
}

func (f *testFSM) putLease(k, v string, lease int64) {
	f.tb.Helper()
	if _, err := f.do(pb.CommandType_COMMAND_PUT, &pb.PutRequest{Key: []byte(k), Value: []byte(v), Lease: lease}, nil); err != nil {
		f.tb.Fatalf("put %q: %v", k, err)
	}
}

func (f *testFSM) grant(id, ttl int64) int64 {
	f.tb.Helper()
	resp := &pb.LeaseGrantResponse{}
	if _, err := f.do(pb.CommandType_COMMAND_LEASE_GRANT, &pb.LeaseGrantRequest{Id: id, Ttl: ttl}, resp); err != nil {
		f.tb.Fatalf("grant %d: %v", id, err)
	}
	return resp.Id
}

func (f *testFSM) get(k string) *pb.KeyValue {
	f.tb.Helper()
	resp, err := f.Range(&pb.RangeRequest{Key: []byte(k)})
	if err != nil {
		f.tb.Fatal(err)
	}
	if len(resp.Kvs) == 0 {
		return nil
	}
	return resp.Kvs[0]
}

func keysOf(kvs []*pb.KeyValue) []string {
	var out []string
	for _, kv := range kvs {
		out = append(out, string(kv.Key))
	}
	return out
}

// checkInvariants verifies the FSM's internal consistency.
func checkInvariants(tb testing.TB, f *FSM) {
	tb.Helper()
	f.mu.RLock()
	defer f.mu.RUnlock()
	if f.rev < 1 || f.compactRev < 0 || f.compactRev > f.rev {
		tb.Fatalf("revision %d compact %d", f.rev, f.compactRev)
	}
	var prev []byte
	leaseKeys := map[int64]int{}
	f.kvs.Ascend(func(kv *pb.KeyValue) bool {
		if prev != nil && bytes.Compare(prev, kv.Key) >= 0 {
			tb.Fatalf("keys out of order: %q then %q", prev, kv.Key)
		}
		prev = kv.Key
		if err := checkKV(kv, f.rev); err != nil {
			tb.Fatalf("bad kv: %v", err)
		}
		if kv.Lease != 0 {
			l, ok := f.leases[kv.Lease]
			if !ok {
				tb.Fatalf("key %q on missing lease %d", kv.Key, kv.Lease)
			}
			if _, ok := l.keys[string(kv.Key)]; !ok {
				tb.Fatalf("key %q not in lease %d's set", kv.Key, kv.Lease)
			}
			leaseKeys[kv.Lease]++
		}
		return true
	})
	for id, l := range f.leases {
		if len(l.keys) != leaseKeys[id] {
			tb.Fatalf("lease %d has %d keys, store %d", id, len(l.keys), leaseKeys[id])
		}
	}
	last := f.compactRev
	var size int64
	for _, g := range f.hist {
		size += g.size
		if g.size != eventsSize(g.events) {
			tb.Fatalf("history group %d size %d", g.rev, g.size)
		}
		if g.rev <= last || g.rev > f.rev || len(g.events) == 0 {
			tb.Fatalf("history group rev %d after %d (store %d), %d events", g.rev, last, f.rev, len(g.events))
		}
		for _, ev := range g.events {
			if ev.Kv.ModRevision != g.rev {
				tb.Fatalf("event mod_revision %d in group %d", ev.Kv.ModRevision, g.rev)
			}
		}
		last = g.rev
	}
	if size != f.histSize {
		tb.Fatalf("history size %d, groups sum to %d", f.histSize, size)
	}
}

// dump is a comparable rendering of the whole observable state.
type dump struct {
	Applied    uint64
	Rev        int64
	CompactRev int64
	KVs        []byte
	Leases     []LeaseInfo
	Events     []byte
	Jobs       []byte
	NextLease  int64
}

func dumpState(tb testing.TB, f *FSM) dump {
	tb.Helper()
	d := dump{Applied: f.AppliedIndex(), Rev: f.Revision(), CompactRev: f.CompactRevision(), Leases: f.Leases()}
	all, err := f.Range(&pb.RangeRequest{Key: []byte{0}, RangeEnd: []byte{0}})
	if err != nil {
		tb.Fatal(err)
	}
	d.KVs = mustMarshal(tb, all)
	evs, err := f.Events([]byte{0}, []byte{0}, f.CompactRevision()+1, 0)
	if err != nil {
		tb.Fatal(err)
	}
	d.Events = mustMarshal(tb, &pb.WatchResponse{Events: evs})
	d.Jobs = mustMarshal(tb, &pb.ListJobsResponse{Jobs: f.Jobs().Jobs()})
	f.mu.RLock()
	d.NextLease = f.nextLease
	f.mu.RUnlock()
	return d
}

func mustMarshal(tb testing.TB, m proto.Message) []byte {
	tb.Helper()
	b, err := proto.MarshalOptions{Deterministic: true}.Marshal(m)
	if err != nil {
		tb.Fatal(err)
	}
	return b
}

func equalDump(a, b dump) bool {
	if a.Applied != b.Applied || a.Rev != b.Rev || a.CompactRev != b.CompactRev || a.NextLease != b.NextLease ||
		!bytes.Equal(a.KVs, b.KVs) || !bytes.Equal(a.Events, b.Events) || !bytes.Equal(a.Jobs, b.Jobs) ||
		len(a.Leases) != len(b.Leases) {
		return false
	}
	for i := range a.Leases {
		x, y := a.Leases[i], b.Leases[i]
		if x.ID != y.ID || x.TTL != y.TTL || !slices.EqualFunc(x.Keys, y.Keys, bytes.Equal) {
			return false
		}
	}
	return true
}

func wantErr(tb testing.TB, err, want error) {
	tb.Helper()
	if want == nil {
		if err != nil {
			tb.Fatalf("unexpected error %v", err)
		}
		return
	}
	if !errors.Is(err, want) {
		tb.Fatalf("error %v, want %v", err, want)
	}
}

func isErr(err, target error) bool { return errors.Is(err, target) }

func protoUnmarshal(b []byte, m proto.Message) error { return proto.Unmarshal(b, m) }
