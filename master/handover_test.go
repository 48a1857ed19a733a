package master

import (
	"testing"
	"time"

	pb "github.com/raftps/raftps/api/raftpspb"
	"github.com/raftps/raftps/gossip"
	"github.com/raftps/raftps/schema"
)

// TestNodeGoneHandoverRecord: when gossip declares a pserver node dead,
// the master revokes its lease and writes, for each slot it held, a
// handover record whose wait is schema.HandoverWait from the age of the
// lease's last keepalive at this leader: short when that keepalive is old.
// When the leader saw no renewal of the lease (it took over since the
// grant and the last keepalive), the record's wait is taken from the start
// of its leadership (raftstore.Store.LeaderSince): every keepalive an
// earlier leader acknowledged arrived before it.
func TestNodeGoneHandoverRecord(t *testing.T) {
	s := openStore(t)
	submit(t, s, "j")
	ctx := ctxT(t, 20*time.Second)
	grant5 := func() int64 {
		resp, err := s.LeaseGrant(ctx, &pb.LeaseGrantRequest{Ttl: 5})
		if err != nil {
			t.Fatal(err)
		}
		return resp.Id
	}
	renewed, unknown := grant5(), grant5()
	put(t, s, schema.SlotKey("j", 0), schema.SlotRecord{Node: "n2", Addr: "n2:7000"}.Marshal(), renewed)
	put(t, s, schema.SlotKey("j", 1), schema.SlotRecord{Node: "n3", Addr: "n3:7000"}.Marshal(), unknown)
	if _, err := s.LeaseKeepAlive(ctx, renewed); err != nil {
		t.Fatal(err)
	}
	kept := time.Now()
	time.Sleep(1500 * time.Millisecond) // gossip's detection time

	m := newMaster(s, &fakeMembers{})
	m.nodeGone(ctx, member("n2", gossip.StatusDead, "", gossip.RolePServer))
	done := time.Now()
	if exists(t, s, schema.SlotKey("j", 0)) {
		t.Fatal("the dead node's slot claim survived")
	}
	resp, err := s.FSM().Range(&pb.RangeRequest{Key: []byte(schema.HandoverKey("j", 0))})
	if err != nil || len(resp.Kvs) != 1 {
		t.Fatalf("handover record of slot 0: %v %v", resp, err)
	}
	rec, err := schema.ParseHandoverRecord(resp.Kvs[0].Value)
	if err != nil {
		t.Fatal(err)
	}
	since := time.Duration(rec.SinceKeepAliveNanos)
	if since < 1500*time.Millisecond || since > done.Sub(kept) {
		t.Fatalf("record: last keepalive %v before, want between 1.5 s and %v", since, done.Sub(kept))
	}
	if w := time.Duration(rec.WaitNanos); w != schema.HandoverWait(5, since) || w >= 5*time.Second-1500*time.Millisecond {
		t.Fatalf("record wait %v, want HandoverWait(5 s, %v) = %v, well under a TTL", w, since, schema.HandoverWait(5, since))
	}
	if rec.Node != "n2" || rec.Lease != renewed || rec.ConsumedBy != 0 || rec.RevokedRevision == 0 || rec.FromLeaderStart {
		t.Fatalf("record %+v", rec)
	}

	// A lease this leader never saw a renewal of (as after a leader change
	// since its grant and keepalives: the store forgets them): revoked, and
	// the record counts from the start of this leadership.
	start, ok := s.LeaderSince()
	if !ok {
		t.Fatal("the leader reports no leadership start")
	}
	before := time.Now()
	New(Config{Logger: slogDiscard()}, noArrivals{s}, &fakeMembers{}).nodeGone(ctx, member("n3", gossip.StatusDead, "", gossip.RolePServer))
	done = time.Now()
	if _, ok := s.FSM().Lease(unknown); ok {
		t.Fatal("lease of the second dead node not revoked")
	}
	resp, err = s.FSM().Range(&pb.RangeRequest{Key: []byte(schema.HandoverKey("j", 1))})
	if err != nil || len(resp.Kvs) != 1 {
		t.Fatalf("handover record of slot 1 (no keepalive seen): %v %v", resp, err)
	}
	rec, err = schema.ParseHandoverRecord(resp.Kvs[0].Value)
	if err != nil {
		t.Fatal(err)
	}
	since = time.Duration(rec.SinceKeepAliveNanos)
	if !rec.FromLeaderStart || since < before.Sub(start) || since > done.Sub(start) {
		t.Fatalf("record %+v: want from the leader's start, %v to %v ago", rec, before.Sub(start), done.Sub(start))
	}
	if w := time.Duration(rec.WaitNanos); w != schema.HandoverWait(5, since) {
		t.Fatalf("record wait %v, want HandoverWait(5 s, %v) = %v", w, since, schema.HandoverWait(5, since))
	}
	if rec.Node != "n3" || rec.Lease != unknown || rec.ConsumedBy != 0 || rec.RevokedRevision == 0 {
		t.Fatalf("record %+v", rec)
	}
}

