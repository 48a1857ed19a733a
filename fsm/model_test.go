package fsm

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"

	"github.com/hashicorp/raft"

	pb "github.com/raftps/raftps/api/raftpspb"
)

// model is a naive reference implementation of the key/value and lease
// semantics (maps and linear scans), to check the FSM against.
type model struct {
	rev    int64
	kvs    map[string]*pb.KeyValue
	leases map[int64]bool
	events []string // "PUT k@rev" / "DELETE k@rev"
}

func newModel() *model {
	return &model{rev: 1, kvs: map[string]*pb.KeyValue{}, leases: map[int64]bool{}}
}

func (m *model) put(rev int64, k, v string, lease int64) {
	kv := &pb.KeyValue{Key: []byte(k), Value: []byte(v), CreateRevision: rev, ModRevision: rev, Version: 1, Lease: lease}
	if old, ok := m.kvs[k]; ok {
		kv.CreateRevision, kv.Version = old.CreateRevision, old.Version+1
	}
	m.kvs[k] = kv
	m.events = append(m.events, fmt.Sprintf("PUT %s@%d", k, rev))
}

func (m *model) del(rev int64, keys []string) {
	for _, k := range keys {
		delete(m.kvs, k)
		m.events = append(m.events, fmt.Sprintf("DELETE %s@%d", k, rev))
	}
}

func (m *model) match(prefix string) []string {
	var out []string
	for _, k := range slices.Sorted(maps.Keys(m.kvs)) {
		if strings.HasPrefix(k, prefix) {
			out = append(out, k)
		}
	}
	return out
}

