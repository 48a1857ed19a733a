package pserver

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	pb "github.com/raftps/raftps/api/raftpspb"
	"github.com/raftps/raftps/pserver/wire"
)

// fakeClock is a clock for Deadline that the test moves by hand; onRead,
// if set, runs on every read with the read's number (from 1), before the
// read returns the time it had when it started.
type fakeClock struct {
	mu     sync.Mutex
	now    time.Time
	reads  int
	onRead func(n int)
}

func newFakeClock() *fakeClock { return &fakeClock{now: time.Unix(1e9, 0)} }

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.reads++
	t := c.now
	if c.onRead != nil {
		c.onRead(c.reads)
	}
	return t
}

// advance moves the clock by d without running anything else: what a
// paused process sees when it runs again.
func (c *fakeClock) advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

func wantFenced(t *testing.T, what string, err error) {
	t.Helper()
	if !errors.Is(err, wire.ErrFenced) || status.Code(wire.ToGRPC(err)) != codes.Unavailable {
		t.Fatalf("%s: %v (code %v), want wire.ErrFenced (Unavailable)", what, err, status.Code(wire.ToGRPC(err)))
	}
}

// TestDeadlineRefusesAfterPause (issue 33, a paused old holder): a slot
// served under a lease's serve-until refuses every request once the
// deadline has passed on its clock, although nobody fenced it: a process
// paused (SIGSTOP, a VM pause) past its deadline handles the requests that
// queued meanwhile before its watchdog's timer goroutine runs, and must
// answer them ErrFenced. Only Extend moves the deadline, and never back.
func TestDeadlineRefusesAfterPause(t *testing.T) {
	for _, mode := range []pb.UpdateMode{pb.UpdateMode_UPDATE_MODE_ASYNC, pb.UpdateMode_UPDATE_MODE_SYNC} {
		t.Run(mode.String(), func(t *testing.T) {
			ctx := context.Background()
			spec := syncSpec()
			spec.Mode = mode
			s := mustSlot(t, spec, 0, 1)
			s.SetTrainers([]string{"t1"})
			srv := NewServer()
			srv.Host(spec.Name, 0, s)
			clock := newFakeClock()
			d := NewDeadline(clock.Now)
			if d.Holds() {
				t.Fatal("a new deadline holds before any Extend")
			}
			d.Extend(clock.now.Add(2 * time.Second))
			d.Extend(clock.now.Add(time.Second)) // an older renewal acknowledged late
			if got := d.Until().Sub(clock.now); got != 2*time.Second {
				t.Fatalf("deadline %v after now, want 2s: Extend moved it back", got)
			}
			s.SetDeadline(d)
			if _, err := srv.Pull(ctx, &pb.PullRequest{Job: spec.Name, Slot: 0}); err != nil {
				t.Fatalf("pull before the deadline: %v", err)
			}
			if _, err := pushW(ctx, s, "t1", 0, ones(10, 1), 1); err != nil {
				t.Fatalf("push before the deadline: %v", err)
			}
			clock.advance(2 * time.Second) // paused until the deadline
			_, err := srv.Pull(ctx, &pb.PullRequest{Job: spec.Name, Slot: 0})
			wantFenced(t, "pull after the deadline", err)
			_, err = srv.Push(ctx, &pb.PushRequest{Job: spec.Name, Slot: 0, Trainer: "t1", Step: 1, Version: 1, Examples: 1,
				Grads: denseTensors(s.Layout(), 0, map[string][]float32{"w": ones(10, 1)})})
			wantFenced(t, "push after the deadline", err)
			if s.Version() != 1 {
				t.Fatalf("version %d, want 1: a push after the deadline applied", s.Version())
			}
			if !s.Fenced() {
				t.Fatal("the slot is not fenced after its deadline passed")
			}
		})
	}
}

// TestUpdateNotAcknowledgedAfterFence (issue 33, an update in flight): an
// update already past its fence check when the deadline passes, or when
// the watchdog fences the slot, is not acknowledged: the trainer gets
// ErrFenced (Unavailable) and retries on the slot's next holder, although
// the update applied here. Otherwise a 100M-param Adam step (over half a
// second) would be acknowledged after the handover margin, while the next
// holder serves.
func TestUpdateNotAcknowledgedAfterFence(t *testing.T) {
	for _, mode := range []pb.UpdateMode{pb.UpdateMode_UPDATE_MODE_ASYNC, pb.UpdateMode_UPDATE_MODE_SYNC} {
		for _, tc := range []struct {
			name   string
			during func(c *fakeClock, s *Slot)
		}{
			{"deadline passes", func(c *fakeClock, _ *Slot) { c.now = c.now.Add(time.Hour) }},
			{"watchdog fences", func(_ *fakeClock, s *Slot) { s.Fence() }},
		} {
			t.Run(mode.String()+"/"+tc.name, func(t *testing.T) {
				spec := syncSpec()
				spec.Mode = mode
				s := mustSlot(t, spec, 0, 1)
				s.SetTrainers([]string{"t1"})
				clock := newFakeClock()
				d := NewDeadline(clock.Now)
				d.Extend(clock.now.Add(time.Second))
				s.SetDeadline(d)
				// Read 1 is the push's check on entry, read 2 its check
				// under the slot's lock, right before the update applies:
				// the update is then past every check made before it.
				clock.onRead = func(n int) {
					if n == 2 {
						tc.during(clock, s)
					}
				}
				resp, err := pushW(context.Background(), s, "t1", 0, ones(10, 1), 1)
				if err == nil {
					t.Fatalf("an update that finished after the fence was acknowledged: %v", resp)
				}
				wantFenced(t, "push", err)
				if s.Version() != 1 {
					t.Fatalf("version %d, want 1: the fence came before the update applied, not during it", s.Version())
				}
			})
		}
	}
}
