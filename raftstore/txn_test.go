package raftstore

import (
	"errors"
	"fmt"
	"testing"
	"time"

	pb "github.com/raftps/raftps/api/raftpspb"
	"github.com/raftps/raftps/fsm"
)

func rangeOp(key string) *pb.RequestOp {
	return &pb.RequestOp{Request: &pb.RequestOp_RequestRange{RequestRange: &pb.RangeRequest{Key: []byte(key)}}}
}

// TestTxnGate is issue 32 hole 1 at the store: a read-only txn is served
// without the log (on the leader and on a follower), a txn over
// Config.MaxTxnOps is refused before the log, and a read-only txn command
// handed to the leader directly (a follower's forward) never enters it.
func TestTxnGate(t *testing.T) {
	c := mustCluster(t, 3)
	ctx := ctxT(t, 30*time.Second)
	l := c.leader(ctx)
	mustPut(ctx, t, l, "a", "1")
	fol := c.follower(ctx)
	for _, s := range []*Store{l, fol} {
		before := l.raft.LastIndex()
		req := &pb.TxnRequest{
			Compare: []*pb.Compare{{Key: []byte("a"), Target: pb.Compare_VALUE, Result: pb.Compare_EQUAL, TargetUnion: &pb.Compare_Value{Value: []byte("1")}}},
			Success: []*pb.RequestOp{rangeOp("a")},
		}
		resp, err := s.Txn(ctx, req)
		if err != nil || !resp.Succeeded || string(resp.Responses[0].GetResponseRange().Kvs[0].Value) != "1" {
			t.Fatalf("%s: read-only txn: %v %v", s.cfg.ID, resp, err)
		}
		if after := l.raft.LastIndex(); after != before {
			t.Fatalf("%s: a read-only txn went through the log (last index %d -> %d)", s.cfg.ID, before, after)
		}
	}

	ops := make([]*pb.RequestOp, DefaultMaxTxnOps+1)
	for i := range ops {
		ops[i] = rangeOp(fmt.Sprint(i))
	}
	before := l.raft.LastIndex()
	for _, req := range []*pb.TxnRequest{
		{Success: ops},
		{Failure: append(ops[:DefaultMaxTxnOps:DefaultMaxTxnOps], &pb.RequestOp{Request: &pb.RequestOp_RequestPut{RequestPut: &pb.PutRequest{Key: []byte("b")}}})},
	} {
		if _, err := fol.Txn(ctx, req); !errors.Is(err, fsm.ErrTooLarge) {
			t.Fatalf("txn of %d+%d ops: %v, want ErrTooLarge", len(req.Success), len(req.Failure), err)
		}
	}
	cmd, err := fsm.NewCommand(pb.CommandType_COMMAND_TXN, &pb.TxnRequest{Success: []*pb.RequestOp{rangeOp("a")}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := l.ApplyLocal(ctx, cmd); !errors.Is(err, fsm.ErrInvalid) {
		t.Fatalf("read-only txn command at the leader: %v, want ErrInvalid", err)
	}
	if after := l.raft.LastIndex(); after != before {
		t.Fatalf("refused txns reached the log (last index %d -> %d)", before, after)
	}
}
