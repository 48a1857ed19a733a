package pserver

import (
	"sync/atomic"
	"time"
)

// Deadline is a holder's "serve until": the instant, on the node's
// monotonic clock, after which every Slot it is attached to (SetDeadline)
// refuses every request with ErrFenced, and every update that finishes
// after it is not acknowledged. The node extends it only from renewals of
// its lease that succeeded, to the renewal's send plus the fence
// (schema.PServerFence), which is what the master's handover records and
// the next claimant's wait count on (schema/handover.go).
//
// The check is made by the slot itself on every request and again before
// every reply, so it holds when the node's timers do not run on time: a
// process paused (SIGSTOP, a stalled VM) past the deadline answers the
// requests that queued meanwhile with ErrFenced, whether or not its
// watchdog's timer has fired yet. Go's time.Now reads CLOCK_MONOTONIC,
// which runs on while a process is stopped; a pause that also stops the
// guest's monotonic clock is beyond any clock-based bound.
//
// The zero value is not usable; NewDeadline returns one that has passed
// (a slot attached to it serves nothing until Extend). Safe for concurrent
// use.
type Deadline struct {
	now   func() time.Time
	until atomic.Pointer[time.Time]
}

// NewDeadline returns a Deadline that has passed, read on clock now (nil:
// time.Now, whose monotonic reading is what the comparisons use).
func NewDeadline(now func() time.Time) *Deadline {
	if now == nil {
		now = time.Now
	}
	return &Deadline{now: now}
}

// Extend moves the deadline to until if that is later; it never moves it
// earlier (renewals may be acknowledged out of order).
func (d *Deadline) Extend(until time.Time) {
	for {
		cur := d.until.Load()
		if cur != nil && !until.After(*cur) {
			return
		}
		if d.until.CompareAndSwap(cur, &until) {
			return
		}
	}
}

// Until returns the deadline (the zero Time if never extended).
func (d *Deadline) Until() time.Time {
	if u := d.until.Load(); u != nil {
		return *u
	}
	return time.Time{}
}

// Holds reports whether the deadline has not passed yet.
func (d *Deadline) Holds() bool {
	u := d.until.Load()
	return u != nil && d.now().Before(*u)
}
