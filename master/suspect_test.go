package master

import (
	"context"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	pb "github.com/raftps/raftps/api/raftpspb"
	"github.com/raftps/raftps/gossip"
	"github.com/raftps/raftps/pserver/psclient"
	"github.com/raftps/raftps/pserver/wire"
	"github.com/raftps/raftps/raftstore"
	"github.com/raftps/raftps/schema"
)

// probeOver is the node's Prober without TLS: psclient.Probe of addr,
// counted in n.
func probeOver(n *atomic.Int64) Prober {
	return func(ctx context.Context, addr, job string, slot int32) error {
		n.Add(1)
		cc, err := grpc.NewClient(addr, wire.DialOptions()...)
		if err != nil {
			return err
		}
		defer cc.Close()
		return psclient.Probe(ctx, cc, job, slot)
	}
}

// livePServer serves the PServer API on loopback (every call answered
// Unimplemented: a live endpoint) and returns its address.
func livePServer(t *testing.T) string {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	g := grpc.NewServer()
	pb.RegisterPServerServer(g, pb.UnimplementedPServerServer{})
	go func() { _ = g.Serve(lis) }()
	t.Cleanup(g.Stop)
	return lis.Addr().String()
}

// stoppedPServer is a loopback endpoint that accepts connections and
// never answers (a SIGSTOPped or wedged primary) and returns its address.
func stoppedPServer(t *testing.T) string {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { lis.Close() })
	go func() {
		for {
			c, err := lis.Accept()
			if err != nil {
				return
			}
			t.Cleanup(func() { c.Close() })
		}
	}()
	return lis.Addr().String()
}

// replicatedSlot writes job j's slot 0: claimed by n2 (at addr, under a
// lease) with a record naming n2 primary and n3 its backup; it returns
// the record's epoch.
func replicatedSlot(t *testing.T, s *raftstore.Store, addr string) int64 {
	t.Helper()
	submit(t, s, "j")
	put(t, s, schema.SlotKey("j", 0), schema.SlotRecord{Node: "n2", Addr: addr}.Marshal(), grant(t, s))
	put(t, s, schema.ReplicaKey("j", 0), schema.ReplicaRecord{Primary: schema.ReplicaMember{Node: "n2", Addr: addr},
		Backups: []schema.ReplicaMember{{Node: "n3", Addr: "127.0.0.1:1"}}, Incarnation: 4}.Marshal(), 0)
	r, _ := readReplica(t, s, "j", 0)
	return r.Epoch
}

func readReplica(t *testing.T, s *raftstore.Store, job string, slot int32) (schema.ReplicaRecord, bool) {
	t.Helper()
	resp, err := s.FSM().Range(&pb.RangeRequest{Key: []byte(schema.ReplicaKey(job, slot))})
	if err != nil || len(resp.Kvs) == 0 {
		return schema.ReplicaRecord{}, false
	}
	r, err := schema.ParseReplicaRecord(resp.Kvs[0].Value, resp.Kvs[0].ModRevision)
	if err != nil {
		t.Fatal(err)
	}
	return r, true
}

// allAlive: gossip sees n1, n2, n3 alive (no node-gone: only a report can
// fail n2 over).
func allAlive() *fakeMembers {
	return &fakeMembers{members: []gossip.Member{member("n1", gossip.StatusAlive, "", gossip.RoleServer),
		member("n2", gossip.StatusAlive, "", gossip.RolePServer), member("n3", gossip.StatusAlive, "", gossip.RolePServer)}}
}

