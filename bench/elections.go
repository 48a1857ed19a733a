package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"time"

	pb "github.com/raftps/raftps/api/raftpspb"
	"github.com/raftps/raftps/raftstore/client"
)

// ElectionsConfig is what Elections measures: one 3-node raftps cluster
// started with Flags, idle and beside Hogs CPU hogs.
type ElectionsConfig struct {
	// Bin is the raftps binary; Dir holds the nodes' data and logs.
	Bin, Dir string
	// Flags are added to every node's command line (e.g.
	// "--heartbeat-interval", "100", "--election-timeout", "1000").
	Flags []string
	// Idle and Loaded are how long terms are counted without and with
	// the hogs (each at least a minute gives a usable rate).
	Idle, Loaded time.Duration
	// Hogs is the number of `stress-ng --cpu` workers run for the loaded
	// phase (Debian's stress-ng; its absence is an error).
	Hogs int
	// Trials is the number of failover trials (leader SIGKILL to the
	// first acknowledged write) in each phase.
	Trials int
	// Log receives progress lines (nil: discarded).
	Log io.Writer
}

// ElectionsResult holds the terms per minute and failover times (s) of
// each phase, and the 1-minute load average seen at the end of each.
type ElectionsResult struct {
	IdleTermsPerMin, LoadedTermsPerMin float64
	IdleFailover, LoadedFailover       []float64
	IdleLoad, LoadedLoad               string
}

// String renders r on one line: terms per minute, failover median and
// max, for each phase.
func (r ElectionsResult) String() string {
	return fmt.Sprintf("idle: %.2f terms/min, failover %s (load %s); loaded: %.2f terms/min, failover %s (load %s)",
		r.IdleTermsPerMin, fmtFailover(r.IdleFailover), r.IdleLoad, r.LoadedTermsPerMin, fmtFailover(r.LoadedFailover), r.LoadedLoad)
}

func fmtFailover(xs []float64) string {
	if len(xs) == 0 {
		return "n/a"
	}
	mx := xs[0]
	var parts []string
	for _, x := range xs {
		mx = max(mx, x)
		parts = append(parts, fmt.Sprintf("%.2f", x))
	}
	return fmt.Sprintf("median %.2f s max %.2f s [%s]", Median(xs), mx, strings.Join(parts, " "))
}

// Elections starts a cluster with cfg.Flags, counts the Raft terms it goes
// through while idle for cfg.Idle, times cfg.Trials failovers, then does
// the same with cfg.Hogs CPU hogs running. Every process it starts is
// bounded by ctx and killed before it returns.
func Elections(ctx context.Context, cfg ElectionsConfig) (ElectionsResult, error) {
	var res ElectionsResult
	logf := func(format string, a ...any) {
		if cfg.Log != nil {
			fmt.Fprintf(cfg.Log, "%s "+format+"\n", append([]any{time.Now().UTC().Format("15:04:05")}, a...)...)
		}
	}
	if cfg.Hogs > 0 {
		if _, err := exec.LookPath("stress-ng"); err != nil {
			return res, fmt.Errorf("the loaded phase needs stress-ng (apt-get install stress-ng): %w", err)
		}
	}
	if err := os.MkdirAll(cfg.Dir, 0o755); err != nil {
		return res, err
	}
	c, err := newRaftpsCluster(cfg.Bin, cfg.Dir, 3, "", cfg.Flags...)
	if err != nil {
		return res, err
	}
	defer c.Close()
	sctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	err = c.Start(sctx)
	cancel()
	if err != nil {
		return res, fmt.Errorf("cluster did not start (logs in %s): %w", cfg.Dir, err)
	}
	phase := func(name string, d time.Duration) (float64, []float64, error) {
		rate, err := termsPerMinute(ctx, c, d)
		if err != nil {
			return 0, nil, err
		}
		logf("%s: %.2f terms/min over %v", name, rate, d)
		var fo []float64
		for t := 0; t < cfg.Trials; t++ {
			s, err := failoverTrial(ctx, c)
			if err != nil {
				return rate, fo, fmt.Errorf("%s failover trial %d: %w", name, t+1, err)
			}
			logf("%s failover trial %d: %.3f s", name, t+1, s)
			fo = append(fo, s)
		}
		return rate, fo, nil
	}
	if res.IdleTermsPerMin, res.IdleFailover, err = phase("idle", cfg.Idle); err != nil {
		return res, err
	}
	res.IdleLoad = loadAvg()
	if cfg.Hogs == 0 {
		return res, nil
	}
	hctx, stop := context.WithCancel(ctx)
	defer stop()
	// stress-ng ends on its own after its timeout even if this process dies.
	limit := cfg.Loaded + time.Duration(cfg.Trials)*30*time.Second + time.Minute
	hog := exec.CommandContext(hctx, "stress-ng", "--cpu", fmt.Sprint(cfg.Hogs), "--timeout", fmt.Sprintf("%ds", int(limit.Seconds())), "--quiet")
	if err := hog.Start(); err != nil {
		return res, fmt.Errorf("start stress-ng: %w", err)
	}
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); _ = hog.Wait() }()
	defer wg.Wait()
	defer stop()
	logf("stress-ng --cpu %d started (pid %d)", cfg.Hogs, hog.Process.Pid)
	time.Sleep(10 * time.Second) // let the load average climb
	res.LoadedTermsPerMin, res.LoadedFailover, err = phase("loaded", cfg.Loaded)
	res.LoadedLoad = loadAvg()
	return res, err
}

// termsPerMinute samples every running member's term for d and returns
// how many terms the cluster went through, per minute.
func termsPerMinute(ctx context.Context, c *raftpsCluster, d time.Duration) (float64, error) {
	clients := make([]*client.Client, len(c.grpc))
	for i, a := range c.grpc {
		cl, err := client.New([]string{a})
		if err != nil {
			return 0, err
		}
		defer cl.Close()
		clients[i] = cl
	}
	term := func() uint64 {
		var t uint64
		for _, cl := range clients {
			cctx, cancel := context.WithTimeout(ctx, time.Second)
			st, err := cl.Cluster.Status(cctx, &pb.StatusRequest{})
			cancel()
			if err == nil {
				t = max(t, st.GetTerm())
			}
		}
		return t
	}
	first := term()
	if first == 0 {
		return 0, errors.New("no member reported a term")
	}
	start := time.Now()
	last := first
	for time.Since(start) < d {
		select {
		case <-ctx.Done():
			return 0, ctx.Err()
		case <-time.After(250 * time.Millisecond):
		}
		last = max(last, term())
	}
	return float64(last-first) / time.Since(start).Minutes(), nil
}

// loadAvg returns /proc/loadavg's 1-minute figure ("?" if unreadable).
func loadAvg() string {
	b, err := os.ReadFile(filepath.Join("/proc", "loadavg"))
	if err != nil {
		return "?"
	}
	return strings.Fields(string(b))[0]
}