// FuzzModel interprets data as a program of key/value and lease operations
// over a tiny key space and checks the FSM against the model after every
// step: values, create/mod revisions, versions, leases, the revision, the
// event history, and errors. At the end the state must survive a snapshot
// round trip.
func FuzzModel(f *testing.F) {
	f.Add([]byte{0, 1, 2, 0x10, 0x21, 0x32, 0x43, 0x54, 0x05, 0x16})
	f.Add([]byte{3, 3, 0x01, 0x11, 0x21, 0x04, 0x14, 0x02, 0x25, 0x35})
	f.Add([]byte("put leases and revoke them all, then txn the rest"))
	keys := []string{"a", "a/1", "a/2", "b"}
	f.Fuzz(func(t *testing.T, data []byte) {
		if len(data) > 256 {
			return
		}
		fsm := New(nil)
		m := newModel()
		var index uint64
		apply := func(c *pb.Command) *pb.Result {
			index++
			d, _ := EncodeEntry(int64(index), []*pb.Command{c})
			return fsm.Apply(&raft.Log{Index: index, Type: raft.LogCommand, Data: d}).(*ApplyResult).Results[0]
		}
		for i, op := range data {
			k := keys[int(op>>4)%len(keys)]
			lease := int64(op>>6) % 3 // 0, 1, 2
			v := fmt.Sprint(i)
			var r *pb.Result
			var want error
			switch op % 6 {
			case 0: // put
				r = apply(mustCmd(t, pb.CommandType_COMMAND_PUT, &pb.PutRequest{Key: []byte(k), Value: []byte(v), Lease: lease}))
				if lease != 0 && !m.leases[lease] {
					want = ErrLeaseNotFound
				} else {
					m.rev++
					m.put(m.rev, k, v, lease)
				}
			case 1: // delete key or prefix
				req := &pb.DeleteRangeRequest{Key: []byte(k)}
				victims := m.match(k)
				if op&8 != 0 {
					req.RangeEnd = []byte(k + "\xff")
				} else if _, ok := m.kvs[k]; ok {
					victims = []string{k}
				} else {
					victims = nil
				}
				r = apply(mustCmd(t, pb.CommandType_COMMAND_DELETE_RANGE, req))
				if len(victims) > 0 {
					m.rev++
					m.del(m.rev, victims)
				}
			case 2: // txn: if version(k) == op&3 then put k else delete k's prefix
				ver := int64(op & 3)
				r = apply(mustCmd(t, pb.CommandType_COMMAND_TXN, &pb.TxnRequest{
					Compare: []*pb.Compare{{Key: []byte(k), Target: pb.Compare_VERSION, TargetUnion: &pb.Compare_Version{Version: ver}}},
					Success: []*pb.RequestOp{opPut(k, v)},
					Failure: []*pb.RequestOp{{Request: &pb.RequestOp_RequestDeleteRange{RequestDeleteRange: &pb.DeleteRangeRequest{Key: []byte(k), RangeEnd: []byte(k + "\xff")}}}},
				}))
				if m.kvs[k].GetVersion() == ver {
					m.rev++
					m.put(m.rev, k, v, 0)
				} else if victims := m.match(k); len(victims) > 0 {
					m.rev++
					m.del(m.rev, victims)
				}
			case 3: // grant
				id := lease
				r = apply(mustCmd(t, pb.CommandType_COMMAND_LEASE_GRANT, &pb.LeaseGrantRequest{Id: id, Ttl: 5}))
				if id == 0 {
					break // auto id: learn it below
				}
				if m.leases[id] {
					want = ErrLeaseExists
				} else {
					m.leases[id] = true
				}
			case 4: // revoke
				r = apply(mustCmd(t, pb.CommandType_COMMAND_LEASE_REVOKE, &pb.LeaseRevokeRequest{Id: lease}))
				if !m.leases[lease] {
					want = ErrLeaseNotFound
					break
				}
				delete(m.leases, lease)
				var victims []string
				for _, key := range m.match("") {
					if m.kvs[key].Lease == lease {
						victims = append(victims, key)
					}
				}
				if len(victims) > 0 {
					m.rev++
					m.del(m.rev, victims)
				}
			case 5: // range in a txn: no change
				r = apply(mustCmd(t, pb.CommandType_COMMAND_TXN, &pb.TxnRequest{Success: []*pb.RequestOp{opGet(k)}}))
			}
			if op%6 == 3 && lease == 0 && r.Error == nil {
				var g pb.LeaseGrantResponse
				if err := protoUnmarshal(r.Payload, &g); err != nil || m.leases[g.Id] {
					t.Fatalf("step %d: auto lease %d (%v)", i, g.Id, err)
				}
				m.leases[g.Id] = true
			}
			if err := ResultError(r); (err == nil) != (want == nil) || (want != nil && !isErr(err, want)) {
				t.Fatalf("step %d op %d: error %v, want %v", i, op%6, err, want)
			}
			if r.Revision != m.rev || fsm.Revision() != m.rev {
				t.Fatalf("step %d op %d: revision %d/%d, model %d", i, op%6, r.Revision, fsm.Revision(), m.rev)
			}
			all, _ := fsm.Range(&pb.RangeRequest{Key: []byte{0}, RangeEnd: []byte{0}})
			if len(all.Kvs) != len(m.kvs) {
				t.Fatalf("step %d: %d keys, model %d", i, len(all.Kvs), len(m.kvs))
			}
			for _, kv := range all.Kvs {
				w := m.kvs[string(kv.Key)]
				if w == nil || string(kv.Value) != string(w.Value) || kv.CreateRevision != w.CreateRevision ||
					kv.ModRevision != w.ModRevision || kv.Version != w.Version || kv.Lease != w.Lease {
					t.Fatalf("step %d: %v, model %v", i, kv, w)
				}
			}
			var ids []int64
			for _, l := range fsm.Leases() {
				ids = append(ids, l.ID)
			}
			if !slices.Equal(ids, slices.Sorted(maps.Keys(m.leases))) {
				t.Fatalf("step %d: leases %v, model %v", i, ids, slices.Sorted(maps.Keys(m.leases)))
			}
		}
		evs, err := fsm.Events([]byte{0}, []byte{0}, 1, 0)
		if err != nil {
			t.Fatal(err)
		}
		if got, want := fmt.Sprint(evSummaryShort(evs)), fmt.Sprint(m.events); got != want {
			t.Fatalf("events\n got %s\nwant %s", got, want)
		}
		checkInvariants(t, fsm)
		g := New(nil)
		if err := restore(g, mustSnapshot(t, fsm)); err != nil {
			t.Fatal(err)
		}
		if !equalDump(dumpState(t, fsm), dumpState(t, g)) {
			t.Fatal("snapshot round trip differs")
		}
	})
}

func evSummaryShort(evs []*pb.Event) []string {
	var out []string
	for _, ev := range evs {
		out = append(out, fmt.Sprintf("%v %s@%d", ev.Type, ev.Kv.Key, ev.Kv.ModRevision))
	}
	return out
}
