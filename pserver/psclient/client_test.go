package psclient

import (
	"errors"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/raftps/raftps/pserver/wire"
)

func TestErrorMapping(t *testing.T) {
	for _, s := range []error{wire.ErrFenced, wire.ErrNotHosted, wire.ErrInvalid, wire.ErrStale, wire.ErrEpoch} {
		in := wire.Errorf(s, "slot 3")
		out := fromGRPC(status.Convert(in).Err())
		if !errors.Is(out, s) || out.Error() != in.Error() {
			t.Errorf("%v -> %v", in, out)
		}
	}
	if !retryable(fromGRPC(status.Error(codes.Unavailable, "connection refused"))) {
		t.Error("plain Unavailable is not retryable")
	}
	// A refused epoch is re-resolved and retried; a stale push is not (re-pull).
	if ep := fromGRPC(status.Convert(wire.Errorf(wire.ErrEpoch, "slot 0")).Err()); !retryable(ep) || status.Code(ep) != codes.FailedPrecondition {
		t.Errorf("ErrEpoch: retryable %v, code %v; want retryable, FailedPrecondition", retryable(ep), status.Code(ep))
	}
	if retryable(fromGRPC(status.Convert(wire.Errorf(wire.ErrStale, "slot 0")).Err())) {
		t.Error("ErrStale is retryable; it must reach the trainer (re-pull)")
	}
}
