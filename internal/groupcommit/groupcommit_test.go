package groupcommit

import (
	"testing"
	"time"
)

func TestMissing(t *testing.T) {
	var tr Tracker
	if n, _ := tr.Missing(time.Millisecond); n != 0 {
		t.Fatalf("before any batch: missing %d, want 0", n)
	}
	tr.Resolved(8, 10*time.Millisecond)
	n, wait := tr.Missing(3 * time.Millisecond)
	if n != 8 || wait != 3*time.Millisecond {
		t.Fatalf("after a batch of 8: missing %d wait %v, want 8 and the 3ms linger", n, wait)
	}
	for range 5 {
		tr.Arrived()
	}
	if n, _ := tr.Missing(3 * time.Millisecond); n != 3 {
		t.Fatalf("5 of 8 back: missing %d, want 3", n)
	}
	for range 4 {
		tr.Arrived()
	}
	if n, _ := tr.Missing(3 * time.Millisecond); n != 0 {
		t.Fatalf("all back and one more: missing %d, want 0", n)
	}
	tr.Resolved(2, time.Millisecond)
	if _, wait := tr.Missing(3 * time.Millisecond); wait != time.Millisecond {
		t.Fatalf("wait %v, want the 1ms round (shorter than the linger)", wait)
	}
	if n, wait := tr.Missing(-1); n != 0 || wait != 0 {
		t.Fatalf("linger off: missing %d wait %v, want 0 0", n, wait)
	}
}

// queue sends n items the way a batcher's producers do.
func queue(tr *Tracker, ch chan int, n int) {
	for i := range n {
		ch <- i
		tr.Arrived()
	}
}

// A single client in a loop is back before its next batch forms: Fill
// never waits for it.
func TestFillSingleClientDoesNotWait(t *testing.T) {
	var tr Tracker
	ch := make(chan int, 64)
	tr.Resolved(1, time.Hour)
	queue(&tr, ch, 1)
	done := make(chan []int, 1)
	go func() { done <- Fill(&tr, ch, []int{<-ch}, 256, time.Hour, nil) }()
	select {
	case b := <-done:
		if len(b) != 1 {
			t.Fatalf("batch of %d, want 1", len(b))
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Fill waited for a client that was already back")
	}
}

// The group the last batch answered joins the batch the other group formed
// while it was in flight.
func TestFillMergesReturningGroup(t *testing.T) {
	var tr Tracker
	ch := make(chan int, 64)
	queue(&tr, ch, 4) // group B, queued while group A's batch was in flight
	tr.Resolved(4, time.Hour)
	batch := []int{<-ch, <-ch, <-ch, <-ch}
	go func() {
		time.Sleep(5 * time.Millisecond)
		queue(&tr, ch, 4) // group A comes back
	}()
	done := make(chan []int, 1)
	go func() { done <- Fill(&tr, ch, batch, 256, time.Hour, nil) }()
	select {
	case b := <-done:
		if len(b) != 8 {
			t.Fatalf("batch of %d, want both groups (8)", len(b))
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Fill did not return once the group was back")
	}
}

// Proposers that do not come back cost at most the linger.
func TestFillBoundedWait(t *testing.T) {
	var tr Tracker
	ch := make(chan int, 64)
	tr.Resolved(8, time.Hour)
	queue(&tr, ch, 1)
	start := time.Now()
	b := Fill(&tr, ch, []int{<-ch}, 256, 20*time.Millisecond, nil)
	if len(b) != 1 {
		t.Fatalf("batch of %d, want 1", len(b))
	}
	if d := time.Since(start); d < 20*time.Millisecond || d > 5*time.Second {
		t.Fatalf("waited %v, want the 20ms linger", d)
	}
}

// max caps the batch even when more proposers are missing; stop ends the
// wait at once.
func TestFillMaxAndStop(t *testing.T) {
	var tr Tracker
	ch := make(chan int, 64)
	tr.Resolved(10, time.Hour)
	queue(&tr, ch, 5)
	if b := Fill(&tr, ch, nil, 3, time.Hour, nil); len(b) != 3 {
		t.Fatalf("batch of %d, want max 3", len(b))
	}
	stop := make(chan struct{})
	close(stop)
	tr.Resolved(10, time.Hour)
	done := make(chan []int, 1)
	go func() { done <- Fill(&tr, make(chan int), []int{1}, 256, time.Hour, stop) }()
	select {
	case b := <-done:
		if len(b) != 1 {
			t.Fatalf("batch of %d after stop, want 1", len(b))
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Fill did not return after stop")
	}
}
