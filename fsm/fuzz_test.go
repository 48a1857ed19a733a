package fsm

import (
	"bytes"
	"errors"
	"sync"
	"testing"

	"github.com/hashicorp/raft"
	"google.golang.org/protobuf/proto"

	pb "github.com/raftps/raftps/api/raftpspb"
)

// fuzzBase is a populated state (as a snapshot) that fuzz inputs start from,
// so commands find keys, leases and a job to act on.
var fuzzBase = sync.OnceValue(func() []byte {
	f := newTestFSM(quietTB{})
	populate(quietTB{}, f)
	return mustSnapshot(quietTB{}, f.FSM)
})

// quietTB is a testing.TB for building shared fixtures outside a test.
type quietTB struct{ testing.TB }

func (quietTB) Helper()               {}
func (quietTB) Log(...any)            {}
func (quietTB) Cleanup(func())        {}
func (quietTB) Fatal(args ...any)     { panic(args) }
func (quietTB) Fatalf(string, ...any) { panic("fixture failed") }

func seedEntries(tb testing.TB) [][]byte {
	big := bytes.Repeat([]byte("v"), 300)
	cmds := [][]*pb.Command{
		{putCmd(tb, "a", "1")},
		{mustCmd(tb, pb.CommandType_COMMAND_PUT, &pb.PutRequest{Key: []byte("/jobs/j0/ps/0"), Value: big, Lease: 1, PrevKv: true})},
		{mustCmd(tb, pb.CommandType_COMMAND_DELETE_RANGE, &pb.DeleteRangeRequest{Key: []byte("/jobs/"), RangeEnd: []byte("/jobs0"), PrevKv: true})},
		{mustCmd(tb, pb.CommandType_COMMAND_TXN, &pb.TxnRequest{
			Compare: []*pb.Compare{cmpOp("t1", pb.Compare_VALUE, pb.Compare_EQUAL, "a"), cmpOp("t2", pb.Compare_MOD, pb.Compare_LESS, 100)},
			Success: []*pb.RequestOp{opPut("t1", "b"), opDel("t2"), opGet("t1")},
			Failure: []*pb.RequestOp{opPut("x", "y")},
		})},
		{mustCmd(tb, pb.CommandType_COMMAND_LEASE_GRANT, &pb.LeaseGrantRequest{Ttl: 5}),
			mustCmd(tb, pb.CommandType_COMMAND_LEASE_REVOKE, &pb.LeaseRevokeRequest{Id: 1})},
		{mustCmd(tb, pb.CommandType_COMMAND_LEASE_REVOKE, &pb.LeaseRevokeRequest{Id: 50})},
		{mustCmd(tb, pb.CommandType_COMMAND_COMPACT, &pb.CompactRequest{Revision: 10})},
		{mustCmd(tb, pb.CommandType_COMMAND_SUBMIT_JOB, &pb.SubmitJobRequest{Spec: testJobSpec("j2")})},
		{mustCmd(tb, pb.CommandType_COMMAND_GET_TASK, &pb.GetTaskRequest{Job: "mnist", Trainer: "t1"}),
			mustCmd(tb, pb.CommandType_COMMAND_TASK_FINISHED, &pb.TaskFinishedRequest{Job: "mnist", TaskId: 0, Epoch: 1, Trainer: "t0"}),
			mustCmd(tb, pb.CommandType_COMMAND_TASK_FAILED, &pb.TaskFailedRequest{Job: "mnist", TaskId: 1, Epoch: 2, Trainer: "t1"})},
		{mustCmd(tb, pb.CommandType_COMMAND_EXPIRE_TASKS, &pb.ExpireTasksRequest{}),
			mustCmd(tb, pb.CommandType_COMMAND_REQUEUE_TRAINER, &pb.RequeueTrainerRequest{Job: "mnist", Trainer: "t0"}),
			mustCmd(tb, pb.CommandType_COMMAND_JOB_EVENT, &pb.JobEvent{Job: "mnist", Type: pb.JobEvent_EVAL_REPORTED, Loss: 0.5}),
			mustCmd(tb, pb.CommandType_COMMAND_CANCEL_JOB, &pb.CancelJobRequest{Name: "mnist"})},
		{{Type: 99, Payload: []byte{1, 2}}},
	}
	var out [][]byte
	for i, c := range cmds {
		b, err := EncodeEntry(int64(i+1)*1e9, c)
		if err != nil {
			tb.Fatal(err)
		}
		out = append(out, b)
	}
	return append(out, []byte{0xff}, nil)
}

