package raftstore

import (
	"bytes"
	"errors"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	pb "github.com/raftps/raftps/api/raftpspb"
	"github.com/raftps/raftps/fsm"
)

// Writes that Apply would refuse whatever the state are refused before
// they reach the Raft log (issue 19 item 8): nothing is appended,
// replicated or fsynced for them.
func TestOversizedWritesNeverReachTheLog(t *testing.T) {
	c := mustCluster(t, 3)
	ctx := ctxT(t, 30*time.Second)
	f := c.follower(ctx)
	l := c.leader(ctx)
	// Every server's log is checked from here on: the leader may change
	// during the test (a loaded machine), and a new leader appends entries
	// of its own (a no-op, a barrier), never a command.
	last := map[*Store]uint64{}
	for _, s := range c.live() {
		last[s] = s.Raft().LastIndex()
	}
	big := bytes.Repeat([]byte("v"), fsm.MaxValueSize+1)
	put := func(k string, v []byte) *pb.RequestOp {
		return &pb.RequestOp{Request: &pb.RequestOp_RequestPut{RequestPut: &pb.PutRequest{Key: []byte(k), Value: v}}}
	}
	for _, tc := range []struct {
		name string
		call func() error
		want error
	}{
		{"value over MaxValueSize", func() error {
			_, err := f.Put(ctx, &pb.PutRequest{Key: []byte("k"), Value: big})
			return err
		}, fsm.ErrTooLarge},
		{"key over MaxKeySize", func() error {
			_, err := f.Put(ctx, &pb.PutRequest{Key: bytes.Repeat([]byte("k"), fsm.MaxKeySize+1), Value: []byte("v")})
			return err
		}, fsm.ErrTooLarge},
		{"empty key", func() error {
			_, err := l.Put(ctx, &pb.PutRequest{Value: []byte("v")})
			return err
		}, fsm.ErrInvalid},
		{"txn over MaxCommandSize", func() error {
			half := bytes.Repeat([]byte("v"), fsm.MaxValueSize)
			_, err := f.Txn(ctx, &pb.TxnRequest{Success: []*pb.RequestOp{put("a", half), put("b", half), put("c", half)}})
			return err
		}, fsm.ErrTooLarge},
		{"oversized put in the failure branch", func() error {
			_, err := f.Txn(ctx, &pb.TxnRequest{Failure: []*pb.RequestOp{put("a", big)}})
			return err
		}, fsm.ErrTooLarge},
		{"empty txn op", func() error {
			_, err := f.Txn(ctx, &pb.TxnRequest{Success: []*pb.RequestOp{{}}})
			return err
		}, fsm.ErrInvalid},
		{"invalid job spec", func() error {
			_, err := f.SubmitJob(ctx, &pb.SubmitJobRequest{Spec: &pb.JobSpec{Name: "j"}})
			return err
		}, fsm.ErrInvalid},
	} {
		if err := tc.call(); !errors.Is(err, tc.want) {
			t.Errorf("%s: %v, want %v", tc.name, err, tc.want)
		}
	}
	// A leader change in the middle, as a loaded machine makes, changes
	// nothing: the new leader appends entries of its own, never a refused
	// command. (A transfer that fails leaves the test as it was.)
	if err := l.Raft().LeadershipTransfer().Error(); err != nil {
		t.Logf("leadership transfer: %v", err)
	}
	if err := l.LinearizableRead(ctx); err != nil { // l has the new leader's entries
		t.Logf("read on %s: %v", l.cfg.ID, err)
	}
	cmd := &pb.Command{Type: pb.CommandType_COMMAND_PUT, Payload: make([]byte, fsm.MaxCommandSize+1)}
	if _, err := l.ApplyLocal(ctx, cmd); !errors.Is(err, fsm.ErrTooLarge) {
		t.Errorf("raw oversized command: %v, want ErrTooLarge", err)
	}
	for s, from := range last {
		if idx := commandsAfter(t, s, from); len(idx) > 0 {
			t.Fatalf("refused writes were proposed: %s's log has commands at %v after index %d", s.cfg.ID, idx, from)
		}
	}
	// A leader change can leave a put's outcome unknown
	// (raft.ErrLeadershipLost); putting the same value again is what a
	// client does then. Any other error is a refusal.
	for {
		_, err := f.Put(ctx, &pb.PutRequest{Key: []byte("k"), Value: bytes.Repeat([]byte("v"), fsm.MaxValueSize)})
		if err == nil {
			break
		}
		if !errors.Is(err, raft.ErrLeadershipLost) || ctx.Err() != nil {
			t.Fatalf("a maximal value was refused: %v", err)
		}
		t.Logf("maximal put: %v; again", err)
	}
}

// commandsAfter returns the indexes of s's log entries after index from
// that carry commands (raft.LogCommand: what Apply proposes).
func commandsAfter(tb testing.TB, s *Store, from uint64) []uint64 {
	tb.Helper()
	var idx []uint64
	for i := from + 1; i <= s.Raft().LastIndex(); i++ {
		var e raft.Log
		if err := s.logs.GetLog(i, &e); err != nil {
			tb.Fatalf("%s: log entry %d: %v", s.cfg.ID, i, err)
		}
		if e.Type == raft.LogCommand {
			idx = append(idx, i)
		}
	}
	return idx
}
