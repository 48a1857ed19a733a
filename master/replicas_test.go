package master

import (
	"testing"
	"time"

	pb "github.com/raftps/raftps/api/raftpspb"
	"github.com/raftps/raftps/gossip"
	"github.com/raftps/raftps/schema"
)

// TestNodeGonePromotesBackup (issue 34): when the node holding the primary
// of a replicated slot is gone, the master moves the slot's replica
// record to its alive in-sync backup in one Txn (a newer epoch; the
// incarnation kept), skipping a dead backup, before it revokes the lease
// (the claim goes, so the promoted node can claim the slot); a record
// whose backups are all dead is deleted (the slot then restores, R = 1);
// a record whose primary is another node is left alone; and a record that
// names the node as primary though it never claimed the slot (it was
// promoted and died before its claim) is failed over too.
func TestNodeGonePromotesBackup(t *testing.T) {
	s := openStore(t)
	submit(t, s, "j")
	ctx := ctxT(t, 20*time.Second)
	lease, err := s.LeaseGrant(ctx, &pb.LeaseGrantRequest{Ttl: 5})
	if err != nil {
		t.Fatal(err)
	}
	m2, m3, m4 := schema.ReplicaMember{Node: "n2", Addr: "n2:1"}, schema.ReplicaMember{Node: "n3", Addr: "n3:1"}, schema.ReplicaMember{Node: "n4", Addr: "n4:1"}
	for slot := int32(0); slot < 2; slot++ {
		put(t, s, schema.SlotKey("j", slot), schema.SlotRecord{Node: "n2", Addr: "n2:1"}.Marshal(), lease.Id)
	}
	put(t, s, schema.ReplicaKey("j", 0), schema.ReplicaRecord{Primary: m2, Backups: []schema.ReplicaMember{m4, m3}, Incarnation: 9}.Marshal(), 0)
	put(t, s, schema.ReplicaKey("j", 1), schema.ReplicaRecord{Primary: m2, Backups: []schema.ReplicaMember{m4}}.Marshal(), 0)
	put(t, s, schema.ReplicaKey("j", 2), schema.ReplicaRecord{Primary: m3, Backups: []schema.ReplicaMember{m2}}.Marshal(), 0)
	put(t, s, schema.ReplicaKey("j", 3), schema.ReplicaRecord{Primary: m2, Backups: []schema.ReplicaMember{m3}}.Marshal(), 0) // no claim
	read := func(slot int32) (schema.ReplicaRecord, bool) { return readReplica(t, s, "j", slot) }
	before, _ := read(0)
	other, _ := read(2)
	mem := &fakeMembers{members: []gossip.Member{member("n3", gossip.StatusAlive, "", gossip.RolePServer),
		member("n4", gossip.StatusDead, "", gossip.RolePServer)}}
	newMaster(s, mem).nodeGone(ctx, member("n2", gossip.StatusDead, "", gossip.RolePServer))

	r0, ok := read(0)
	if !ok || r0.Primary != m3 || len(r0.Backups) != 1 || r0.Backups[0] != m4 || r0.Epoch <= before.Epoch || r0.Incarnation != 9 {
		t.Fatalf("slot 0 after its primary died: %+v (present %v), want primary n3 (the alive backup), backups [n4], epoch > %d, incarnation 9", r0, ok, before.Epoch)
	}
	if r1, ok := read(1); ok {
		t.Fatalf("slot 1, whose only backup is dead, kept its record %+v", r1)
	}
	if r2, _ := read(2); r2.Epoch != other.Epoch || r2.Primary != m3 {
		t.Fatalf("slot 2 (primary n3, alive) changed: %+v", r2)
	}
	if r3, ok := read(3); !ok || r3.Primary != m3 || len(r3.Backups) != 0 {
		t.Fatalf("slot 3 (promoted to n2, which died before claiming it): %+v (present %v), want primary n3", r3, ok)
	}
	if exists(t, s, schema.SlotKey("j", 0)) {
		t.Fatal("the dead primary's claim survived: the promoted node could not claim the slot")
	}
}

