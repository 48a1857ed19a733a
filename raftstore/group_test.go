package raftstore

import (
	"testing"
	"time"
)

// newLingerStore is the part of a Store that linger uses.
func newLingerStore(linger time.Duration) *Store {
	cfg := DefaultConfig()
	cfg.BatchLinger = linger
	return &Store{cfg: cfg, proposeCh: make(chan *proposal, 64), stopping: make(chan struct{})}
}

// queue enqueues n proposals the way ApplyLocal does.
func (s *Store) queue(n int) {
	for range n {
		s.proposeCh <- &proposal{}
		s.group.arrivals.Add(1)
	}
}

func TestGroupCommitMissing(t *testing.T) {
	var g groupCommit
	if n, _ := g.missing(time.Millisecond); n != 0 {
		t.Fatalf("before any entry: missing %d, want 0", n)
	}
	g.resolved(8, 10*time.Millisecond)
	n, wait := g.missing(3 * time.Millisecond)
	if n != 8 || wait != 3*time.Millisecond {
		t.Fatalf("after an entry of 8: missing %d wait %v, want 8 and the 3ms linger", n, wait)
	}
	g.arrivals.Add(5)
	if n, _ := g.missing(3 * time.Millisecond); n != 3 {
		t.Fatalf("5 of 8 back: missing %d, want 3", n)
	}
	g.arrivals.Add(4)
	if n, _ := g.missing(3 * time.Millisecond); n != 0 {
		t.Fatalf("all back and one more: missing %d, want 0", n)
	}
	g.resolved(2, time.Millisecond)
	if _, wait := g.missing(3 * time.Millisecond); wait != time.Millisecond {
		t.Fatalf("wait %v, want the 1ms round (shorter than the linger)", wait)
	}
	if n, wait := g.missing(-1); n != 0 || wait != 0 {
		t.Fatalf("linger off: missing %d wait %v, want 0 0", n, wait)
	}
}

// A single client in a loop is back before its next entry forms: the
// batcher never waits for it.
func TestLingerSingleClientDoesNotWait(t *testing.T) {
	s := newLingerStore(time.Hour)
	s.group.resolved(1, time.Hour)
	s.queue(1)
	first := <-s.proposeCh
	done := make(chan []*proposal, 1)
	go func() { done <- s.linger([]*proposal{first}) }()
	select {
	case b := <-done:
		if len(b) != 1 {
			t.Fatalf("batch of %d, want 1", len(b))
		}
	case <-time.After(10 * time.Second):
		t.Fatal("linger waited for a client that was already back")
	}
}

// The group that the last entry answered joins the batch formed by the
// other group while it was in flight.
func TestLingerMergesReturningGroup(t *testing.T) {
	s := newLingerStore(time.Hour)
	s.queue(4) // group B, queued while group A's entry was in flight
	s.group.resolved(4, time.Hour)
	batch := []*proposal{<-s.proposeCh, <-s.proposeCh, <-s.proposeCh, <-s.proposeCh}
	go func() {
		time.Sleep(5 * time.Millisecond)
		s.queue(4) // group A comes back
	}()
	done := make(chan []*proposal, 1)
	go func() { done <- s.linger(batch) }()
	select {
	case b := <-done:
		if len(b) != 8 {
			t.Fatalf("batch of %d, want both groups (8)", len(b))
		}
	case <-time.After(10 * time.Second):
		t.Fatal("linger did not return once the group was back")
	}
}

// Proposers that do not come back cost at most the linger.
func TestLingerBoundedWait(t *testing.T) {
	s := newLingerStore(20 * time.Millisecond)
	s.group.resolved(8, time.Hour)
	s.queue(1)
	start := time.Now()
	b := s.linger([]*proposal{<-s.proposeCh})
	if len(b) != 1 {
		t.Fatalf("batch of %d, want 1", len(b))
	}
	if d := time.Since(start); d < 20*time.Millisecond || d > 5*time.Second {
		t.Fatalf("waited %v, want the 20ms linger", d)
	}
}

// MaxBatch caps the batch even when more proposers are missing.
func TestLingerMaxBatch(t *testing.T) {
	s := newLingerStore(time.Hour)
	s.cfg.MaxBatch = 3
	s.group.resolved(10, time.Hour)
	s.queue(5)
	b := s.linger([]*proposal{})
	if len(b) != 3 {
		t.Fatalf("batch of %d, want MaxBatch 3", len(b))
	}
}
