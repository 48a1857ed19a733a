package bench

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"
)

// Median returns the median of xs (NaN if empty).
func Median(xs []float64) float64 {
	if len(xs) == 0 {
		return NA
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// failoverTrial SIGKILLs c's leader and returns the seconds until a put
// through the surviving members succeeds; the killed member is restarted
// and the cluster is whole again when it returns.
func failoverTrial(ctx context.Context, c Cluster) (float64, error) {
	lctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	l, err := c.Leader(lctx)
	if err != nil {
		return 0, err
	}
	s, err := c.NewStore(c.Endpoints(l))
	if err != nil {
		return 0, err
	}
	defer s.Close()
	// Connections to the survivors are up before the kill.
	if err := s.Put(lctx, "/bench/failover", value256); err != nil {
		return 0, fmt.Errorf("put before kill: %w", err)
	}
	// A write is attempted every 20 ms, each with its own 10 s timeout, so
	// that a request stuck on the dead leader (a follower's forwarded
	// proposal is dropped with it) does not hide an earlier success.
	t0 := time.Now()
	c.Kill(l)
	won := make(chan time.Duration, 1)
	actx, acancel := context.WithCancel(lctx)
	var wg sync.WaitGroup
	tick := time.NewTicker(20 * time.Millisecond)
	var took time.Duration
	var lastErr error
	var mu sync.Mutex
loop:
	for {
		wg.Add(1)
		go func() {
			defer wg.Done()
			pctx, cancel := context.WithTimeout(actx, 10*time.Second)
			defer cancel()
			if err := s.Put(pctx, "/bench/failover", value256); err != nil {
				mu.Lock()
				lastErr = err
				mu.Unlock()
				return
			}
			select {
			case won <- time.Since(t0):
			default:
			}
		}()
		select {
		case took = <-won:
			break loop
		case <-lctx.Done():
			break loop
		case <-tick.C:
		}
	}
	tick.Stop()
	acancel()
	wg.Wait()
	if took == 0 {
		mu.Lock()
		defer mu.Unlock()
		return 0, fmt.Errorf("no successful write within 60 s of the kill: %v", lastErr)
	}
	if err := c.Restart(l); err != nil {
		return took.Seconds(), err
	}
	if _, err := c.Leader(lctx); err != nil {
		return took.Seconds(), fmt.Errorf("after restart: %w", err)
	}
	// Let the restarted member catch up before the next trial.
	if err := s.Put(lctx, "/bench/failover", value256); err != nil {
		return took.Seconds(), err
	}
	time.Sleep(time.Second)
	return took.Seconds(), nil
}

func (r *runner) failoverSection(ctx context.Context, clusters []Cluster) {
	res := make([][]float64, 2)
	// Alternate the systems trial by trial: Pairs pairs.
	for t := 0; t < Pairs; t++ {
		for i := 0; i < 2; i++ {
			d := NA
			if i < len(clusters) {
				c := clusters[i]
				var err error
				if d, err = failoverTrial(ctx, c); err != nil {
					r.logf("%s failover trial %d: %v", c.Name(), t+1, err)
					if d == 0 {
						d = NA
					}
				}
				r.logf("%s failover trial %d: %.3f s", c.Name(), t+1, d)
			}
			res[i] = append(res[i], d)
		}
	}
	r.raw["failover"] = res
	note := fmt.Sprintf("raftps %s etcd %s", fmtSeconds(res[0]), fmtSeconds(res[1]))
	r.add(pairRow(Row{Section: "failover", Metric: "leader SIGKILL -> first write", Unit: "s", BaseName: "etcd", Note: note}, res[0], res[1]))
}
