package fsm

import (
	"errors"
	"testing"

	"github.com/hashicorp/raft"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/encoding/protowire"

	pb "github.com/raftps/raftps/api/raftpspb"
)

// TestBadInput: input every replica rejects identically. (Unknown command
// types halt the replica instead: halt_test.go.)
func TestBadInput(t *testing.T) {
	cases := []struct {
		name     string
		data     []byte // entry; nil means build from cmds
		cmds     []*pb.Command
		entryErr error
		cmdErrs  []error // per command; nil entry = success
	}{
		{
			name:     "undecodable entry",
			data:     []byte{0xff, 0xff, 0xff},
			entryErr: ErrMalformed,
		},
		{
			name:     "truncated entry",
			data:     protowire.AppendTag(nil, 2, protowire.BytesType),
			entryErr: ErrMalformed,
		},
		{
			name:    "malformed payload",
			cmds:    []*pb.Command{{Type: pb.CommandType_COMMAND_PUT, Payload: []byte{0x0a, 0x10, 'k'}}},
			cmdErrs: []error{ErrMalformed},
		},
		{
			name:    "invalid UTF-8 in a string field",
			cmds:    []*pb.Command{{Type: pb.CommandType_COMMAND_CANCEL_JOB, Payload: []byte{0x0a, 0x01, 0xff}}},
			cmdErrs: []error{ErrMalformed},
		},
		{
			name: "bad commands do not stop good ones",
			cmds: []*pb.Command{
				{Type: pb.CommandType_COMMAND_PUT, Payload: []byte{0x0a, 0x10, 'k'}},
				putCmd(t, "after", "1"),
				{Type: pb.CommandType_COMMAND_TXN, Payload: []byte{0xff}},
			},
			cmdErrs: []error{ErrMalformed, nil, ErrMalformed},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			f := newTestFSM(t)
			f.put("a", "1")
			f.grant(0, 5)
			before := dumpState(t, f.FSM)
			data := tc.data
			if data == nil {
				var err error
				if data, err = EncodeEntry(42, tc.cmds); err != nil {
					t.Fatal(err)
				}
			}
			r := f.applyRaw(data)
			if r.Index != f.index || f.AppliedIndex() != f.index {
				t.Fatalf("index %d applied %d, want %d", r.Index, f.AppliedIndex(), f.index)
			}
			if tc.entryErr != nil {
				wantErr(t, r.Err, tc.entryErr)
				if r.Results != nil {
					t.Fatalf("results %v", r.Results)
				}
			} else if r.Err != nil {
				t.Fatal(r.Err)
			}
			changed := false
			for i, want := range tc.cmdErrs {
				err := ResultError(r.Results[i])
				wantErr(t, err, want)
				if want != nil && Code(err) != codes.InvalidArgument {
					t.Fatalf("code %v", Code(err))
				}
				changed = changed || want == nil
			}
			after := dumpState(t, f.FSM)
			after.Applied = before.Applied
			if !changed && !equalDump(before, after) {
				t.Fatal("state changed")
			}
			checkInvariants(t, f.FSM)
		})
	}
}

func TestNonCommandLog(t *testing.T) {
	f := newTestFSM(t)
	for i, typ := range []raft.LogType{raft.LogNoop, raft.LogConfiguration, raft.LogBarrier} {
		r := f.Apply(&raft.Log{Index: uint64(i + 1), Type: typ, Data: []byte{0xff}}).(*ApplyResult)
		if r.Index != uint64(i+1) || r.Err != nil || r.Results != nil {
			t.Fatalf("%v: %+v", typ, r)
		}
	}
	if f.Revision() != 1 || f.AppliedIndex() != 3 {
		t.Fatalf("revision %d applied %d", f.Revision(), f.AppliedIndex())
	}
}

func TestEmptyEntry(t *testing.T) {
	f := newTestFSM(t)
	if rs := f.apply(7); len(rs) != 0 || f.AppliedIndex() != 1 {
		t.Fatalf("results %v", rs)
	}
}

