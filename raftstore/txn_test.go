package raftstore

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	pb "github.com/raftps/raftps/api/raftpspb"
	"github.com/raftps/raftps/fsm"
	"github.com/raftps/raftps/schema"
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

// TestBackendQuota is issue 32 hole 6 (cluster-wide): the store had no
// bound on the bytes clients write. Past Config.QuotaBackendBytes a write
// is refused with fsm.ErrNoSpace and the NOSPACE alarm is armed: every
// replica then refuses writes that add bytes, even after space is freed,
// until an admin deletes the alarm key; deletes go on meanwhile.
func TestBackendQuota(t *testing.T) {
	c := mustCluster(t, 3)
	ctx := ctxT(t, 60*time.Second)
	for _, s := range c.live() {
		s.cfg.QuotaBackendBytes = 200 << 10
	}
	value := strings.Repeat("v", 20<<10)
	var err error
	n := 0
	for ; err == nil; n++ {
		if n > 20 {
			t.Fatalf("%d puts of 20 KiB under a quota of 200 KiB, none refused", n)
		}
		_, err = applyRetry(ctx, c.follower(ctx), putCmd(t, fmt.Sprintf("k%d", n), value, 0))
	}
	if !errors.Is(err, fsm.ErrNoSpace) || !strings.Contains(err.Error(), "quota") {
		t.Fatalf("put past the quota: %v, want ErrNoSpace naming the quota", err)
	}
	waitAlarm := func(s *Store) {
		for {
			if r, _ := s.fsm.Range(&pb.RangeRequest{Key: []byte(schema.NoSpaceAlarmKey), CountOnly: true}); r.GetCount() == 1 {
				return
			}
			select {
			case <-ctx.Done():
				t.Fatalf("%s: no NOSPACE alarm key", s.cfg.ID)
			case <-time.After(10 * time.Millisecond):
			}
		}
	}
	for _, s := range c.live() {
		waitAlarm(s)
	}
	for i := 0; i < n-1; i++ {
		if _, err := applyRetry(ctx, c.leader(ctx), mustDelete(t, fmt.Sprintf("k%d", i))); err != nil {
			t.Fatalf("delete under the alarm: %v", err)
		}
	}
	if _, err := put(ctx, t, c.leader(ctx), "small", "1"); !errors.Is(err, fsm.ErrNoSpace) {
		t.Fatalf("put with the alarm armed and space freed: %v, want ErrNoSpace until disarmed", err)
	}
	if _, err := applyRetry(ctx, c.leader(ctx), mustDelete(t, schema.NoSpaceAlarmKey)); err != nil {
		t.Fatal(err)
	}
	mustPut(ctx, t, c.leader(ctx), "small", "1")
}

func mustDelete(t *testing.T, key string) *pb.Command {
	t.Helper()
	cmd, err := fsm.NewCommand(pb.CommandType_COMMAND_DELETE_RANGE, &pb.DeleteRangeRequest{Key: []byte(key)})
	if err != nil {
		t.Fatal(err)
	}
	return cmd
}