// TestSweepFailsOverUnclaimedUnknownPrimary: a replicated slot whose
// primary gossip never knew (a survivor restarted with
// --force-new-cluster: the dead nodes are in no member list, so nodeGone
// never runs for them) is failed over by the sweep once the slot's claim
// is gone: promoted to an alive backup, or deleted when no backup is
// alive. A primary unknown to gossip that still holds its claim, and an
// alive primary without a claim (between its lease and its next claim),
// are left alone.
func TestSweepFailsOverUnclaimedUnknownPrimary(t *testing.T) {
	s := openStore(t)
	submit(t, s, "j")
	ctx := ctxT(t, 20*time.Second)
	lease, err := s.LeaseGrant(ctx, &pb.LeaseGrantRequest{Ttl: 5})
	if err != nil {
		t.Fatal(err)
	}
	ghost, n3, n4 := schema.ReplicaMember{Node: "ghost", Addr: "g:1"}, schema.ReplicaMember{Node: "n3", Addr: "n3:1"}, schema.ReplicaMember{Node: "n4", Addr: "n4:1"}
	put(t, s, schema.ReplicaKey("j", 0), schema.ReplicaRecord{Primary: ghost, Backups: []schema.ReplicaMember{n3}}.Marshal(), 0)
	put(t, s, schema.ReplicaKey("j", 1), schema.ReplicaRecord{Primary: ghost, Backups: []schema.ReplicaMember{n3}}.Marshal(), 0)
	put(t, s, schema.SlotKey("j", 1), schema.SlotRecord{Node: "ghost", Addr: "g:1"}.Marshal(), lease.Id)
	put(t, s, schema.ReplicaKey("j", 2), schema.ReplicaRecord{Primary: n3, Backups: []schema.ReplicaMember{n4}}.Marshal(), 0)
	put(t, s, schema.ReplicaKey("j", 3), schema.ReplicaRecord{Primary: ghost, Backups: []schema.ReplicaMember{n4}}.Marshal(), 0)
	read := func(slot int32) (schema.ReplicaRecord, bool) { return readReplica(t, s, "j", slot) }
	claimedBefore, _ := read(1)
	aliveBefore, _ := read(2)
	mem := &fakeMembers{members: []gossip.Member{member("n3", gossip.StatusAlive, "", gossip.RolePServer),
		member("n4", gossip.StatusDead, "", gossip.RolePServer)}}
	newMaster(s, mem).sweep(ctx)

	if r0, ok := read(0); !ok || r0.Primary != n3 || len(r0.Backups) != 0 {
		t.Fatalf("slot 0 (unknown primary, no claim): %+v (present %v), want promoted to n3", r0, ok)
	}
	if r1, _ := read(1); r1.Epoch != claimedBefore.Epoch || r1.Primary != ghost {
		t.Fatalf("slot 1 (unknown primary that holds its claim) changed: %+v", r1)
	}
	if r2, _ := read(2); r2.Epoch != aliveBefore.Epoch || r2.Primary != n3 {
		t.Fatalf("slot 2 (alive primary) changed: %+v", r2)
	}
	if r3, ok := read(3); ok {
		t.Fatalf("slot 3 (unknown primary, its only backup dead) kept its record %+v: the slot could never restore", r3)
	}
}

// TestSweepPromotesWhenAliveLapsedPrimary: a primary alive in gossip that
// holds no claim (its lease lapsed while it was cut off from the Raft
// leader; it fenced the slot itself) is replaced by its alive in-sync
// backup once the claim has been missing for ClaimLapseGrace at one epoch,
// not before; a slot whose backups are all dead keeps its record (no
// restore while the primary may come back).
func TestSweepPromotesWhenAliveLapsedPrimary(t *testing.T) {
	s := openStore(t)
	submit(t, s, "j")
	ctx := ctxT(t, 20*time.Second)
	n2, n3, n4 := schema.ReplicaMember{Node: "n2", Addr: "n2:1"}, schema.ReplicaMember{Node: "n3", Addr: "n3:1"}, schema.ReplicaMember{Node: "n4", Addr: "n4:1"}
	put(t, s, schema.ReplicaKey("j", 0), schema.ReplicaRecord{Primary: n2, Backups: []schema.ReplicaMember{n3}}.Marshal(), 0)
	put(t, s, schema.ReplicaKey("j", 1), schema.ReplicaRecord{Primary: n2, Backups: []schema.ReplicaMember{n4}}.Marshal(), 0)
	read := func(slot int32) (schema.ReplicaRecord, bool) { return readReplica(t, s, "j", slot) }
	before, _ := read(0)
	mem := &fakeMembers{members: []gossip.Member{member("n2", gossip.StatusAlive, "", gossip.RolePServer),
		member("n3", gossip.StatusAlive, "", gossip.RolePServer), member("n4", gossip.StatusDead, "", gossip.RolePServer)}}
	m := newMaster(s, mem)
	start := time.Now()
	m.sweep(ctx)
	m.sweep(ctx)
	if r0, _ := read(0); time.Since(start) < ClaimLapseGrace && r0.Primary != n2 {
		t.Fatalf("slot 0 failed over %v after its alive primary's claim went missing, before the grace %v: %+v", time.Since(start), ClaimLapseGrace, r0)
	}
	time.Sleep(ClaimLapseGrace)
	m.sweep(ctx)
	if r0, _ := read(0); r0.Primary != n3 || r0.Epoch <= before.Epoch {
		t.Fatalf("slot 0 after %v without a claim: %+v, want promoted to n3 at an epoch above %d", time.Since(start), r0, before.Epoch)
	}
	if r1, ok := read(1); !ok || r1.Primary != n2 {
		t.Fatalf("slot 1 (alive primary, its only backup dead): %+v (present %v), want the record kept", r1, ok)
	}
}