// FuzzApplyEntry feeds arbitrary bytes to Apply as a log entry. It must
// never panic; the state must stay consistent; a rejected command must
// change nothing; and applying the entry whole must give the same state as
// applying its commands one by one (determinism and per-command atomicity).
// A state reached must also survive a snapshot round trip.
func FuzzApplyEntry(f *testing.F) {
	for _, b := range seedEntries(f) {
		f.Add(b)
	}
	base := fuzzBase()
	f.Fuzz(func(t *testing.T, data []byte) {
		whole := New(nil)
		if err := restore(whole, base); err != nil {
			t.Fatal(err)
		}
		before := dumpState(t, whole)
		var halted error
		whole.halt = func(_ uint64, err error) { halted = err }
		r := whole.Apply(&raft.Log{Index: 1000, Type: raft.LogCommand, Data: data}).(*ApplyResult)
		checkInvariants(t, whole)
		if halted != nil {
			// An entry this replica cannot apply: it halts with nothing applied.
			if !errors.Is(halted, ErrUnknownCommand) || !equalDump(before, dumpState(t, whole)) {
				t.Fatalf("halt (%v) changed the state", halted)
			}
			return
		}
		if whole.AppliedIndex() != 1000 {
			t.Fatalf("applied index %d", whole.AppliedIndex())
		}
		var entry pb.Entry
		if proto.Unmarshal(data, &entry) != nil {
			if r.Err == nil {
				t.Fatal("undecodable entry accepted")
			}
			after := dumpState(t, whole)
			after.Applied = before.Applied
			if !equalDump(before, after) {
				t.Fatal("undecodable entry changed the state")
			}
			return
		}
		if r.Err != nil || len(r.Results) != len(entry.Commands) {
			t.Fatalf("entry error %v, %d results for %d commands", r.Err, len(r.Results), len(entry.Commands))
		}
		// One by one, checking atomicity of each rejected command.
		single := New(nil)
		if err := restore(single, base); err != nil {
			t.Fatal(err)
		}
		for i, cmd := range entry.Commands {
			prev := dumpState(t, single)
			d, _ := proto.Marshal(&pb.Entry{NowUnixNano: entry.NowUnixNano, MonoNano: entry.MonoNano, Commands: []*pb.Command{cmd}})
			rr := single.Apply(&raft.Log{Index: 1000, Type: raft.LogCommand, Data: d}).(*ApplyResult)
			res := rr.Results[0]
			if !proto.Equal(res, r.Results[i]) {
				t.Fatalf("command %d: whole %v, alone %v", i, r.Results[i], res)
			}
			if res.Error != nil {
				now := dumpState(t, single)
				now.Applied = prev.Applied
				if !equalDump(prev, now) {
					t.Fatalf("rejected command %d (%v) changed the state", i, res.Error)
				}
			}
		}
		dw, ds := dumpState(t, whole), dumpState(t, single)
		ds.Applied = dw.Applied
		if !equalDump(dw, ds) {
			t.Fatal("whole entry and one-by-one differ")
		}
		// Snapshot round trip of the reached state.
		snap := mustSnapshot(t, whole)
		again := New(nil)
		if err := restore(again, snap); err != nil {
			t.Fatalf("restore of a reachable state: %v", err)
		}
		if !equalDump(dumpState(t, whole), dumpState(t, again)) {
			t.Fatal("snapshot round trip differs")
		}
	})
}

// FuzzRestore feeds arbitrary bytes to Restore, as they are and sealed with
// a valid header and checksum (so the record validation is reached). It must
// never panic; on error the state is unchanged; on success the state is
// consistent and snapshots back to a state that restores identically.
func FuzzRestore(f *testing.F) {
	base := fuzzBase()
	f.Add(base)
	f.Add(base[len(snapMagic) : len(base)-6]) // its records, to be sealed
	f.Add([]byte{})
	small := newTestFSM(f)
	small.put("a", "1")
	small.grant(0, 3)
	sb := mustSnapshot(f, small.FSM)
	f.Add(sb)
	f.Add(sb[len(snapMagic) : len(sb)-6])
	f.Fuzz(func(t *testing.T, data []byte) {
		for _, in := range [][]byte{data, seal(data)} {
			g := New(nil)
			g.put1(t)
			before := dumpState(t, g)
			if err := restore(g, in); err != nil {
				if !equalDump(before, dumpState(t, g)) {
					t.Fatalf("failed restore (%v) changed the state", err)
				}
				continue
			}
			checkInvariants(t, g)
			h := New(nil)
			if err := restore(h, mustSnapshot(t, g)); err != nil {
				t.Fatalf("re-restore: %v", err)
			}
			if !equalDump(dumpState(t, g), dumpState(t, h)) {
				t.Fatal("snapshot of a restored state differs")
			}
		}
	})
}

// put1 gives an FSM a little state to lose.
func (f *FSM) put1(tb testing.TB) {
	d, _ := EncodeEntry(1, []*pb.Command{putCmd(tb, "x", "y"), mustCmd(tb, pb.CommandType_COMMAND_LEASE_GRANT, &pb.LeaseGrantRequest{Ttl: 1})})
	f.Apply(&raft.Log{Index: 1, Type: raft.LogCommand, Data: d})
}
