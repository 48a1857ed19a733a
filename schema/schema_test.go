package schema

import (
	"bytes"
	"testing"

	pb "github.com/raftps/raftps/api/raftpspb"
)

func TestKeys(t *testing.T) {
	for _, tc := range []struct{ got, want string }{
		{NodeKey("n1"), "/nodes/n1"},
		{JobPrefix("j"), "/jobs/j/"},
		{SlotKey("j", 3), "/jobs/j/ps/3"},
		{SlotPrefix("j"), "/jobs/j/ps/"},
		{TrainerKey("j", "t-1"), "/jobs/j/trainers/t-1"},
		{CheckpointKey("j", 0), "/jobs/j/checkpoints/0"},
		{RestoreKey("j", 12), "/jobs/j/restores/12"},
		{RollbackKey("j"), "/jobs/j/rollback"},
	} {
		if tc.got != tc.want {
			t.Errorf("got %q, want %q", tc.got, tc.want)
		}
	}
}

func TestParseJobKey(t *testing.T) {
	for _, tc := range []struct {
		key           string
		job, kind, id string
		ok            bool
	}{
		{SlotKey("mnist", 7), "mnist", KindSlot, "7", true},
		{TrainerKey("a", "n1-t0"), "a", KindTrainer, "n1-t0", true},
		{CheckpointKey("a", 1), "a", KindCheckpoint, "1", true},
		{RollbackKey("a"), "", "", "", false},
		{"/jobs/a/ps/", "", "", "", false},
		{"/jobs//ps/1", "", "", "", false},
		{"/nodes/n1", "", "", "", false},
		{"/jobs/a/ps/1/extra", "", "", "", false},
	} {
		job, kind, id, ok := ParseJobKey(tc.key)
		if job != tc.job || kind != tc.kind || id != tc.id || ok != tc.ok {
			t.Errorf("ParseJobKey(%q) = %q %q %q %v", tc.key, job, kind, id, ok)
		}
	}
	if id, ok := ParseNodeKey(NodeKey("n2")); !ok || id != "n2" {
		t.Errorf("ParseNodeKey = %q %v", id, ok)
	}
	if _, err := ParseSlot("-1"); err == nil {
		t.Error("ParseSlot(-1) accepted")
	}
	if s, err := ParseSlot("42"); err != nil || s != 42 {
		t.Errorf("ParseSlot(42) = %d, %v", s, err)
	}
}

func TestPrefixEnd(t *testing.T) {
	for _, tc := range []struct{ p, want []byte }{
		{[]byte("/jobs/"), []byte("/jobs0")},
		{[]byte{'a', 0xff}, []byte{'b'}},
		{[]byte{0xff, 0xff}, []byte{0}},
		{nil, []byte{0}},
	} {
		if got := PrefixEnd(tc.p); !bytes.Equal(got, tc.want) {
			t.Errorf("PrefixEnd(%q) = %q, want %q", tc.p, got, tc.want)
		}
	}
	p := []byte("/x/")
	_ = PrefixEnd(p)
	if string(p) != "/x/" {
		t.Error("PrefixEnd modified its argument")
	}
	k, e := PrefixRange(SlotPrefix("j"))
	if string(k) != "/jobs/j/ps/" || string(e) != "/jobs/j/ps0" {
		t.Errorf("PrefixRange = %q %q", k, e)
	}
}

func TestRecordsRoundTrip(t *testing.T) {
	s := SlotRecord{Node: "n1", Addr: "127.0.0.1:1", Incarnation: 9}
	if got, err := ParseSlotRecord(s.Marshal()); err != nil || got != s {
		t.Errorf("slot record: %+v %v", got, err)
	}
	tr := TrainerRecord{Node: "n2", Addr: "a"}
	if got, err := ParseTrainerRecord(tr.Marshal()); err != nil || got != tr {
		t.Errorf("trainer record: %+v %v", got, err)
	}
	if n, ok := NodeOf(tr.Marshal()); !ok || n != "n2" {
		t.Errorf("NodeOf = %q %v", n, ok)
	}
	rb := Rollback{Version: 5, Slot: 1, Node: "n3", Epoch: 2}
	if got, err := ParseRollback(rb.Marshal()); err != nil || got != rb {
		t.Errorf("rollback: %+v %v", got, err)
	}
	nr := NodeRecord{ID: "n1", Roles: []string{"server"}, Status: "alive"}
	if got, err := ParseNodeRecord(nr.Marshal()); err != nil || got.ID != "n1" || got.Roles[0] != "server" {
		t.Errorf("node record: %+v %v", got, err)
	}
	b, err := MarshalPointer(&pb.CheckpointPointer{Version: 3})
	if err != nil {
		t.Fatal(err)
	}
	if p, err := ParsePointer(b); err != nil || p.Version != 3 {
		t.Errorf("pointer: %v %v", p, err)
	}
	if _, err := ParsePointer([]byte(`{"version": "x"`)); err == nil {
		t.Error("bad pointer accepted")
	}
	if _, err := ParseSlotRecord([]byte("{")); err == nil {
		t.Error("bad slot record accepted")
	}
}
