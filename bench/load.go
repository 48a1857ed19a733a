package bench

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// LoadResult is one workload's outcome on one store.
type LoadResult struct {
	Ops     int64         `json:"ops"`
	Errors  int64         `json:"errors"`
	Elapsed time.Duration `json:"elapsed_ns"`
	P50     time.Duration `json:"p50_ns"`
	P99     time.Duration `json:"p99_ns"`
	// Extra counts workload events (failed CAS compares, leases granted).
	Extra int64 `json:"extra"`
}

// Throughput is successful operations per second.
func (r LoadResult) Throughput() float64 {
	if r.Elapsed <= 0 {
		return NA
	}
	return float64(r.Ops) / r.Elapsed.Seconds()
}

// Workload is one load pattern run with Clients concurrent clients.
type Workload struct {
	Name    string
	Clients int
	// Worker returns client c's operation; each call of it is one timed op.
	// Setup work (reading a starting revision) belongs in Worker, untimed.
	Worker func(ctx context.Context, s Store, c int, extra *atomic.Int64) (func(ctx context.Context) error, error)
}

// Percentile returns the p-quantile (0..1) of sorted ds by nearest rank.
func Percentile(sorted []time.Duration, p float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	i := int(p*float64(len(sorted))+0.5) - 1
	i = max(0, min(i, len(sorted)-1))
	return sorted[i]
}

// RunLoad runs w on stores (client c uses stores[c%len(stores)]) for dur
// or maxOps operations, whichever comes first; one op times out after 5 s.
func RunLoad(ctx context.Context, stores []Store, w Workload, dur time.Duration, maxOps int64) (LoadResult, error) {
	var extra atomic.Int64
	ops := make([]func(context.Context) error, w.Clients)
	for c := range ops {
		op, err := w.Worker(ctx, stores[c%len(stores)], c, &extra)
		if err != nil {
			return LoadResult{}, fmt.Errorf("%s: client %d setup: %w", w.Name, c, err)
		}
		ops[c] = op
	}
	extra.Store(0)
	var (
		next   atomic.Int64
		errs   atomic.Int64
		wg     sync.WaitGroup
		lat    = make([][]time.Duration, w.Clients)
		stop   = make(chan struct{})
		lastMu sync.Mutex
		last   error
	)
	deadline := time.AfterFunc(dur, func() { close(stop) })
	defer deadline.Stop()
	start := time.Now()
	for c := 0; c < w.Clients; c++ {
		wg.Add(1)
		go func(c int) {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				if next.Add(1) > maxOps || ctx.Err() != nil {
					return
				}
				octx, cancel := context.WithTimeout(ctx, 5*time.Second)
				t := time.Now()
				err := ops[c](octx)
				d := time.Since(t)
				cancel()
				if err != nil {
					errs.Add(1)
					lastMu.Lock()
					last = err
					lastMu.Unlock()
					if errs.Load() > 100 && errs.Load()*10 > next.Load() {
						return // more than 10% failing: give up
					}
					continue
				}
				lat[c] = append(lat[c], d)
			}
		}(c)
	}
	wg.Wait()
	elapsed := time.Since(start)
	all := slices.Concat(lat...)
	slices.Sort(all)
	r := LoadResult{Ops: int64(len(all)), Errors: errs.Load(), Elapsed: elapsed,
		P50: Percentile(all, 0.50), P99: Percentile(all, 0.99), Extra: extra.Load()}
	if r.Ops == 0 {
		return r, fmt.Errorf("%s: no successful op: %v", w.Name, last)
	}
	return r, nil
}

// RunInterleaved runs w's first client on each of stores in turn, one op
// each per turn (stores[0], stores[1], ..., stores[0], ...), from one
// goroutine, for dur or until maxOps ops per store, and returns one result
// per store. Every store's ops are thus spread over the same span, so a
// drift of a shared machine's load (a neighbour's fsyncs, a burst of CPU)
// hits each alike, where runs of dur seconds one after the other (RunLoad)
// each meet their own. It is for 1-client rows: one client's throughput
// is 1 / its mean latency, so a result's Elapsed is the sum of its ops'
// latencies (the time that store's client would have run alone). An op
// that fails counts in Errors; more than 10% failing on a store stops the
// run.
func RunInterleaved(ctx context.Context, stores []Store, w Workload, dur time.Duration, maxOps int64) ([]LoadResult, error) {
	var extra atomic.Int64
	ops := make([]func(context.Context) error, len(stores))
	for i, s := range stores {
		op, err := w.Worker(ctx, s, 0, &extra)
		if err != nil {
			return nil, fmt.Errorf("%s: store %d setup: %w", w.Name, i, err)
		}
		ops[i] = op
	}
	lat := make([][]time.Duration, len(stores))
	res := make([]LoadResult, len(stores))
	var last, failed error
	start := time.Now()
turns:
	for n := int64(1); n <= maxOps && time.Since(start) < dur && ctx.Err() == nil; n++ {
		for i, op := range ops {
			octx, cancel := context.WithTimeout(ctx, 5*time.Second)
			t := time.Now()
			err := op(octx)
			d := time.Since(t)
			cancel()
			if err != nil {
				res[i].Errors++
				last = err
				if res[i].Errors > 100 && res[i].Errors*10 > n {
					failed = fmt.Errorf("%s: store %d: %d of %d ops failed: %w", w.Name, i, res[i].Errors, n, err)
					break turns
				}
				continue
			}
			lat[i] = append(lat[i], d)
			res[i].Elapsed += d
		}
	}
	for i := range res {
		slices.Sort(lat[i])
		res[i].Ops = int64(len(lat[i]))
		res[i].P50, res[i].P99 = Percentile(lat[i], 0.50), Percentile(lat[i], 0.99)
		if res[i].Ops == 0 && failed == nil {
			failed = fmt.Errorf("%s: store %d: no successful op: %v", w.Name, i, last)
		}
	}
	return res, failed
}

