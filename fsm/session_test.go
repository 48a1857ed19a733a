package fsm

import (
	"errors"
	"fmt"
	"testing"

	"google.golang.org/protobuf/proto"

	pb "github.com/raftps/raftps/api/raftpspb"
)

// sessCmd is cmd with a client identity.
func sessCmd(cmd *pb.Command, client string, seq, acked uint64) *pb.Command {
	c := proto.Clone(cmd).(*pb.Command)
	c.ClientId, c.Seq, c.Acked = client, seq, acked
	return c
}

// TestRetryAppliesOnce (issue 12, item 6): a command proposed again with
// the same client id and seq (a retry after an unknown outcome) is not
// applied again: a GetTask retry gets the same task, not a second one, and
// a SubmitJob retry gets its first answer, not "already exists".
func TestRetryAppliesOnce(t *testing.T) {
	f := newTestFSM(t)
	submit := sessCmd(mustCmd(t, pb.CommandType_COMMAND_SUBMIT_JOB, &pb.SubmitJobRequest{Spec: testJobSpec("j")}), "c1", 1, 1)
	first := f.apply(0, submit)[0]
	if err := ResultError(first); err != nil {
		t.Fatal(err)
	}
	if again := f.apply(0, submit)[0]; ResultError(again) != nil || !proto.Equal(again, first) {
		t.Fatalf("SubmitJob retry: %v, want the first result", ResultError(again))
	}

	get := sessCmd(mustCmd(t, pb.CommandType_COMMAND_GET_TASK, &pb.GetTaskRequest{Job: "j", Trainer: "t1"}), "c1", 2, 2)
	r1 := f.apply(0, get)[0]
	r2 := f.apply(0, get)[0]
	if !proto.Equal(r1, r2) {
		t.Fatal("GetTask retry got another result")
	}
	var pending int
	for _, task := range f.Jobs().Pending("j") {
		if task.Trainer == "t1" {
			pending++
		}
	}
	if pending != 1 {
		t.Fatalf("trainer t1 holds %d tasks after a retried GetTask, want 1", pending)
	}
	// Another seq is another request; no identity, no deduplication.
	r3 := f.apply(0, sessCmd(get, "c1", 3, 3))[0]
	if proto.Equal(r1, r3) {
		t.Fatal("a new seq got the cached result")
	}
	plain := mustCmd(t, pb.CommandType_COMMAND_PUT, &pb.PutRequest{Key: []byte("k"), Value: []byte("v")})
	if a, b := f.apply(0, plain)[0], f.apply(0, plain)[0]; a.Revision == b.Revision {
		t.Fatal("a command without a client id was deduplicated")
	}
}

// TestRetryOfRejectedCommand: a rejected command's retry gets the same
// rejection; a different client with the same seq is independent.
func TestRetryOfRejectedCommand(t *testing.T) {
	f := newTestFSM(t)
	bad := sessCmd(mustCmd(t, pb.CommandType_COMMAND_PUT, &pb.PutRequest{}), "c1", 1, 1)
	r1, r2 := f.apply(0, bad)[0], f.apply(0, bad)[0]
	if !errors.Is(ResultError(r1), ErrInvalid) || !proto.Equal(r1, r2) {
		t.Fatalf("rejected retry: %v then %v", ResultError(r1), ResultError(r2))
	}
	ok := sessCmd(mustCmd(t, pb.CommandType_COMMAND_PUT, &pb.PutRequest{Key: []byte("k")}), "c2", 1, 1)
	if err := ResultError(f.apply(0, ok)[0]); err != nil {
		t.Fatalf("client c2 seq 1: %v", err)
	}
}

