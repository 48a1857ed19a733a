package fsm

import (
	"fmt"
	"maps"
	"math"
	"slices"

	pb "github.com/raftps/raftps/api/raftpspb"
)

// lease is the replicated part of a lease: its id, granted TTL, owner and
// the keys attached to it. Expiry is the leader's business (raftstore): it
// revokes through Raft.
type lease struct {
	ttl   int64
	owner string
	keys  map[string]struct{}
}

// MaxLeaseOwner bounds LeaseGrantRequest.owner, in bytes.
const MaxLeaseOwner = 512

// LeaseInfo describes one lease.
type LeaseInfo struct {
	ID int64
	// TTL is the granted time to live, in seconds.
	TTL int64
	// Owner is the identity that granted it (LeaseGrantRequest.owner);
	// empty for a node's own lease, an insecure cluster's, and every lease
	// of a snapshot or log written before owners were recorded.
	Owner string
	// Keys attached to the lease, sorted.
	Keys [][]byte
}

func (f *FSM) attach(id int64, key []byte) {
	if id == 0 {
		return
	}
	if l, ok := f.leases[id]; ok {
		l.keys[string(key)] = struct{}{}
	}
}

func (f *FSM) detach(id int64, key []byte) {
	if id == 0 {
		return
	}
	if l, ok := f.leases[id]; ok {
		delete(l.keys, string(key))
	}
}

func (f *FSM) leaseInfo(id int64, l *lease) LeaseInfo {
	info := LeaseInfo{ID: id, TTL: l.ttl, Owner: l.owner}
	for _, k := range slices.Sorted(maps.Keys(l.keys)) {
		info.Keys = append(info.Keys, []byte(k))
	}
	return info
}

// Leases returns every lease with its attached keys, sorted by ID.
func (f *FSM) Leases() []LeaseInfo {
	f.mu.RLock()
	defer f.mu.RUnlock()
	out := make([]LeaseInfo, 0, len(f.leases))
	for _, id := range slices.Sorted(maps.Keys(f.leases)) {
		out = append(out, f.leaseInfo(id, f.leases[id]))
	}
	return out
}

// LeaseOwner returns lease id's owner and whether the lease exists.
func (f *FSM) LeaseOwner(id int64) (string, bool) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	l, ok := f.leases[id]
	if !ok {
		return "", false
	}
	return l.owner, true
}

// Lease returns lease id and whether it exists.
func (f *FSM) Lease(id int64) (LeaseInfo, bool) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	l, ok := f.leases[id]
	if !ok {
		return LeaseInfo{}, false
	}
	return f.leaseInfo(id, l), true
}

// applyLeaseGrant creates a lease owned by req.Owner. TTL <= 0, a negative
// id or an owner over MaxLeaseOwner bytes is ErrInvalid; a TTL above
// MaxLeaseTTL (9e9 s, etcd's bound, so that TTL x time.Second and a
// deadline computed from it cannot overflow) is ErrLeaseTTLTooLarge; with
// req.OwnerLimit > 0, an owner that holds that many leases already gets
// ErrTooManyLeases. Id 0 takes the next free id of a counter kept in the
// state (entries of older proposers); a RandomId taken by another lease
// moves to the next free id above it, wrapping to 1 (the same on every
// replica); a client's id in use is ErrLeaseExists. A grant does not change
// the store revision (as in etcd).
func (f *FSM) applyLeaseGrant(c *applyCtx, req *pb.LeaseGrantRequest) (*pb.LeaseGrantResponse, error) {
	if req.Ttl <= 0 {
		return nil, fmt.Errorf("%w: lease grant: ttl %d", ErrInvalid, req.Ttl)
	}
	if req.Ttl > MaxLeaseTTL {
		return nil, fmt.Errorf("%w: lease grant: ttl %d s, at most %d s", ErrLeaseTTLTooLarge, req.Ttl, MaxLeaseTTL)
	}
	if len(f.leases) >= f.maxLeases {
		return nil, fmt.Errorf("%w: lease grant: %d leases exist (at most %d); revoke leases or reuse one", ErrQuotaExceeded, len(f.leases), f.maxLeases)
	}
	if len(req.Owner) > MaxLeaseOwner {
		return nil, fmt.Errorf("%w: lease grant: owner of %d bytes, at most %d", ErrInvalid, len(req.Owner), MaxLeaseOwner)
	}
	if req.OwnerLimit > 0 {
		if held := f.leasesOf[req.Owner]; held >= int(req.OwnerLimit) {
			return nil, fmt.Errorf("%w: lease grant: %s holds %d leases, the limit of its role; revoke or let some expire",
				ErrTooManyLeases, req.Owner, held)
		}
	}
	id := req.Id
	switch {
	case id < 0:
		return nil, fmt.Errorf("%w: lease grant: negative id %d", ErrInvalid, id)
	case id == 0:
		id = f.freeLeaseFrom(&f.nextLease)
	case req.RandomId:
		id = f.freeLeaseFrom(&id)
	default:
		if _, used := f.leases[id]; used {
			return nil, fmt.Errorf("%w: lease grant: id %d", ErrLeaseExists, id)
		}
	}
	f.leases[id] = &lease{ttl: req.Ttl, owner: req.Owner, keys: map[string]struct{}{}}
	f.leasesOf[req.Owner]++
	c.note.LeasesGranted = append(c.note.LeasesGranted, LeaseInfo{ID: id, TTL: req.Ttl, Owner: req.Owner})
	return &pb.LeaseGrantResponse{Header: &pb.ResponseHeader{Revision: f.rev}, Id: id, Ttl: req.Ttl}, nil
}

// freeLeaseFrom returns the first id >= *next not in use (wrapping from
// math.MaxInt64 to 1) and leaves *next one past it.
func (f *FSM) freeLeaseFrom(next *int64) int64 {
	for {
		if *next <= 0 { // wrapped around math.MaxInt64
			*next = 1
		}
		if _, used := f.leases[*next]; !used {
			break
		}
		*next++
	}
	id := *next
	if *next < math.MaxInt64 {
		*next++
	} else {
		*next = 1
	}
	return id
}

// applyLeaseRevoke deletes the lease and every key attached to it, as one
// revision (DELETE events in key order); a lease without keys does not
// change the revision. An unknown id is ErrLeaseNotFound.
func (f *FSM) applyLeaseRevoke(c *applyCtx, req *pb.LeaseRevokeRequest) (*pb.LeaseRevokeResponse, error) {
	l, ok := f.leases[req.Id]
	if !ok {
		return nil, fmt.Errorf("%w: lease revoke: id %d", ErrLeaseNotFound, req.Id)
	}
	w := f.begin()
	resp := &pb.LeaseRevokeResponse{Header: w.header()}
	for _, k := range slices.Sorted(maps.Keys(l.keys)) {
		if kv, ok := f.get([]byte(k)); ok {
			w.deleteKey(kv)
		}
	}
	delete(f.leases, req.Id)
	if f.leasesOf[l.owner]--; f.leasesOf[l.owner] <= 0 {
		delete(f.leasesOf, l.owner)
	}
	w.end()
	c.note.LeasesRevoked = append(c.note.LeasesRevoked, req.Id)
	return resp, nil
}