// TestReportDeadPrimaryPromotes (issue 34, fast detection): a trainer's
// report of a primary that does not answer (a stopped process: the
// connection is accepted, nothing is answered) promotes its backup once
// the probe's deadline, the failover timeout, passed, with no gossip
// node-gone (gossip still sees it alive); the promotion is the
// epoch-compared Txn (a newer epoch, the incarnation kept) and frees the
// old primary's claim, so the promoted node can claim the slot at once.
// A primary whose port refuses connections (a SIGKILLed process) is
// failed over the same way. The failed node's trainers are released
// (tasks requeued, leases revoked) so a sync step stops waiting for them;
// another node's trainer is left alone.
func TestReportDeadPrimaryPromotes(t *testing.T) {
	for _, tc := range []struct {
		name string
		addr func(*testing.T) string
	}{
		{"stopped", stoppedPServer},
		{"killed", func(t *testing.T) string {
			lis, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			lis.Close() // connections refused
			return lis.Addr().String()
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := openStore(t)
			addr := tc.addr(t)
			before := replicatedSlot(t, s, addr)
			put(t, s, schema.TrainerKey("j", "n2-1"), schema.TrainerRecord{Node: "n2"}.Marshal(), grant(t, s))
			put(t, s, schema.TrainerKey("j", "n1-1"), schema.TrainerRecord{Node: "n1"}.Marshal(), grant(t, s))
			var probes atomic.Int64
			const timeout = 300 * time.Millisecond
			sus := NewSuspects(s, allAlive(), probeOver(&probes), timeout, slogDiscard())
			start := time.Now()
			out, err := sus.Report(ctxT(t, 20*time.Second), &pb.ReportSuspectRequest{Job: "j", Slot: 0, Trainer: "n1-1", Addr: addr, Reason: "connection refused"})
			took := time.Since(start)
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("report of a %s primary: %s in %v (timeout %v)", tc.name, out.Verdict, took.Round(time.Millisecond), timeout)
			r, ok := readReplica(t, s, "j", 0)
			if out.Verdict != VerdictPromoted || !out.Moved || out.Primary != "n3" || !ok || r.Primary.Node != "n3" || len(r.Backups) != 0 ||
				r.Epoch <= before || r.Epoch != out.Epoch || r.Incarnation != 4 {
				t.Fatalf("after the report: %+v, record %+v (present %v); want promoted to n3 at an epoch > %d, incarnation 4", out, r, ok, before)
			}
			if exists(t, s, schema.SlotKey("j", 0)) {
				t.Fatal("the old primary's claim survived the promotion: the promoted node cannot claim the slot before n2's lease ends")
			}
			if probes.Load() != 1 {
				t.Fatalf("%d probes, want 1", probes.Load())
			}
			// The failed node's trainer no longer holds the job's sync step.
			if exists(t, s, schema.TrainerKey("j", "n2-1")) || !exists(t, s, schema.TrainerKey("j", "n1-1")) {
				t.Fatalf("trainers after the promotion: n2-1 (on the failed node) present %v, want false; n1-1 present %v, want true",
					exists(t, s, schema.TrainerKey("j", "n2-1")), exists(t, s, schema.TrainerKey("j", "n1-1")))
			}
			// The probe is bounded by the failover timeout; the rest is one
			// read and one Txn of a local store (generous: CI is busy).
			if tc.name == "stopped" && took < timeout {
				t.Fatalf("promoted after %v, before the probe's deadline %v", took, timeout)
			}
			if took > timeout+5*time.Second {
				t.Fatalf("the report took %v, the failover timeout is %v", took, timeout)
			}
		})
	}
}

// TestReportHealthyPrimaryNotPromoted (issue 34, safe either way): a
// report of a primary that answers its probe changes nothing (the record,
// its epoch and the claim stay), and reports cannot force probes: every
// other report of the slot within the failover timeout is answered
// "pending" without a probe, a report naming an address that is not the
// primary's is answered "moved" without a probe, and a slot without a
// replica record is "not replicated". A bad request is InvalidArgument.
func TestReportHealthyPrimaryNotPromoted(t *testing.T) {
	s := openStore(t)
	addr := livePServer(t)
	before := replicatedSlot(t, s, addr)
	var probes atomic.Int64
	// A long timeout: the rate limit's window must outlast the loop below
	// on a loaded machine (the probe answers at once).
	sus := NewSuspects(s, allAlive(), probeOver(&probes), time.Minute, slogDiscard())
	ctx := ctxT(t, 30*time.Second)
	req := &pb.ReportSuspectRequest{Job: "j", Slot: 0, Trainer: "n1-1", Addr: addr, Reason: "hostile"}
	out, err := sus.Report(ctx, req)
	if err != nil || out.Verdict != VerdictHealthy || out.Moved || out.Primary != "n2" || out.Epoch != before {
		t.Fatalf("report of a healthy primary: %+v, %v; want healthy, primary n2, epoch %d", out, err, before)
	}
	for i := 0; i < 100; i++ {
		if out, err := sus.Report(ctx, req); err != nil || out.Verdict != VerdictPending {
			t.Fatalf("report %d within the timeout: %+v, %v; want pending", i, out, err)
		}
	}
	if out, err := sus.Report(ctx, &pb.ReportSuspectRequest{Job: "j", Slot: 0, Addr: "127.0.0.1:9"}); err != nil || out.Verdict != VerdictMoved || !out.Moved {
		t.Fatalf("report of another address: %+v, %v; want moved", out, err)
	}
	if out, err := sus.Report(ctx, &pb.ReportSuspectRequest{Job: "j", Slot: 1}); err != nil || out.Verdict != VerdictNotReplicated {
		t.Fatalf("report of a slot with no record: %+v, %v; want not replicated", out, err)
	}
	if probes.Load() != 1 {
		t.Fatalf("%d probes for 103 reports, want 1", probes.Load())
	}
	if r, _ := readReplica(t, s, "j", 0); r.Epoch != before || r.Primary.Node != "n2" || !exists(t, s, schema.SlotKey("j", 0)) {
		t.Fatalf("a healthy primary's record changed: %+v (epoch was %d), claim present %v", r, before, exists(t, s, schema.SlotKey("j", 0)))
	}
	svc := NewService(s, allAlive())
	svc.Suspects = sus
	if _, err := svc.ReportSuspect(ctx, &pb.ReportSuspectRequest{Job: "", Slot: 0}); status.Code(err) != codes.InvalidArgument {
		t.Fatalf("report with no job: %v, want InvalidArgument", err)
	}
	if _, err := NewService(s, allAlive()).ReportSuspect(ctx, req); status.Code(err) != codes.FailedPrecondition {
		t.Fatalf("report to a node that takes none: %v, want FailedPrecondition", err)
	}
}

