package fsm

import (
	"errors"
	"fmt"
	"testing"

	"github.com/hashicorp/raft"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	pb "github.com/raftps/raftps/api/raftpspb"
)

// applyRecovering applies data as log entry index and returns what Apply
// panicked with (nil if it returned).
func applyRecovering(f *FSM, index uint64, data []byte) (p any) {
	defer func() { p = recover() }()
	f.Apply(&raft.Log{Index: index, Term: 1, Type: raft.LogCommand, Data: data})
	return nil
}

// TestUnknownCommandHalts is issue 12 item 10: a replica that meets a
// committed command it cannot apply (a newer version's command type, or
// fields it does not know in the entry or a command envelope) must not
// carry on, since the replicas that can apply it would diverge from it. It
// halts (panics out of Apply: the process ends) with nothing of the entry
// applied and the applied index not advanced, so a restart of an upgraded
// binary replays the entry. Before the fix the command was rejected, the
// node carried on and the applied index advanced.
func TestUnknownCommandHalts(t *testing.T) {
	withField := func(m proto.Message, num protowire.Number) []byte {
		b, err := proto.Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		b = protowire.AppendTag(b, num, protowire.VarintType)
		return protowire.AppendVarint(b, 7)
	}
	put := putCmd(t, "k", "v")
	unknownCmdField := &pb.Command{}
	if err := proto.Unmarshal(withField(put, 99), unknownCmdField); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		data func() []byte
	}{
		{"unknown type", func() []byte { return mustEntry(t, 5, put, &pb.Command{Type: 999}) }},
		{"COMMAND_UNKNOWN", func() []byte { return mustEntry(t, 5, &pb.Command{Type: pb.CommandType_COMMAND_UNKNOWN}) }},
		{"unknown entry field", func() []byte { return withField(&pb.Entry{NowUnixNano: 5, Commands: []*pb.Command{put}}, 99) }},
		{"unknown command field", func() []byte { return mustEntry(t, 5, unknownCmdField) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newTestFSM(t)
			f.put("a", "1")
			before := dumpState(t, f.FSM)
			p := applyRecovering(f.FSM, f.index+1, tc.data())
			if p == nil {
				t.Fatal("Apply carried on past an entry this replica cannot apply")
			}
			if !equalDump(before, dumpState(t, f.FSM)) {
				t.Fatal("the halted entry changed the state or the applied index")
			}
			// A test hook sees the same error, wrapping ErrUnknownCommand.
			var got error
			f.halt = func(_ uint64, err error) { got = err }
			r := f.Apply(&raft.Log{Index: f.index + 1, Term: 1, Type: raft.LogCommand, Data: tc.data()}).(*ApplyResult)
			if !errors.Is(got, ErrUnknownCommand) || !errors.Is(r.Err, ErrUnknownCommand) {
				t.Fatalf("halt error %v, result %v; want ErrUnknownCommand", got, r.Err)
			}
			if !equalDump(before, dumpState(t, f.FSM)) {
				t.Fatal("the halted entry changed the state")
			}
		})
	}
	// The proposer never lets such an entry into the log.
	if _, err := EncodeEntryAt(1, 1, []*pb.Command{put, {Type: 999}}); !errors.Is(err, ErrUnknownCommand) {
		t.Fatalf("EncodeEntryAt of an unknown type: %v, want ErrUnknownCommand", err)
	}
	for t0 := range pb.CommandType_name {
		typ := pb.CommandType(t0)
		if want := typ != pb.CommandType_COMMAND_UNKNOWN; KnownCommand(typ) != want {
			t.Errorf("KnownCommand(%v) = %v", typ, !want)
		}
	}
}

func mustEntry(tb testing.TB, now int64, cmds ...*pb.Command) []byte {
	tb.Helper()
	b, err := proto.Marshal(&pb.Entry{NowUnixNano: now, Commands: cmds})
	if err != nil {
		tb.Fatal(fmt.Sprint(err))
	}
	return b
}