// value256 is the 256-byte value of every write.
var value256 = func() []byte {
	b := make([]byte, 256)
	for i := range b {
		b[i] = 'a' + byte(i%26)
	}
	return b
}()

// PutWorkload: each client puts a 256-byte value to its own rotating
// keys (1000 keys in all).
func PutWorkload(clients int) Workload {
	return Workload{Name: fmt.Sprintf("put 256B, %s", nClients(clients)), Clients: clients,
		Worker: func(_ context.Context, s Store, c int, _ *atomic.Int64) (func(context.Context) error, error) {
			var i int
			return func(ctx context.Context) error {
				i++
				return s.Put(ctx, fmt.Sprintf("/bench/put/%d", (c*7919+i)%1000), value256)
			}, nil
		}}
}

// GetWorkload: linearizable single-key gets of 100 keys written first.
func GetWorkload(clients int) Workload {
	return Workload{Name: fmt.Sprintf("linearizable get, %s", nClients(clients)), Clients: clients,
		Worker: func(ctx context.Context, s Store, c int, _ *atomic.Int64) (func(context.Context) error, error) {
			key := fmt.Sprintf("/bench/get/%d", c%100)
			if err := s.Put(ctx, key, value256); err != nil {
				return nil, err
			}
			return func(ctx context.Context) error { return s.Get(ctx, key) }, nil
		}}
}

// CASWorkload: each client compare-and-swaps its own key on the version
// it last wrote (a Txn: compare version, then put); a failed compare
// re-reads the version (counted in Extra).
func CASWorkload(clients int) Workload {
	return Workload{Name: fmt.Sprintf("CAS txn, %s", nClients(clients)), Clients: clients,
		Worker: func(ctx context.Context, s Store, c int, extra *atomic.Int64) (func(context.Context) error, error) {
			key := fmt.Sprintf("/bench/cas/%d", c)
			if err := s.Put(ctx, key, value256); err != nil {
				return nil, err
			}
			version, err := s.Version(ctx, key)
			if err != nil {
				return nil, err
			}
			return func(ctx context.Context) error {
				ok, err := s.CAS(ctx, key, version, value256)
				if err != nil {
					return err
				}
				if ok {
					version++
					return nil
				}
				extra.Add(1)
				version, err = s.Version(ctx, key)
				return err
			}, nil
		}}
}

// LeaseWorkload: grant a 30 s lease and renew it once on a keepalive
// stream. The IDs are collected in ids for a revoke afterwards.
func LeaseWorkload(clients int, ids *sync.Map) Workload {
	return Workload{Name: fmt.Sprintf("lease grant+keepalive, %s", nClients(clients)), Clients: clients,
		Worker: func(_ context.Context, s Store, _ int, extra *atomic.Int64) (func(context.Context) error, error) {
			return func(ctx context.Context) error {
				id, err := s.LeaseGrantKeepAlive(ctx, 30)
				if id != 0 {
					ids.Store(id, s)
					extra.Add(1)
				}
				return err
			}, nil
		}}
}

// revokeAll revokes the leases in ids, 16 at a time, within 30 s.
func revokeAll(ctx context.Context, ids *sync.Map) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	sem := make(chan struct{}, 16)
	var wg sync.WaitGroup
	ids.Range(func(k, v any) bool {
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer func() { <-sem; wg.Done() }()
			_ = v.(Store).Revoke(ctx, k.(int64))
		}()
		ids.Delete(k)
		return ctx.Err() == nil
	})
	wg.Wait()
}

// nClients is "1 client", "16 clients".
func nClients(n int) string {
	if n == 1 {
		return "1 client"
	}
	return fmt.Sprintf("%d clients", n)
}
