package fsm

import (
	"errors"
	"math"
	"slices"
	"testing"
	"time"

	"google.golang.org/grpc/codes"

	pb "github.com/raftps/raftps/api/raftpspb"
)

func TestLeaseGrant(t *testing.T) {
	f := newTestFSM(t)
	cases := []struct {
		name    string
		req     *pb.LeaseGrantRequest
		wantErr error
		wantID  int64
	}{
		{"auto id starts at 1", &pb.LeaseGrantRequest{Ttl: 5}, nil, 1},
		{"explicit id", &pb.LeaseGrantRequest{Id: 3, Ttl: 5}, nil, 3},
		{"auto id continues", &pb.LeaseGrantRequest{Ttl: 5}, nil, 2},
		{"auto id skips used ids", &pb.LeaseGrantRequest{Ttl: 5}, nil, 4},
		{"explicit id in use", &pb.LeaseGrantRequest{Id: 3, Ttl: 5}, ErrLeaseExists, 0},
		{"zero ttl", &pb.LeaseGrantRequest{Ttl: 0}, ErrInvalid, 0},
		{"negative ttl", &pb.LeaseGrantRequest{Ttl: -1}, ErrInvalid, 0},
		{"negative id", &pb.LeaseGrantRequest{Id: -4, Ttl: 5}, ErrInvalid, 0},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			resp := &pb.LeaseGrantResponse{}
			r, err := f.do(pb.CommandType_COMMAND_LEASE_GRANT, tc.req, resp)
			wantErr(t, err, tc.wantErr)
			if r.Revision != 1 || f.Revision() != 1 {
				t.Fatalf("grant changed revision to %d", f.Revision())
			}
			if err != nil {
				return
			}
			if resp.Id != tc.wantID || resp.Ttl != tc.req.Ttl || resp.Header.GetRevision() != 1 {
				t.Fatalf("resp %v", resp)
			}
			if info, ok := f.Lease(tc.wantID); !ok || info.TTL != tc.req.Ttl || len(info.Keys) != 0 {
				t.Fatalf("Lease(%d) = %v %v", tc.wantID, info, ok)
			}
		})
	}
	var ids []int64
	for _, l := range f.Leases() {
		ids = append(ids, l.ID)
	}
	if !slices.Equal(ids, []int64{1, 2, 3, 4}) {
		t.Fatalf("leases %v", ids)
	}
}

