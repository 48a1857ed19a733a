package service

import (
	"errors"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/raftps/raftps/raftstore"
)

// TestNotLeader: only answers that prove the request was not applied are
// retried against the next leader.
func TestNotLeader(t *testing.T) {
	for _, tc := range []struct {
		name  string
		err   error
		retry bool
	}{
		{"leader lost leadership", status.Error(codes.Unavailable, raftstore.ErrNotLeader.Error()+"; retry"), true},
		{"no leader", status.Error(codes.Unavailable, raftstore.ErrNoLeader.Error()), true},
		{"leader dead: dial refused", status.Error(codes.Unavailable, `connection error: desc = "transport: Error while dialing: dial tcp 127.0.0.1:1: connect: connection refused"`), true},
		{"connection lost mid-call: outcome unknown", status.Error(codes.Unavailable, "error reading from server: EOF"), false},
		{"invalid argument", status.Error(codes.InvalidArgument, "fsm: invalid argument: empty key"), false},
		{"deadline", status.Error(codes.DeadlineExceeded, "context deadline exceeded"), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := errors.Is(notLeader(tc.err), raftstore.ErrNotLeader); got != tc.retry {
				t.Fatalf("retry = %v, want %v", got, tc.retry)
			}
		})
	}
}
