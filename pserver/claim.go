package pserver

import (
	"context"
	"fmt"

	pb "github.com/raftps/raftps/api/raftpspb"
	"github.com/raftps/raftps/schema"
)

// Meta is the part of the metadata store (raftstore) a pserver needs:
// etcd-style Txn, Range, Watch and leases. It is implemented by the
// raftstore-based node code; check with var _ pserver.Meta = (*X)(nil).
type Meta interface {
	Txn(ctx context.Context, req *pb.TxnRequest) (*pb.TxnResponse, error)
	Range(ctx context.Context, req *pb.RangeRequest) (*pb.RangeResponse, error)
	Watch(ctx context.Context, req *pb.WatchRequest) (<-chan *pb.WatchResponse, error)
	LeaseGrant(ctx context.Context, req *pb.LeaseGrantRequest) (*pb.LeaseGrantResponse, error)
	LeaseKeepAlive(ctx context.Context, id int64) (ttl int64, err error)
}

// ClaimSlot claims slot `slot` of job for this node under lease:
//
//	Txn{ if create_revision(/jobs/<job>/ps/<slot>) == 0
//	     then put {node, addr, incarnation: 0} with lease
//	     else range the key }
//
// The incarnation is the key's create_revision, i.e. the revision of the
// claiming Txn; a second Txn (guarded by create_revision == incarnation)
// writes it into the value for readers. ok is false when another pserver
// holds the slot. A retried claim by the same node under the same lease
// (whose first reply was lost) returns ok with the existing incarnation.
//
// Fencing: the claim lives as long as the lease; if the lease expires the
// key is deleted and another node may claim it with a higher create
// revision. Every later write this pserver makes for the slot (checkpoint
// pointers) must include FenceCompare(job, slot, incarnation) in its Txn, so
// a pserver that lost its lease cannot write; and the node must Fence() the
// Slot as soon as its keepalive fails.
func ClaimSlot(ctx context.Context, meta Meta, job string, slot int32, node, addr string, lease int64) (incarnation int64, ok bool, err error) {
	k := []byte(schema.SlotKey(job, slot))
	v := schema.SlotRecord{Node: node, Addr: addr}.Marshal()
	resp, err := meta.Txn(ctx, &pb.TxnRequest{
		Compare: []*pb.Compare{{Target: pb.Compare_CREATE, Result: pb.Compare_EQUAL, Key: k,
			TargetUnion: &pb.Compare_CreateRevision{CreateRevision: 0}}},
		Success: []*pb.RequestOp{{Request: &pb.RequestOp_RequestPut{RequestPut: &pb.PutRequest{Key: k, Value: v, Lease: lease}}}},
		Failure: []*pb.RequestOp{{Request: &pb.RequestOp_RequestRange{RequestRange: &pb.RangeRequest{Key: k}}}},
	})
	if err != nil {
		return 0, false, fmt.Errorf("claim %s: %w", k, err)
	}
	if !resp.GetSucceeded() {
		rr := resp.GetResponses()
		if len(rr) == 0 || len(rr[0].GetResponseRange().GetKvs()) == 0 {
			return 0, false, nil // deleted meanwhile; the caller retries later
		}
		kv := rr[0].GetResponseRange().GetKvs()[0]
		if cur, err := schema.ParseSlotRecord(kv.GetValue()); err == nil && cur.Node == node && kv.GetLease() == lease && lease != 0 {
			incarnation = kv.GetCreateRevision()
			if cur.Incarnation == incarnation {
				return incarnation, true, nil
			}
			return writeIncarnation(ctx, meta, k, node, addr, lease, incarnation)
		}
		return 0, false, nil
	}
	incarnation = resp.GetHeader().GetRevision()
	if incarnation == 0 {
		// The store did not report the revision: read it back.
		rr, err := meta.Range(ctx, &pb.RangeRequest{Key: k})
		if err != nil {
			return 0, false, fmt.Errorf("claim %s: read back: %w", k, err)
		}
		if len(rr.GetKvs()) == 0 {
			return 0, false, nil
		}
		incarnation = rr.GetKvs()[0].GetCreateRevision()
	}
	return writeIncarnation(ctx, meta, k, node, addr, lease, incarnation)
}

func writeIncarnation(ctx context.Context, meta Meta, k []byte, node, addr string, lease, inc int64) (int64, bool, error) {
	v := schema.SlotRecord{Node: node, Addr: addr, Incarnation: inc}.Marshal()
	resp, err := meta.Txn(ctx, &pb.TxnRequest{
		Compare: []*pb.Compare{FenceCompareKey(k, inc)},
		Success: []*pb.RequestOp{{Request: &pb.RequestOp_RequestPut{RequestPut: &pb.PutRequest{Key: k, Value: v, Lease: lease}}}},
	})
	if err != nil {
		return 0, false, fmt.Errorf("claim %s: write incarnation: %w", k, err)
	}
	if !resp.GetSucceeded() {
		return 0, false, nil // lost it between the two Txns
	}
	return inc, true, nil
}

// FenceCompare is the Txn compare that fences a write by the holder of
// incarnation: create_revision(/jobs/<job>/ps/<slot>) == incarnation. It
// fails once the claim's lease expired (key deleted) or another pserver
// re-claimed the slot.
func FenceCompare(job string, slot int32, incarnation int64) *pb.Compare {
	return FenceCompareKey([]byte(schema.SlotKey(job, slot)), incarnation)
}

// FenceCompareKey is FenceCompare for a raw slot key (schema.SlotKey).
func FenceCompareKey(k []byte, incarnation int64) *pb.Compare {
	return &pb.Compare{Target: pb.Compare_CREATE, Result: pb.Compare_EQUAL, Key: k,
		TargetUnion: &pb.Compare_CreateRevision{CreateRevision: incarnation}}
}
