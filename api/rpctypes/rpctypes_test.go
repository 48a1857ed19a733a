package rpctypes

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/raftps/raftps/api/errs"
)

// overWire rebuilds err's status from its proto, as a peer receives it.
func overWire(err error) error {
	return status.FromProto(status.Convert(err).Proto()).Err()
}

// TestRoundTrip: every sentinel of the table crosses ToStatus, the wire and
// FromStatus as itself, with its code and full message.
func TestRoundTrip(t *testing.T) {
	for _, e := range table {
		t.Run(e.reason, func(t *testing.T) {
			orig := fmt.Errorf("doing x: %w", e.err)
			st := ToStatus(orig)
			if c := status.Code(st); c != e.code {
				t.Fatalf("code %v, want %v", c, e.code)
			}
			back := FromStatus(overWire(st))
			if !errors.Is(back, e.err) {
				t.Fatalf("%v does not wrap %v after the round trip", back, e.err)
			}
			if !strings.Contains(back.Error(), orig.Error()) {
				t.Fatalf("message %q lost %q", back.Error(), orig.Error())
			}
			if c := status.Code(back); c != e.code {
				t.Fatalf("code after the round trip %v, want %v", c, e.code)
			}
			if c := Code(back); c != e.code {
				t.Fatalf("Code after the round trip %v, want %v", c, e.code)
			}
		})
	}
}

// TestReasonNamesTheSentinel: two sentinels of one code (NotFound: a lease
// and a job) stay apart even when the message names neither.
func TestReasonNamesTheSentinel(t *testing.T) {
	st := status.Convert(ToStatus(errs.ErrLeaseNotFound))
	p := st.Proto()
	p.Message = "gone" // no sentinel text left: only the detail tells
	back := FromStatus(status.FromProto(p).Err())
	if !errors.Is(back, errs.ErrLeaseNotFound) || errors.Is(back, errs.ErrNotFound) {
		t.Fatalf("%v: want the lease sentinel only", back)
	}
}

// TestFromStatusFallbacks: a status without our detail (an older peer, a
// handler's own status) maps by our sentinel's text within its code, then
// to the code's general sentinel; Unavailable and unknown codes to none.
func TestFromStatusFallbacks(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want error
	}{
		{status.Error(codes.NotFound, "fsm: lease not found: 7"), errs.ErrLeaseNotFound},
		{status.Error(codes.NotFound, `job "j" not found`), errs.ErrNotFound},
		{status.Error(codes.InvalidArgument, "fsm: too large: value"), errs.ErrTooLarge},
		{status.Error(codes.InvalidArgument, "spec is missing"), errs.ErrInvalid},
		{status.Error(codes.Unavailable, "raftstore: not leader; retry"), ErrNotLeader},
		{status.Error(codes.DeadlineExceeded, "context deadline exceeded"), context.DeadlineExceeded},
		// A sentinel's text under another code does not count.
		{status.Error(codes.Internal, "fsm: lease not found"), nil},
		{status.Error(codes.Unavailable, "connection reset"), nil},
	} {
		back := FromStatus(tc.err)
		if tc.want != nil && !errors.Is(back, tc.want) {
			t.Errorf("%v: does not wrap %v", tc.err, tc.want)
		}
		for _, e := range table {
			if e.err != tc.want && errors.Is(back, e.err) {
				t.Errorf("%v: wraps %v too", tc.err, e.err)
			}
		}
		if status.Code(back) != status.Code(tc.err) {
			t.Errorf("%v: code changed to %v", tc.err, status.Code(back))
		}
	}
}

// TestPassThrough: non-status errors, nil and mapped errors come back as
// they are; ToStatus keeps a foreign status and makes an unknown error
// Unavailable.
func TestPassThrough(t *testing.T) {
	if FromStatus(nil) != nil || ToStatus(nil) != nil {
		t.Fatal("nil must stay nil")
	}
	if FromStatus(io.EOF) != io.EOF {
		t.Fatal("io.EOF must stay io.EOF (end of a stream)")
	}
	mapped := FromStatus(ToStatus(errs.ErrExists))
	if FromStatus(mapped) != mapped {
		t.Fatal("a mapped error is mapped again")
	}
	if c := status.Code(ToStatus(status.Error(codes.PermissionDenied, "no"))); c != codes.PermissionDenied {
		t.Fatalf("foreign status: %v", c)
	}
	if c := status.Code(ToStatus(errors.New("raft: leadership lost"))); c != codes.Unavailable {
		t.Fatalf("unknown error: %v, want Unavailable", c)
	}
	// A mapped error wrapped again keeps its sentinel and code through ToStatus.
	again := ToStatus(fmt.Errorf("keepalive: %w", FromStatus(ToStatus(errs.ErrLeaseNotFound))))
	if !errors.Is(FromStatus(overWire(again)), errs.ErrLeaseNotFound) || status.Code(again) != codes.NotFound {
		t.Fatalf("re-wrapped: %v", again)
	}
	if err := FromCode(codes.OK, ""); err != nil {
		t.Fatalf("FromCode(OK) = %v", err)
	}
	if err := FromCode(codes.Internal, ""); err == nil || err.Error() != "Internal" {
		t.Fatalf("FromCode with no message: %v", err)
	}
}

// TestIncomingRequestID: a request id in the metadata reaches the ctx; a
// call without one has none; a malformed one is ErrInvalid.
func TestIncomingRequestID(t *testing.T) {
	in := func(kv ...string) context.Context {
		return metadata.NewIncomingContext(context.Background(), metadata.Pairs(kv...))
	}
	ctx, err := IncomingRequestID(in(MetadataClientID, "c", MetadataSeq, "7", MetadataAcked, "5"))
	if id, ok := RequestIDFrom(ctx); err != nil || !ok || id != (RequestID{Client: "c", Seq: 7, Acked: 5}) {
		t.Fatalf("well-formed: %+v %v %v", id, ok, err)
	}
	ctx, err = IncomingRequestID(in("other", "x"))
	if _, ok := RequestIDFrom(ctx); err != nil || ok {
		t.Fatalf("no request id: %v %v", ok, err)
	}
	if _, ok := RequestIDFrom(context.Background()); ok {
		t.Fatal("a bare context has a request id")
	}
	for _, kv := range [][]string{
		{MetadataClientID, "c", MetadataSeq, "x"},
		{MetadataClientID, "c", MetadataSeq, "0"},
		{MetadataSeq, "3"},
		{MetadataClientID, "c", MetadataSeq, "3", MetadataAcked, "-1"},
		{MetadataClientID, "c", MetadataClientID, "d", MetadataSeq, "3"},
	} {
		if _, err := IncomingRequestID(in(kv...)); !errors.Is(err, errs.ErrInvalid) {
			t.Errorf("%v: %v, want ErrInvalid", kv, err)
		}
	}
	// The outgoing side round-trips.
	out := AppendRequestID(context.Background(), RequestID{Client: "c", Seq: 9, Acked: 2})
	md, _ := metadata.FromOutgoingContext(out)
	ctx, err = IncomingRequestID(metadata.NewIncomingContext(context.Background(), md))
	if id, ok := RequestIDFrom(ctx); err != nil || !ok || id.Seq != 9 || id.Acked != 2 {
		t.Fatalf("round trip: %+v %v", id, err)
	}
}