// TestSweepForgetsLapsesOfGoneRecords: a lapse (an alive primary seen
// without its claim) is forgotten once its replica record is gone, so the
// master's memory does not grow with every slot of every ended job.
func TestSweepForgetsLapsesOfGoneRecords(t *testing.T) {
	s := openStore(t)
	submit(t, s, "j")
	ctx := ctxT(t, 20*time.Second)
	n2, n3 := schema.ReplicaMember{Node: "n2", Addr: "n2:1"}, schema.ReplicaMember{Node: "n3", Addr: "n3:1"}
	key := schema.ReplicaKey("j", 0)
	put(t, s, key, schema.ReplicaRecord{Primary: n2, Backups: []schema.ReplicaMember{n3}}.Marshal(), 0)
	mem := &fakeMembers{members: []gossip.Member{member("n2", gossip.StatusAlive, "", gossip.RolePServer),
		member("n3", gossip.StatusAlive, "", gossip.RolePServer)}}
	m := newMaster(s, mem)
	m.sweep(ctx)
	if _, ok := m.lapsed[key]; !ok || len(m.lapsed) != 1 {
		t.Fatalf("after a sweep that saw %s's alive primary without a claim: lapsed %v, want that key alone", key, m.lapsed)
	}
	if _, err := s.DeleteRange(ctx, &pb.DeleteRangeRequest{Key: []byte(key)}); err != nil {
		t.Fatal(err)
	}
	m.sweep(ctx)
	if len(m.lapsed) != 0 {
		t.Fatalf("after %s was deleted and swept: lapsed %v, want empty", key, m.lapsed)
	}
}

// TestNodeGoneSkipsRestartedBackup: a backup whose node restarted since
// the record named it (its gossip instance differs from the record's)
// holds none of the slot's state (pserver/agent's backups.go), so
// nodeGone promotes the next backup that runs the process the record
// names, and deletes a record whose only backup restarted (the slot is
// then restored from its checkpoint, not served from nothing). Before
// liveNodes.holds it promoted the first alive backup: the restarted node
// then failed to serve (claimPromoted: no backup held) and the slot went
// through another hand-off before its restore.
func TestNodeGoneSkipsRestartedBackup(t *testing.T) {
	s := openStore(t)
	submit(t, s, "j")
	ctx := ctxT(t, 20*time.Second)
	m2 := schema.ReplicaMember{Node: "n2", Addr: "n2:1", Instance: "i2"}
	m3 := schema.ReplicaMember{Node: "n3", Addr: "n3:1", Instance: "i3-before"}
	m4 := schema.ReplicaMember{Node: "n4", Addr: "n4:1", Instance: "i4"}
	put(t, s, schema.ReplicaKey("j", 0), schema.ReplicaRecord{Primary: m2, Backups: []schema.ReplicaMember{m3, m4}}.Marshal(), 0)
	put(t, s, schema.ReplicaKey("j", 1), schema.ReplicaRecord{Primary: m2, Backups: []schema.ReplicaMember{m3}}.Marshal(), 0)
	restarted, same := member("n3", gossip.StatusAlive, "", gossip.RolePServer), member("n4", gossip.StatusAlive, "", gossip.RolePServer)
	restarted.Meta.PServerInstance, same.Meta.PServerInstance = "i3-after", "i4"
	newMaster(s, &fakeMembers{members: []gossip.Member{restarted, same}}).nodeGone(ctx, member("n2", gossip.StatusDead, "", gossip.RolePServer))

	if r0, ok := readReplica(t, s, "j", 0); !ok || r0.Primary != m4 {
		t.Fatalf("slot 0 after its primary died: %+v (present %v), want primary n4 (n3 restarted since the record named it)", r0, ok)
	}
	if r1, ok := readReplica(t, s, "j", 1); ok {
		t.Fatalf("slot 1, whose only backup restarted, kept its record %+v", r1)
	}
}
