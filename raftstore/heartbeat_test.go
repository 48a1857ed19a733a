package raftstore

import (
	"sync"
	"testing"
	"time"
)

// TestCloseWaitsForHeartbeat (hashicorp/raft#717): a heartbeat running on
// a transport goroutine when a follower closes holds Close until it is
// done, so the stores do not close under it (raft would panic on the
// closed stable store and take the process down).
func TestCloseWaitsForHeartbeat(t *testing.T) {
	c := mustCluster(t, 3)
	ctx := ctxT(t, 30*time.Second)
	f := c.follower(ctx)
	if f.gate == nil {
		t.Fatal("the TCP transport has no heartbeat gate")
	}
	entered, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	hook := func() { once.Do(func() { close(entered); <-release }) }
	f.gate.hook.Store(&hook)
	select {
	case <-entered:
	case <-ctx.Done():
		t.Fatal("no heartbeat reached the follower")
	}
	closed := make(chan error, 1)
	go func() { closed <- f.Close() }()
	select {
	case err := <-closed:
		t.Fatalf("Close returned (err %v) while a heartbeat was running", err)
	case <-time.After(time.Second):
	}
	close(release)
	select {
	case err := <-closed:
		if err != nil {
			t.Fatalf("Close: %v", err)
		}
	case <-ctx.Done():
		t.Fatal("Close did not return once the heartbeat was done")
	}
}
