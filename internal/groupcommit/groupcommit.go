package groupcommit

import (
	"sync/atomic"
	"time"
)

// Tracker records arrivals and answered batches; its methods are safe for
// concurrent use. The zero value is ready (nothing answered yet: no wait).
type Tracker struct {
	arrivals atomic.Int64 // proposals arrived so far
	answered atomic.Int64 // proposals the last resolved batch answered
	mark     atomic.Int64 // arrivals when it was resolved
	round    atomic.Int64 // its send-to-answer time, ns
}

// Arrived records one proposal queued for a batch.
func (t *Tracker) Arrived() { t.arrivals.Add(1) }

// Resolved records a batch that answered n proposals, round after it was
// sent. Call it before the answers go out, so that every proposal those
// proposers make next counts as a return.
func (t *Tracker) Resolved(n int, round time.Duration) {
	t.mark.Store(t.arrivals.Load())
	t.answered.Store(int64(n))
	t.round.Store(int64(round))
}

// Missing returns how many of the proposers the last batch answered have
// not proposed again, and how long a batcher may wait for them: the last
// batch's round, at most linger. A linger <= 0 turns waiting off (0, 0).
func (t *Tracker) Missing(linger time.Duration) (n int, wait time.Duration) {
	m := t.answered.Load() - (t.arrivals.Load() - t.mark.Load())
	if m <= 0 || linger <= 0 {
		return 0, 0
	}
	return int(m), min(linger, time.Duration(t.round.Load()))
}

// Fill adds to batch what arrives on queue while proposers the last batch
// answered are missing (Tracker.Missing), until they are back, the batch
// holds max items, the wait ends or stop is closed. It never waits when
// none is missing.
func Fill[T any](t *Tracker, queue <-chan T, batch []T, max int, linger time.Duration, stop <-chan struct{}) []T {
	n, wait := t.Missing(linger)
	if n == 0 || wait <= 0 {
		return batch
	}
	want := min(len(batch)+n, max)
	timer := time.NewTimer(wait)
	defer timer.Stop()
	for len(batch) < want {
		select {
		case x := <-queue:
			batch = append(batch, x)
		case <-timer.C:
			return batch
		case <-stop:
			return batch
		}
	}
	return batch
}