// TestHandoverRecordCountsFromGrant (issue 33, defect 1): a holder whose
// lease was granted in the current leader's term and revoked before its
// first keepalive arrived gets a record counted from the grant: the
// holder's watchdog counts the grant as a renewal and fences 2/3 TTL after
// sending it, which is later than 2/3 TTL after the leader's start.
func TestHandoverRecordCountsFromGrant(t *testing.T) {
	s := openStore(t)
	submit(t, s, "j")
	ctx := ctxT(t, 20*time.Second)
	time.Sleep(1500 * time.Millisecond) // the leader has led a while before the grant
	sent := time.Now()
	resp, err := s.LeaseGrant(ctx, &pb.LeaseGrantRequest{Ttl: 5})
	if err != nil {
		t.Fatal(err)
	}
	put(t, s, schema.SlotKey("j", 0), schema.SlotRecord{Node: "n2", Addr: "n2:7000"}.Marshal(), resp.Id)
	newMaster(s, &fakeMembers{}).nodeGone(ctx, member("n2", gossip.StatusDead, "", gossip.RolePServer))
	sinceSent := time.Since(sent)
	kvs, err := s.FSM().Range(&pb.RangeRequest{Key: []byte(schema.HandoverKey("j", 0))})
	if err != nil || len(kvs.Kvs) != 1 {
		t.Fatalf("handover record of slot 0: %v %v", kvs, err)
	}
	rec, err := schema.ParseHandoverRecord(kvs.Kvs[0].Value)
	if err != nil {
		t.Fatal(err)
	}
	since := time.Duration(rec.SinceKeepAliveNanos)
	if rec.FromLeaderStart || since > sinceSent {
		t.Fatalf("record %+v: last renewal %v before the record, but the grant was sent only %v before: the next claimant would serve before the holder fences",
			rec, since, sinceSent)
	}
	if w := time.Duration(rec.WaitNanos); w < schema.PServerFence(5)-sinceSent {
		t.Fatalf("record wait %v, shorter than the holder's fence %v after its grant", w, schema.PServerFence(5)-sinceSent)
	}
}

// TestNodeGoneHandoverRecordNotLeader: a master whose store does not lead
// (or has not established its term) knows no bound and writes no record;
// the claimant waits a whole TTL.
func TestNodeGoneHandoverRecordNotLeader(t *testing.T) {
	s := openStore(t)
	ns := notLeading{s}
	if _, _, ok := (&Master{store: ns}).lastKeepAliveBound(1); ok {
		t.Fatal("a bound without leadership")
	}
}

// notLeading is a store that reports no leadership start.
type notLeading struct{ Store }

func (notLeading) LeaderSince() (time.Time, bool) { return time.Time{}, false }

// noArrivals is a store whose leader knows no renewal of any lease, as a
// leader that took over since.
type noArrivals struct{ Store }

func (noArrivals) LeaseLastKeepAlive(int64) (time.Time, bool) { return time.Time{}, false }
