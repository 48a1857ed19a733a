package agent

import (
	"context"
	"log/slog"
	"net"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"

	pb "github.com/raftps/raftps/api/raftpspb"
	"github.com/raftps/raftps/internal/testing/testutil"
	"github.com/raftps/raftps/pserver"
	"github.com/raftps/raftps/pserver/checkpoint"
	"github.com/raftps/raftps/schema"
)

// holderPeers lists one checkpoint holder at an address the test changes,
// and counts the calls (every Restore asks at least once).
type holderPeers struct {
	mu    sync.Mutex
	peer  checkpoint.Peer
	calls int
}

func (p *holderPeers) Peers() []checkpoint.Peer {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.calls++
	return []checkpoint.Peer{p.peer}
}

func (p *holderPeers) setAddr(addr string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.peer.Addr = addr
}

func (p *holderPeers) callCount() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.calls
}

// TestClaimDoesNotServeInitializerWhenHolderUnreachable: the only copy of
// slot 0's checkpoint is on node n2, which answers Unavailable. The agent
// claims the slot, its restore fails transiently, and it must neither serve
// the slot from the initializer nor write a restore record (which would
// publish a rollback to step 0); once n2 answers, a later claim restores
// the checkpoint's version.
func TestClaimDoesNotServeInitializerWhenHolderUnreachable(t *testing.T) {
	log := testutil.LoggerLevel(t, slog.LevelInfo)
	meta := newFakeMeta()
	spec := syncSpec("j", 1, 0)
	const version = 7

	// n2 holds version 7 of slot 0 (written under a claim of its own that
	// has since ended) and serves it over gRPC.
	st2, err := checkpoint.Open(t.TempDir(), log)
	if err != nil {
		t.Fatal(err)
	}
	defer st2.Close()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	pb.RegisterCheckpointStoreServer(srv, checkpoint.NewService(st2, log))
	go srv.Serve(lis)
	defer srv.Stop()
	mgr2, err := checkpoint.New(checkpoint.Config{NodeID: "n2", Store: st2, Meta: meta, Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	s, err := pserver.NewSlot(spec, 0, 1)
	if err != nil {
		t.Fatal(err)
	}
	snap := s.Snapshot()
	blobs := map[int32][]byte{}
	for v := range snap.VShards {
		if blobs[v], err = pserver.EncodeVShard(snap, v); err != nil {
			t.Fatal(err)
		}
	}
	s.Close()
	meta.put(schema.SlotKey("j", 0), []byte(`{"node":"n2","addr":"x","incarnation":1}`), 0)
	if _, err := mgr2.Writer("j", 0).Checkpoint(context.Background(), checkpoint.WriteRequest{Job: "j", Slot: 0, NumPservers: 1,
		Version: version, Step: snap.Step, Incarnation: 1, Blobs: blobs}); err != nil {
		t.Fatal(err)
	}
	meta.del(schema.SlotKey("j", 0))
	if p := pointer(meta, "j", 0); p.GetVersion() != version || len(p.GetReplicas()) != 1 || p.GetReplicas()[0] != "n2" {
		t.Fatalf("pointer %v, want version %d on n2 only", p, version)
	}

	peers := &holderPeers{peer: checkpoint.Peer{ID: "n2", Addr: "127.0.0.1:1", Host: "h2"}} // refuses: Unavailable
	meta.setJobs(running(spec))
	ta := startAgentPeers(t, meta, 1, 5, log, nil, peers)
	// A restore is tried, then several more reconciliation rounds run
	// (each claims and restores again) while n2 is unreachable.
	waitFor(t, "a restore tried", func() bool { return peers.callCount() >= 1 })
	start := meta.rounds()
	waitFor(t, "three more rounds", func() bool { return meta.rounds() >= start+3 })
	if _, ok := ta.served("j", 0); ok {
		t.Fatal("slot 0 served while its checkpoint's only holder is unreachable (from the initializer)")
	}
	if kv := meta.get(schema.RestoreKey("j", 0)); kv != nil {
		t.Fatalf("restore record written while the holder is unreachable: %s", kv.GetValue())
	}

	ta.a.mu.Lock()
	r, deferred := ta.a.retry[slotKey{"j", 0}]
	ta.a.mu.Unlock()
	if !deferred || r.wait < ta.a.cfg.Poll {
		t.Fatalf("slot 0 not deferred after an unreachable holder: %+v %v", r, deferred)
	}

	peers.setAddr(lis.Addr().String())
	waitFor(t, "slot served", func() bool { _, ok := ta.served("j", 0); return ok })
	waitFor(t, "restore record", func() bool { return meta.get(schema.RestoreKey("j", 0)) != nil })
	rec, err := schema.ParseRestore(meta.get(schema.RestoreKey("j", 0)).GetValue())
	if err != nil {
		t.Fatal(err)
	}
	if rec.GetVersion() != version || rec.GetSource() != "n2" {
		t.Fatalf("restore record %v, want version %d from n2", rec, version)
	}
	ta.a.mu.Lock()
	_, deferred = ta.a.retry[slotKey{"j", 0}]
	ta.a.mu.Unlock()
	if deferred {
		t.Fatal("slot 0 still deferred after its restore succeeded")
	}
}

// TestRestoreRetryBacksOff: each restore that cannot reach a holder
// defers the slot's next claim by a wait that starts at Poll, doubles,
// and stops at maxRestoreRetry.
func TestRestoreRetryBacksOff(t *testing.T) {
	const poll = 100 * time.Millisecond
	a := New(Config{NodeID: "n1", Poll: poll}, newFakeMeta(), pserver.NewServer(), nil, members(1))
	k, other := slotKey{"j", 0}, slotKey{"j", 1}
	now := time.Unix(1000, 0)
	if a.restoreDeferred(k, now) {
		t.Fatal("deferred before any failure")
	}
	want := poll
	for i := 0; i < 10; i++ {
		if got := a.deferRestore(k, now); got != want {
			t.Fatalf("failure %d: wait %v, want %v", i+1, got, want)
		}
		if !a.restoreDeferred(k, now.Add(want-time.Millisecond)) || a.restoreDeferred(k, now.Add(want)) {
			t.Fatalf("failure %d: not deferred for exactly %v", i+1, want)
		}
		want = min(2*want, maxRestoreRetry)
	}
	if want != maxRestoreRetry || a.restoreDeferred(other, now) {
		t.Fatalf("wait %v after 10 failures, want the cap %v; other slot deferred: %v", want, maxRestoreRetry, a.restoreDeferred(other, now))
	}
}
