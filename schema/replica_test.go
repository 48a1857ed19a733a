package schema_test

import (
	"testing"

	"github.com/hashicorp/raft"
	"google.golang.org/protobuf/proto"

	pb "github.com/raftps/raftps/api/raftpspb"
	"github.com/raftps/raftps/fsm"
	"github.com/raftps/raftps/schema"
)

// store applies commands to an fsm as Raft would after commit.
type store struct {
	t     *testing.T
	f     *fsm.FSM
	index uint64
}

// txn applies one Txn: put value at key if the compare holds. It returns
// whether the compare held.
func (s *store) txn(cmp *pb.Compare, key string, value []byte) bool {
	s.t.Helper()
	c, err := fsm.NewCommand(pb.CommandType_COMMAND_TXN, &pb.TxnRequest{
		Compare: []*pb.Compare{cmp},
		Success: []*pb.RequestOp{{Request: &pb.RequestOp_RequestPut{RequestPut: &pb.PutRequest{Key: []byte(key), Value: value}}}},
	})
	if err != nil {
		s.t.Fatal(err)
	}
	return s.apply(c).(*pb.TxnResponse).GetSucceeded()
}

func (s *store) apply(c *pb.Command) proto.Message {
	s.t.Helper()
	s.index++
	data, err := fsm.EncodeEntry(1_700_000_000_000_000_000, []*pb.Command{c})
	if err != nil {
		s.t.Fatal(err)
	}
	res := s.f.Apply(&raft.Log{Index: s.index, Type: raft.LogCommand, Data: data}).(*fsm.ApplyResult)
	if res.Err != nil || fsm.ResultError(res.Results[0]) != nil {
		s.t.Fatalf("apply: %v %v", res.Err, fsm.ResultError(res.Results[0]))
	}
	var resp pb.TxnResponse
	if c.GetType() == pb.CommandType_COMMAND_TXN {
		if err := proto.Unmarshal(res.Results[0].Payload, &resp); err != nil {
			s.t.Fatal(err)
		}
	}
	return &resp
}

func (s *store) record(job string, slot int32) schema.ReplicaRecord {
	s.t.Helper()
	r, err := s.f.Range(&pb.RangeRequest{Key: []byte(schema.ReplicaKey(job, slot))})
	if err != nil || len(r.Kvs) != 1 {
		s.t.Fatalf("range: %v, %d kvs", err, len(r.GetKvs()))
	}
	rec, err := schema.ParseReplicaRecord(r.Kvs[0].Value, r.Kvs[0].ModRevision)
	if err != nil {
		s.t.Fatal(err)
	}
	return rec
}

// TestReplicaRecordEpochCompare: the first record is written only where
// none is; a promotion and a drop made from the same epoch cannot both
// commit; every write raises the epoch, and a record deleted and written
// again never goes back to an earlier epoch.
func TestReplicaRecordEpochCompare(t *testing.T) {
	s := &store{t: t, f: fsm.New(nil)}
	key := schema.ReplicaKey("mnist", 0)
	first := schema.ReplicaRecord{Primary: schema.ReplicaMember{Node: "n1", Addr: "a1"},
		Backups: []schema.ReplicaMember{{Node: "n2", Addr: "a2"}, {Node: "n3", Addr: "a3"}}, Incarnation: 7}
	if !s.txn(schema.EpochCompare("mnist", 0, 0), key, first.Marshal()) {
		t.Fatal("first record refused")
	}
	if s.txn(schema.EpochCompare("mnist", 0, 0), key, first.Marshal()) {
		t.Fatal("a second 'first' record committed over an existing one")
	}
	e1 := s.record("mnist", 0)
	if e1.Epoch <= 0 || e1.Primary.Node != "n1" || len(e1.Backups) != 2 {
		t.Fatalf("record %+v", e1)
	}

	// The leader promotes n2 while n1, not knowing it was deposed, asks
	// to drop n3: both from epoch e1; the promotion commits first.
	promoted, err := e1.Promote("n2")
	if err != nil {
		t.Fatal(err)
	}
	dropped, err := e1.Drop("n3")
	if err != nil {
		t.Fatal(err)
	}
	if !s.txn(schema.EpochCompare("mnist", 0, e1.Epoch), key, promoted.Marshal()) {
		t.Fatal("promotion at the current epoch refused")
	}
	if s.txn(schema.EpochCompare("mnist", 0, e1.Epoch), key, dropped.Marshal()) {
		t.Fatal("the deposed primary's drop from the old epoch committed")
	}
	e2 := s.record("mnist", 0)
	if e2.Epoch <= e1.Epoch || e2.Primary.Node != "n2" || len(e2.Backups) != 1 || e2.Backups[0].Node != "n3" || e2.Incarnation != 7 || dropped.Incarnation != 7 {
		t.Fatalf("after the promotion: %+v (epoch before %d)", e2, e1.Epoch)
	}
	if _, err := e2.Promote("n1"); err == nil {
		t.Fatal("the deposed primary, no longer in sync, was promotable")
	}

	// Deleted and written again (a job deleted and resubmitted under the
	// same name): the epoch is still above every earlier one.
	del, err := fsm.NewCommand(pb.CommandType_COMMAND_DELETE_RANGE, &pb.DeleteRangeRequest{Key: []byte(key)})
	if err != nil {
		t.Fatal(err)
	}
	s.apply(del)
	if !s.txn(schema.EpochCompare("mnist", 0, 0), key, first.Marshal()) {
		t.Fatal("first record after a delete refused")
	}
	if e3 := s.record("mnist", 0); e3.Epoch <= e2.Epoch {
		t.Fatalf("epoch %d after delete and rewrite, not above %d", e3.Epoch, e2.Epoch)
	}
}

func TestReplicaRecordValidate(t *testing.T) {
	for _, bad := range []string{
		`{`,
		`{"backups":[{"node":"n2"}]}`,
		`{"primary":{"node":"n1"},"backups":[{"node":"n1"}]}`,
		`{"primary":{"node":"n1"},"backups":[{"node":"n2"},{"node":"n2"}]}`,
		`{"primary":{"node":"n1"},"backups":[{"node":""}]}`,
	} {
		if _, err := schema.ParseReplicaRecord([]byte(bad), 5); err == nil {
			t.Errorf("%s accepted", bad)
		}
	}
	if _, err := schema.ParseReplicaRecord([]byte(`{"primary":{"node":"n1"}}`), 0); err == nil {
		t.Error("record without a mod_revision accepted")
	}
	r, err := schema.ParseReplicaRecord([]byte(`{"primary":{"node":"n1"}}`), 7)
	if err != nil || r.Epoch != 7 {
		t.Errorf("%+v %v", r, err)
	}
	if _, err := r.Drop("n2"); err == nil {
		t.Error("dropped a node that is no backup")
	}
}
