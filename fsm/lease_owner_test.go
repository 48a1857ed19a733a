package fsm

import (
	"errors"
	"math"
	"testing"

	pb "github.com/raftps/raftps/api/raftpspb"
)

// grantReq applies a lease grant and returns its id or error.
func (f *testFSM) grantReq(req *pb.LeaseGrantRequest) (int64, error) {
	f.tb.Helper()
	resp := &pb.LeaseGrantResponse{}
	_, err := f.do(pb.CommandType_COMMAND_LEASE_GRANT, req, resp)
	return resp.Id, err
}

// TestLeaseOwnerSurvivesSnapshot (issue 32 hole 7): a lease's owner is
// replicated state: it survives a snapshot and a restore; a lease without
// one stays without; an older snapshot's lease record (id, ttl only)
// restores with no owner (node's and admin's only).
func TestLeaseOwnerSurvivesSnapshot(t *testing.T) {
	f := newTestFSM(t)
	owned, err := f.grantReq(&pb.LeaseGrantRequest{Ttl: 5, Owner: "trainer/ta/job-a"})
	if err != nil {
		t.Fatal(err)
	}
	bare := f.grant(0, 5)
	g := New(testLogger(t))
	if err := restore(g, mustSnapshot(t, f.FSM)); err != nil {
		t.Fatal(err)
	}
	if info, ok := g.Lease(owned); !ok || info.Owner != "trainer/ta/job-a" || info.TTL != 5 {
		t.Fatalf("restored lease %d: %+v %v, want owner trainer/ta/job-a", owned, info, ok)
	}
	if o, ok := g.LeaseOwner(bare); !ok || o != "" {
		t.Fatalf("restored lease %d: owner %q %v, want none", bare, o, ok)
	}
	// An older snapshot: lease records of id and ttl only.
	old := New(testLogger(t))
	if err := restore(old, seal(snapBody(rec(tagMeta, 0, 5, 0, 8), rec(tagLease, 7, 30)))); err != nil {
		t.Fatal(err)
	}
	if o, ok := old.LeaseOwner(7); !ok || o != "" {
		t.Fatalf("older snapshot's lease 7: owner %q %v, want present with none", o, ok)
	}
	// An owner past MaxLeaseOwner is refused, by the grant and by Restore.
	long := string(make([]byte, MaxLeaseOwner+1))
	if _, err := f.grantReq(&pb.LeaseGrantRequest{Ttl: 5, Owner: long}); !errors.Is(err, ErrInvalid) {
		t.Fatalf("grant with a %d-byte owner: %v, want ErrInvalid", len(long), err)
	}
	body := append(appendUvarint(appendUvarint(nil, 7), 30), long...)
	bad := append(appendUvarint([]byte{tagLease}, uint64(len(body))), body...)
	if err := restore(New(testLogger(t)), seal(snapBody(rec(tagMeta, 0, 5, 0, 8), bad))); !errors.Is(err, ErrMalformed) {
		t.Fatalf("snapshot with a %d-byte owner: %v, want ErrMalformed", len(long), err)
	}
}

// TestLeaseRandomIDCollision: a proposer's random id taken by another
// lease moves to the next free id above it, wrapping past math.MaxInt64
// to 1, so every replica grants the same; a client's own id in use stays
// ErrLeaseExists.
func TestLeaseRandomIDCollision(t *testing.T) {
	f := newTestFSM(t)
	if id := f.grant(1000, 5); id != 1000 {
		t.Fatalf("grant 1000: %d", id)
	}
	f.grant(1001, 5)
	id, err := f.grantReq(&pb.LeaseGrantRequest{Ttl: 5, Id: 1000, RandomId: true})
	if err != nil || id != 1002 {
		t.Fatalf("random id 1000 taken: id %d err %v, want 1002", id, err)
	}
	f.grant(math.MaxInt64, 5)
	f.grant(1, 5)
	id, err = f.grantReq(&pb.LeaseGrantRequest{Ttl: 5, Id: math.MaxInt64, RandomId: true})
	if err != nil || id != 2 {
		t.Fatalf("random id MaxInt64 taken (and 1): id %d err %v, want 2", id, err)
	}
	if _, err := f.grantReq(&pb.LeaseGrantRequest{Ttl: 5, Id: 1000}); !errors.Is(err, ErrLeaseExists) {
		t.Fatalf("client id 1000 taken: %v, want ErrLeaseExists", err)
	}
}

// TestLeaseOwnerLimit: with owner_limit, an owner holding that many
// leases is refused ErrTooManyLeases; other owners and ungated grants are
// not, and a revoke frees a place.
func TestLeaseOwnerLimit(t *testing.T) {
	f := newTestFSM(t)
	req := &pb.LeaseGrantRequest{Ttl: 5, Owner: "trainer/ta/job-a", OwnerLimit: 2}
	var ids []int64
	for range 2 {
		id, err := f.grantReq(req)
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, id)
	}
	if _, err := f.grantReq(req); !errors.Is(err, ErrTooManyLeases) {
		t.Fatalf("third lease of a limit of 2: %v, want ErrTooManyLeases", err)
	}
	if _, err := f.grantReq(&pb.LeaseGrantRequest{Ttl: 5, Owner: "trainer/tb/job-b", OwnerLimit: 2}); err != nil {
		t.Fatalf("another owner: %v", err)
	}
	if _, err := f.do(pb.CommandType_COMMAND_LEASE_REVOKE, &pb.LeaseRevokeRequest{Id: ids[0]}, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := f.grantReq(req); err != nil {
		t.Fatalf("after a revoke: %v", err)
	}
}