func TestLeaseKeys(t *testing.T) {
	f := newTestFSM(t)
	a, b := f.grant(0, 10), f.grant(0, 20)
	f.putLease("k1", "1", a)
	f.putLease("k2", "2", a)
	f.putLease("k3", "3", b)
	f.putLease("k4", "4", a)
	f.put("free", "x")

	t.Run("keys listed sorted", func(t *testing.T) {
		info, _ := f.Lease(a)
		if got := keysOfBytes(info.Keys); !slices.Equal(got, []string{"k1", "k2", "k4"}) {
			t.Fatalf("keys %q", got)
		}
	})
	t.Run("re-put moves the key to the new lease", func(t *testing.T) {
		f.putLease("k4", "4b", b)
		ia, _ := f.Lease(a)
		ib, _ := f.Lease(b)
		if !slices.Equal(keysOfBytes(ia.Keys), []string{"k1", "k2"}) || !slices.Equal(keysOfBytes(ib.Keys), []string{"k3", "k4"}) {
			t.Fatalf("a %q b %q", keysOfBytes(ia.Keys), keysOfBytes(ib.Keys))
		}
	})
	t.Run("put without lease detaches", func(t *testing.T) {
		f.put("k2", "2b")
		ia, _ := f.Lease(a)
		if !slices.Equal(keysOfBytes(ia.Keys), []string{"k1"}) || f.get("k2").Lease != 0 {
			t.Fatalf("a %q", keysOfBytes(ia.Keys))
		}
	})
	t.Run("delete detaches", func(t *testing.T) {
		f.do(pb.CommandType_COMMAND_DELETE_RANGE, &pb.DeleteRangeRequest{Key: []byte("k3")}, nil)
		ib, _ := f.Lease(b)
		if !slices.Equal(keysOfBytes(ib.Keys), []string{"k4"}) {
			t.Fatalf("b %q", keysOfBytes(ib.Keys))
		}
	})
	t.Run("revoke deletes attached keys in one revision", func(t *testing.T) {
		f.putLease("k5", "5", b)
		before := f.Revision()
		resp := &pb.LeaseRevokeResponse{}
		if _, err := f.do(pb.CommandType_COMMAND_LEASE_REVOKE, &pb.LeaseRevokeRequest{Id: b}, resp); err != nil {
			t.Fatal(err)
		}
		if f.Revision() != before+1 || resp.Header.Revision != before+1 {
			t.Fatalf("revision %d, header %v", f.Revision(), resp.Header)
		}
		if _, ok := f.Lease(b); ok {
			t.Fatal("lease still there")
		}
		if f.get("k4") != nil || f.get("k5") != nil || f.get("k1") == nil || f.get("free") == nil {
			t.Fatal("wrong keys deleted")
		}
		evs, _ := f.Events([]byte("k"), []byte{0}, before+1, 0)
		if len(evs) != 2 || string(evs[0].Kv.Key) != "k4" || string(evs[1].Kv.Key) != "k5" {
			t.Fatalf("events %v", evs)
		}
		for _, ev := range evs {
			if ev.Type != pb.Event_DELETE || ev.Kv.ModRevision != before+1 || ev.PrevKv.GetLease() != b {
				t.Fatalf("event %v", ev)
			}
		}
		checkInvariants(t, f.FSM)
	})
	t.Run("revoke of a lease without keys keeps the revision", func(t *testing.T) {
		c := f.grant(0, 1)
		before := f.Revision()
		if _, err := f.do(pb.CommandType_COMMAND_LEASE_REVOKE, &pb.LeaseRevokeRequest{Id: c}, nil); err != nil {
			t.Fatal(err)
		}
		if f.Revision() != before {
			t.Fatalf("revision %d", f.Revision())
		}
	})
	t.Run("revoke unknown", func(t *testing.T) {
		_, err := f.do(pb.CommandType_COMMAND_LEASE_REVOKE, &pb.LeaseRevokeRequest{Id: 12345}, nil)
		wantErr(t, err, ErrLeaseNotFound)
	})
	t.Run("put on revoked lease", func(t *testing.T) {
		_, err := f.do(pb.CommandType_COMMAND_PUT, &pb.PutRequest{Key: []byte("z"), Lease: b}, nil)
		wantErr(t, err, ErrLeaseNotFound)
	})
	t.Run("revoked id is not reused by auto ids", func(t *testing.T) {
		if id := f.grant(0, 1); id <= b {
			t.Fatalf("id %d after revoking %d", id, b)
		}
	})
}

func keysOfBytes(keys [][]byte) []string {
	var out []string
	for _, k := range keys {
		out = append(out, string(k))
	}
	return out
}

func TestLeaseAutoIDWraps(t *testing.T) {
	f := newTestFSM(t)
	f.grant(math.MaxInt64, 1)
	f.grant(1, 1)
	f.mu.Lock()
	f.nextLease = math.MaxInt64 - 1
	f.mu.Unlock()
	for _, want := range []int64{math.MaxInt64 - 1, 2, 3} {
		if got := f.grant(0, 1); got != want {
			t.Fatalf("id %d, want %d", got, want)
		}
	}
}

// TestLeaseGrantTTLBound is issue 12 item 12: a TTL above ~9.2e9 s
// overflowed time.Duration(ttl)*time.Second, so the grant succeeded with a
// deadline already past and the lease was revoked at once. The FSM refuses
// TTLs above MaxLeaseTTL (etcd's 9e9 s) with ErrLeaseTTLTooLarge
// (InvalidArgument) and changes nothing; MaxLeaseTTL itself is granted.
// Before the fix every case below was granted.
func TestLeaseGrantTTLBound(t *testing.T) {
	f := newTestFSM(t)
	for _, ttl := range []int64{MaxLeaseTTL + 1, 9_300_000_000, math.MaxInt64} {
		before := dumpState(t, f.FSM)
		_, err := f.do(pb.CommandType_COMMAND_LEASE_GRANT, &pb.LeaseGrantRequest{Ttl: ttl}, nil)
		if !errors.Is(err, ErrLeaseTTLTooLarge) || Code(err) != codes.InvalidArgument {
			t.Fatalf("grant ttl %d: %v (code %v), want ErrLeaseTTLTooLarge / InvalidArgument", ttl, err, Code(err))
		}
		after := dumpState(t, f.FSM)
		after.Applied = before.Applied
		if !equalDump(before, after) {
			t.Fatalf("refused grant of ttl %d changed the state", ttl)
		}
	}
	if id := f.grant(0, MaxLeaseTTL); id == 0 {
		t.Fatal("MaxLeaseTTL not granted")
	}
	if d := time.Duration(MaxLeaseTTL) * time.Second; d <= 0 {
		t.Fatalf("MaxLeaseTTL seconds overflow a Duration: %v", d)
	}
}
