package raftstore

import (
	"context"
	"io"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"github.com/raftps/raftps/fsm"
)

// TestHeartbeatWaitsForTheRaftLoop (hashicorp/raft#695): a heartbeat of a
// newer term that reaches a leader while its Raft loop is busy (here: a
// write stalled in the log store) is answered only once the loop takes
// it, so it cannot make the node a follower of that term between the
// loop's group commit and dispatchLogs, which would stamp the old
// leader's entries with the new leader's term. With NetworkTransport's
// fast path the heartbeat was answered at once, the term raised under
// the stalled loop.
func TestHeartbeatWaitsForTheRaftLoop(t *testing.T) {
	ctx := ctxT(t, 60*time.Second)
	cfg := testConfig(t, "n1", t.TempDir())
	cfg.Bootstrap = true
	s, err := New(cfg, fsm.New(nil), directForwarder{&cluster{tb: t}})
	if err != nil {
		t.Fatal(err)
	}
	var sl *stallLogs
	s.wrapLogs = func(l raft.LogStore) raft.LogStore { sl = newStallLogs(l); return sl }
	if err := s.Open(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	if err := s.WaitForLeader(ctx); err != nil {
		t.Fatal(err)
	}
	term := s.raft.CurrentTerm()

	sl.stall()
	t.Cleanup(sl.release) // runs before the store closes
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go put(wctx, t, s, "/stall", "v") //nolint:errcheck // blocks until released
	select {
	case <-sl.blocked:
	case <-ctx.Done():
		t.Fatal("the leader's log write never reached the log store")
	}

	// A heartbeat from a leader of the next term, over the node's TCP
	// transport.
	client, err := raft.NewTCPTransport("127.0.0.1:0", nil, 1, 30*time.Second, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	answered := make(chan error, 1)
	var resp raft.AppendEntriesResponse
	go func() {
		answered <- client.AppendEntries("n1", raft.ServerAddress(s.Addr()), &raft.AppendEntriesRequest{
			RPCHeader: raft.RPCHeader{ProtocolVersion: raft.ProtocolVersionMax, ID: []byte("n9"), Addr: []byte(client.LocalAddr())},
			Term:      term + 1,
		}, &resp)
	}()
	select {
	case err := <-answered:
		t.Fatalf("a heartbeat of term %d was answered (err %v, term %d) while the leader's Raft loop was stalled: it ran beside the loop",
			term+1, err, resp.Term)
	case <-time.After(time.Second):
	}
	if got := s.raft.CurrentTerm(); got != term {
		t.Fatalf("term %d under the stalled loop, want %d", got, term)
	}
	sl.release()
	select {
	case err := <-answered:
		if err != nil || resp.Term != term+1 {
			t.Fatalf("heartbeat after the loop resumed: err %v, term %d; want term %d", err, resp.Term, term+1)
		}
	case <-ctx.Done():
		t.Fatal("the heartbeat was not answered once the loop resumed")
	}
}
