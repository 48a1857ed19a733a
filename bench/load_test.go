package bench

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"
)

// traceStore is a Store whose puts take delay (while slow is set) and
// append its name to a shared trace; failing puts return an error.
type traceStore struct {
	name    string
	delay   time.Duration
	failing bool
	mu      *sync.Mutex
	trace   *[]string
	slow    *bool
}

func (s *traceStore) Put(ctx context.Context, key string, val []byte) error {
	s.mu.Lock()
	*s.trace = append(*s.trace, s.name)
	d := s.delay
	if *s.slow {
		d *= 4
	}
	s.mu.Unlock()
	time.Sleep(d)
	if s.failing {
		return errors.New("put refused")
	}
	return nil
}
func (s *traceStore) Get(context.Context, string) error              { return nil }
func (s *traceStore) Version(context.Context, string) (int64, error) { return 0, nil }
func (s *traceStore) CAS(context.Context, string, int64, []byte) (bool, error) {
	return true, nil
}
func (s *traceStore) LeaseGrantKeepAlive(context.Context, int64) (int64, error) { return 1, nil }
func (s *traceStore) Revoke(context.Context, int64) error                       { return nil }
func (s *traceStore) Close() error                                              { return nil }

// TestRunInterleavedTakesTurns: the stores' ops alternate one by one, each
// store's Elapsed is the sum of its own ops' latencies (so a store twice as
// slow shows half the throughput), and a slow spell of the machine lands on
// every store alike instead of on whichever ran then.
func TestRunInterleavedTakesTurns(t *testing.T) {
	var mu sync.Mutex
	var trace []string
	slow := false
	a := &traceStore{name: "a", delay: time.Millisecond, mu: &mu, trace: &trace, slow: &slow}
	b := &traceStore{name: "b", delay: 2 * time.Millisecond, mu: &mu, trace: &trace, slow: &slow}
	stop := time.AfterFunc(30*time.Millisecond, func() { mu.Lock(); slow = true; mu.Unlock() })
	defer stop.Stop()
	lrs, err := RunInterleaved(context.Background(), []Store{a, b}, PutWorkload(1), time.Hour, 40)
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(trace, ""); got != strings.Repeat("ab", 40) {
		t.Fatalf("ops ran in the order %q, want a and b in turn, 40 each", got)
	}
	if lrs[0].Ops != 40 || lrs[1].Ops != 40 {
		t.Fatalf("ops %d and %d, want 40 each (maxOps per store)", lrs[0].Ops, lrs[1].Ops)
	}
	// Sleeps only overshoot: a's latencies sum to at least its delays.
	if lrs[0].Elapsed < 40*time.Millisecond || lrs[1].Elapsed < 80*time.Millisecond {
		t.Fatalf("elapsed %v and %v: want at least the sums of their delays (40ms, 80ms)", lrs[0].Elapsed, lrs[1].Elapsed)
	}
	// b is twice as slow as a in every turn, the slow spell included: the
	// ratio of their throughputs stays near 2 whatever the spell did.
	if r := lrs[0].Throughput() / lrs[1].Throughput(); r < 1.5 || r > 2.5 {
		t.Fatalf("throughput a/b = %.2f, want about 2 (b's delay is twice a's in every turn)", r)
	}
	if lrs[0].P50 < time.Millisecond || lrs[1].P99 < 2*time.Millisecond {
		t.Fatalf("p50 of a %v, p99 of b %v: below their delays", lrs[0].P50, lrs[1].P99)
	}
}

// TestRunInterleavedStopsOnFailingStore: a store whose every op fails ends
// the run with its error after more than 100 failures (and over 10%),
// counted in its Errors, while the other store's ops count as usual.
func TestRunInterleavedStopsOnFailingStore(t *testing.T) {
	var mu sync.Mutex
	var trace []string
	slow := false
	ok := &traceStore{name: "a", mu: &mu, trace: &trace, slow: &slow}
	bad := &traceStore{name: "b", failing: true, mu: &mu, trace: &trace, slow: &slow}
	lrs, err := RunInterleaved(context.Background(), []Store{ok, bad}, PutWorkload(1), time.Hour, 10000)
	if err == nil || !strings.Contains(err.Error(), "put refused") {
		t.Fatalf("err = %v, want the failing store's error", err)
	}
	if lrs[1].Errors != 101 || lrs[0].Ops != 101 {
		t.Fatalf("failing store: %d errors; other store: %d ops; want 101 and 101", lrs[1].Errors, lrs[0].Ops)
	}
}
