package node

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"
)

// TestDataDirInUse: a second node on a data dir that a running node holds
// fails at once (it used to wait forever in bolt's flock) with an error
// naming the dir and the holding process, and leaves the first node alone;
// once the first closes, the dir opens again.
func TestDataDirInUse(t *testing.T) {
	cfg := testConfig(t, "n1")
	first := mustOpen(t, cfg)

	again := testConfig(t, "n1") // other ports, same ID and data dir
	again.DataDir = cfg.DataDir
	second, err := New(again)
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	done := make(chan error, 1)
	go func() { done <- second.Open(context.Background()) }()
	select {
	case err = <-done:
	case <-time.After(time.Second):
		t.Fatal("second Open on a data dir in use did not return within 1 s")
	}
	t.Logf("second Open returned in %v: %v", time.Since(start), err)
	if !errors.Is(err, ErrDataDirLocked) {
		t.Fatalf("second Open: %v, want ErrDataDirLocked", err)
	}
	for _, want := range []string{cfg.DataDir, fmt.Sprintf("process %d", os.Getpid())} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not name %q", err, want)
		}
	}
	if err := second.Close(); err != nil {
		t.Fatalf("close of the refused node: %v", err)
	}
	if st := first.Store().Stats(); st.LeaderID != "n1" {
		t.Fatalf("first node disturbed: leader %q", st.LeaderID)
	}
	if err := first.Close(); err != nil {
		t.Fatal(err)
	}
	// The lock goes with the holder.
	third := mustOpen(t, again)
	if err := third.Close(); err != nil {
		t.Fatal(err)
	}
}

// TestOpenHonoursContext: Open with a context that has ended stops at its
// first check, returns the context's error and releases the data dir.
func TestOpenHonoursContext(t *testing.T) {
	cfg := testConfig(t, "n1")
	n, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	start := time.Now()
	err = n.Open(ctx)
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("Open with a cancelled context: %v, want context.Canceled", err)
	}
	if d := time.Since(start); d > time.Second {
		t.Fatalf("Open took %v after its context ended", d)
	}
	mustOpen(t, cfg) // the lock was released
}