// TestSessionAckAndBounds: acked lets the FSM forget Results; a retry of a
// forgotten seq is refused (outcome unknown), not applied again; a client
// keeps at most MaxSessionResults Results; at most MaxClientSessions
// clients are kept, the least recently active forgotten first.
func TestSessionAckAndBounds(t *testing.T) {
	f := newTestFSM(t)
	put := func(client string, seq, acked uint64, key string) *pb.Result {
		return f.apply(0, sessCmd(putCmd(t, key, "v"), client, seq, acked))[0]
	}
	put("c1", 1, 1, "a")
	put("c1", 2, 1, "b")
	put("c1", 3, 3, "c") // acks 1 and 2
	rev := f.Revision()
	if err := ResultError(put("c1", 1, 3, "a")); !errors.Is(err, ErrFailedPrecondition) {
		t.Fatalf("retry of an acknowledged seq: %v, want ErrFailedPrecondition", err)
	}
	if f.Revision() != rev {
		t.Fatal("a refused retry was applied")
	}
	if got := len(f.sessions.byID["c1"].results); got != 1 {
		t.Fatalf("c1 keeps %d results after acking 2, want 1", got)
	}

	for seq := uint64(1); seq <= MaxSessionResults+10; seq++ {
		put("many", seq, 1, "m")
	}
	if got := len(f.sessions.byID["many"].results); got != MaxSessionResults {
		t.Fatalf("a client without acks keeps %d results, want %d", got, MaxSessionResults)
	}
	if err := ResultError(put("many", 1, 1, "m")); !errors.Is(err, ErrFailedPrecondition) {
		t.Fatalf("retry of an evicted seq: %v, want ErrFailedPrecondition", err)
	}

	if testing.Short() {
		return
	}
	cmds := make([]*pb.Command, 0, 256)
	for i := 0; i < MaxClientSessions+5; i++ {
		cmds = append(cmds, sessCmd(putCmd(t, "x", "v"), fmt.Sprintf("client-%05d", i), 1, 1))
		if len(cmds) == cap(cmds) {
			f.apply(0, cmds...)
			cmds = cmds[:0]
		}
	}
	f.apply(0, cmds...)
	if got := len(f.sessions.byID); got != MaxClientSessions {
		t.Fatalf("%d sessions, want %d", got, MaxClientSessions)
	}
	if _, ok := f.sessions.byID["c1"]; ok {
		t.Fatal("the least recently active client was kept")
	}
}

// TestSessionsSurviveSnapshot: a replica restored from a snapshot answers
// a retry with the first Result, as the replica that applied it does
// (else the two would diverge on the retry), and a big Result is kept as
// "applied, response too large".
func TestSessionsSurviveSnapshot(t *testing.T) {
	f := newTestFSM(t)
	f.do(pb.CommandType_COMMAND_SUBMIT_JOB, &pb.SubmitJobRequest{Spec: testJobSpec("j")}, nil)
	get := sessCmd(mustCmd(t, pb.CommandType_COMMAND_GET_TASK, &pb.GetTaskRequest{Job: "j", Trainer: "t1"}), "c1", 7, 5)
	first := f.apply(0, get)[0]
	big := make([]byte, MaxCachedResultBytes)
	f.put("big", string(big))
	txn := sessCmd(mustCmd(t, pb.CommandType_COMMAND_TXN, &pb.TxnRequest{Success: []*pb.RequestOp{
		{Request: &pb.RequestOp_RequestRange{RequestRange: &pb.RangeRequest{Key: []byte("big")}}}}}), "c2", 1, 1)
	if err := ResultError(f.apply(0, txn)[0]); err != nil {
		t.Fatal(err)
	}

	g := newTestFSM(t)
	if err := restore(g.FSM, mustSnapshot(t, f.FSM)); err != nil {
		t.Fatal(err)
	}
	g.index = f.index
	if again := g.apply(0, get)[0]; !proto.Equal(again, first) {
		t.Fatal("the restored replica did not answer the retry with the first result")
	}
	if again := f.apply(0, get)[0]; !proto.Equal(again, first) {
		t.Fatal("the original replica did not answer the retry with the first result")
	}
	for _, r := range []*testFSM{f, g} {
		if err := ResultError(r.apply(0, txn)[0]); !errors.Is(err, ErrFailedPrecondition) {
			t.Fatalf("retry of a command whose response was too large to keep: %v", err)
		}
	}
	if !bytesEqual(mustSnapshot(t, f.FSM), mustSnapshot(t, g.FSM)) {
		t.Fatal("the replicas differ after the same retries")
	}
}

func bytesEqual(a, b []byte) bool { return string(a) == string(b) }
