package psclient

import (
	"errors"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/raftps/raftps/pserver/wire"
)

func TestErrorMapping(t *testing.T) {
	for _, s := range []error{wire.ErrFenced, wire.ErrNotHosted, wire.ErrInvalid, wire.ErrStale} {
		in := wire.Errorf(s, "slot 3")
		out := fromGRPC(status.Convert(in).Err())
		if !errors.Is(out, s) || out.Error() != in.Error() {
			t.Errorf("%v -> %v", in, out)
		}
	}
	if !retryable(fromGRPC(status.Error(codes.Unavailable, "connection refused"))) {
		t.Error("plain Unavailable is not retryable")
	}
}
