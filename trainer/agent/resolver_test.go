package agent

import (
	"bytes"
	"context"
	"maps"
	"testing"

	pb "github.com/raftps/raftps/api/raftpspb"
	"github.com/raftps/raftps/pserver/psclient"
	"github.com/raftps/raftps/schema"
)

// rangeMeta is a Meta that answers Range from kvs (by key prefix); its
// other methods are not called.
type rangeMeta struct {
	Meta
	kvs []*pb.KeyValue
}

func (m rangeMeta) Range(_ context.Context, req *pb.RangeRequest) (*pb.RangeResponse, error) {
	out := &pb.RangeResponse{}
	for _, kv := range m.kvs {
		if bytes.Compare(kv.Key, req.Key) >= 0 && bytes.Compare(kv.Key, req.RangeEnd) < 0 {
			out.Kvs = append(out.Kvs, kv)
		}
	}
	return out, nil
}

// TestResolverTargets (issue 34, trainers carry the epoch they
// resolved): the trainer agent's resolver gives a slot whose replica
// record names the claim's holder as primary the record's epoch (its
// mod_revision); an unreplicated slot, or one whose record names another
// node than the claim (a restore not yet recorded), epoch 0 (not
// checked); a slot with a record but no claim (the promotion deleted the
// old primary's claim) the record's primary at its epoch.
func TestResolverTargets(t *testing.T) {
	claim := func(slot int32, addr string) *pb.KeyValue {
		return &pb.KeyValue{Key: []byte(schema.SlotKey("j", slot)), Value: schema.SlotRecord{Node: addr, Addr: addr}.Marshal(), ModRevision: 3}
	}
	record := func(slot int32, addr string, epoch int64) *pb.KeyValue {
		return &pb.KeyValue{Key: []byte(schema.ReplicaKey("j", slot)), ModRevision: epoch,
			Value: schema.ReplicaRecord{Primary: schema.ReplicaMember{Node: addr, Addr: addr}}.Marshal()}
	}
	r := &resolver{meta: rangeMeta{kvs: []*pb.KeyValue{
		claim(0, "a:1"), record(0, "a:1", 7), // replicated, primary holds the claim
		claim(1, "a:1"),                       // unreplicated
		record(2, "b:1", 9),                   // promoted, not claimed yet
		claim(3, "c:1"), record(3, "d:1", 11), // the claim's holder is not the record's primary
		record(4, "", 12), // a record with no primary address names nothing
		{Key: []byte(schema.ReplicaKey("other", 0)), ModRevision: 5, Value: schema.ReplicaRecord{Primary: schema.ReplicaMember{Node: "x", Addr: "x:1"}}.Marshal()},
	}}}
	got, err := r.Targets(context.Background(), "j")
	if err != nil {
		t.Fatal(err)
	}
	want := map[int32]psclient.Target{0: {Addr: "a:1", Epoch: 7}, 1: {Addr: "a:1"}, 2: {Addr: "b:1", Epoch: 9}, 3: {Addr: "c:1"}}
	if !maps.Equal(got, want) {
		t.Fatalf("Targets = %v, want %v", got, want)
	}
	addrs, err := r.Slots(context.Background(), "j")
	if err != nil || !maps.Equal(addrs, map[int32]string{0: "a:1", 1: "a:1", 2: "b:1", 3: "c:1"}) {
		t.Fatalf("Slots = %v, %v", addrs, err)
	}
}