// TestLeaderChecksPrimariesOnTakingOffice (issue 34: a killed primary
// that was also the Raft leader): as the master's leader loop starts it
// checks every replicated slot's primary (Config.OnLeader ->
// Suspects.CheckAll), so a primary that died while there was no leader
// (its reports failed: no leader to write the promotion) is failed over
// with no report and no gossip node-gone (gossip still sees it alive
// here); a primary that answers is left alone.
func TestLeaderChecksPrimariesOnTakingOffice(t *testing.T) {
	s := openStore(t)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := lis.Addr().String()
	lis.Close() // connections refused: a SIGKILLed primary
	before := replicatedSlot(t, s, dead)
	live := livePServer(t)
	put(t, s, schema.SlotKey("j", 1), schema.SlotRecord{Node: "n3", Addr: live}.Marshal(), grant(t, s))
	put(t, s, schema.ReplicaKey("j", 1), schema.ReplicaRecord{Primary: schema.ReplicaMember{Node: "n3", Addr: live},
		Backups: []schema.ReplicaMember{{Node: "n2", Addr: "127.0.0.1:1"}}, Incarnation: 5}.Marshal(), 0)
	live1, _ := readReplica(t, s, "j", 1)
	var probes atomic.Int64
	sus := NewSuspects(s, allAlive(), probeOver(&probes), 300*time.Millisecond, slogDiscard())
	verdicts := make(chan map[string]int, 1)
	m := New(Config{Logger: slogDiscard(), OnLeader: func(ctx context.Context) {
		verdicts <- sus.CheckAll(ctx, "the Raft leader took office")
	}}, s, allAlive())
	ctx, cancel := context.WithCancel(ctxT(t, 30*time.Second))
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = m.Run(ctx)
	}()
	defer func() { cancel(); <-done }()
	var v map[string]int
	select {
	case v = <-verdicts:
	case <-time.After(20 * time.Second):
		t.Fatal("the leader loop did not check the primaries within 20 s")
	}
	r0, ok0 := readReplica(t, s, "j", 0)
	r1, _ := readReplica(t, s, "j", 1)
	if !ok0 || r0.Primary.Node != "n3" || r0.Epoch <= before {
		t.Fatalf("slot 0 (primary refuses connections) after the leader took office: %+v (present %v); want promoted to n3 at an epoch > %d", r0, ok0, before)
	}
	if r1.Primary.Node != "n3" || r1.Epoch != live1.Epoch {
		t.Fatalf("slot 1 (primary answers) changed: %+v, was %+v", r1, live1)
	}
	if v[VerdictPromoted] != 1 || v[VerdictHealthy] != 1 || probes.Load() != 2 {
		t.Fatalf("verdicts %v after %d probes; want 1 promoted, 1 healthy, 2 probes", v, probes.Load())
	}
}