func TestResultErrorRoundTrip(t *testing.T) {
	for _, sentinel := range []error{
		ErrUnknownCommand, ErrMalformed, ErrInvalid, ErrTooLarge, ErrLeaseNotFound, ErrLeaseExists,
		ErrCompacted, ErrFutureRevision, ErrNotFound, ErrExists, ErrFailedPrecondition,
	} {
		t.Run(sentinel.Error(), func(t *testing.T) {
			err := ResultError(errResult(3, errors.Join(sentinel)))
			if !errors.Is(err, sentinel) || Code(err) != Code(sentinel) {
				t.Fatalf("round trip of %v gave %v (%v)", sentinel, err, Code(err))
			}
		})
	}
	t.Run("bare code falls back to the general sentinel", func(t *testing.T) {
		for code, want := range map[codes.Code]error{
			codes.InvalidArgument: ErrInvalid, codes.NotFound: ErrNotFound, codes.AlreadyExists: ErrExists,
			codes.FailedPrecondition: ErrFailedPrecondition, codes.OutOfRange: ErrCompacted,
		} {
			err := ResultError(&pb.Result{Error: &pb.Status{Code: int32(code), Message: "from a peer"}})
			if !errors.Is(err, want) || err.Error() != "from a peer" {
				t.Fatalf("%v: %v", code, err)
			}
		}
	})
	t.Run("other codes and success", func(t *testing.T) {
		if err := ResultError(&pb.Result{Error: &pb.Status{Code: int32(codes.Internal), Message: "boom"}}); err == nil || err.Error() != "boom" {
			t.Fatalf("%v", err)
		}
		if ResultError(&pb.Result{}) != nil || ResultError(nil) != nil {
			t.Fatal("error for success")
		}
	})
}

type recorder struct{ notes []Notification }

func (r *recorder) Applied(n Notification) { r.notes = append(r.notes, n) }

func TestObserver(t *testing.T) {
	f := newTestFSM(t)
	rec := &recorder{}
	f.SetObserver(rec)
	f.apply(100, putCmd(t, "a", "1"),
		mustCmd(t, pb.CommandType_COMMAND_LEASE_GRANT, &pb.LeaseGrantRequest{Id: 9, Ttl: 30}),
		mustCmd(t, pb.CommandType_COMMAND_LEASE_GRANT, &pb.LeaseGrantRequest{Id: 9, Ttl: 30})) // rejected
	f.apply(200, mustCmd(t, pb.CommandType_COMMAND_LEASE_REVOKE, &pb.LeaseRevokeRequest{Id: 9}))
	f.applyRaw([]byte{0xff})
	if len(rec.notes) != 3 {
		t.Fatalf("%d notifications", len(rec.notes))
	}
	n := rec.notes[0]
	if n.Index != 1 || n.Revision != 2 || n.NowUnixNano != 100 || len(n.LeasesGranted) != 1 || n.LeasesGranted[0].ID != 9 || n.LeasesGranted[0].TTL != 30 {
		t.Fatalf("first %+v", n)
	}
	if n := rec.notes[1]; n.Index != 2 || n.NowUnixNano != 200 || len(n.LeasesRevoked) != 1 || n.LeasesRevoked[0] != 9 {
		t.Fatalf("second %+v", n)
	}
	if n := rec.notes[2]; n.Index != 3 || n.Revision != 2 {
		t.Fatalf("third %+v", n)
	}
	f.SetObserver(nil)
	f.put("b", "2")
	if len(rec.notes) != 3 {
		t.Fatal("notified after removal")
	}
}

// panicQueue panics in Submit, standing in for a bug a bad command reaches.
type panicQueue struct{ JobQueue }

func (panicQueue) Submit(int64, *pb.SubmitJobRequest) (*pb.SubmitJobResponse, error) {
	panic("boom")
}

func TestHandlerPanicIsRecovered(t *testing.T) {
	f := newTestFSM(t)
	f.jobs = panicQueue{f.jobs}
	rs := f.apply(1, mustCmd(t, pb.CommandType_COMMAND_SUBMIT_JOB, &pb.SubmitJobRequest{}), putCmd(t, "a", "1"))
	if rs[0].Error.GetCode() != int32(codes.Internal) || rs[1].Error != nil || f.get("a") == nil {
		t.Fatalf("results %v", rs)
	}
}

func TestEveryCommandTypeIsRegistered(t *testing.T) {
	for v, name := range pb.CommandType_name {
		_, ok := handlers[pb.CommandType(v)]
		if ok == (v == 0) {
			t.Errorf("%s registered: %v", name, ok)
		}
	}
}
