package jepsen

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/anishathalye/porcupine"
	pb "github.com/raftps/raftps/api/raftpspb"
	"github.com/raftps/raftps/internal/testing/localcluster"
	"google.golang.org/grpc"
)

// SuiteConfig is one run of the suite.
type SuiteConfig struct {
	// Binary is the raftps binary, started as `raftps node ...` in each namespace.
	Binary string
	// Nodes: 3 or 5.
	Nodes int
	// OutDir receives history.jsonl, linearizability.html, logs/, summary.*.
	OutDir string
	// Workload is how long the clients run (faults happen inside it).
	Workload time.Duration
	// Faults is the nemesis schedule (one at a time, in order).
	Faults []string
	// Hold is how long each fault lasts (pauses: 1.5-3 s).
	Hold time.Duration
	// ElectionTimeout of raftps (500ms); used by the lease checker.
	ElectionTimeout time.Duration
	// CheckTimeout bounds Porcupine.
	CheckTimeout time.Duration
	// LogStore is every node's --raft-log-store: boltdb or wal ("" is
	// the node's default, boltdb). Recorded in the summary.
	LogStore string
	// LogLevel passed to every node (default "info").
	LogLevel string
	Seed     uint64
	// Serializable: register reads are serializable (a canary run that
	// should be found not linearizable when the faults isolate a node).
	Serializable bool
	// Training also submits a small job (`raftps job submit` with
	// TrainingArgs, dataset DatasetDir) and checks its events and restores.
	Training     bool
	TrainingArgs []string
	DatasetDir   string
	// Logf reports progress (t.Logf).
	Logf func(format string, args ...any)
}

// Ports every node listens on inside its own namespace.
const (
	portGRPC   = 7000
	portRaft   = 7001
	portGossip = 7002
	portHTTP   = 7003
)

// NodeArgs is the command line of host h in hs (without the binary).
func NodeArgs(hs *Hosts, h *Host, dataDir, logLevel string) []string {
	var join []string
	for _, o := range hs.Nodes {
		if o != h {
			join = append(join, fmt.Sprintf("%s:%d", o.IP, portGossip))
		}
	}
	args := []string{"node",
		"--id", h.Name,
		"--data-dir", dataDir,
		"--grpc-addr", fmt.Sprintf("%s:%d", h.IP, portGRPC),
		"--raft-addr", fmt.Sprintf("%s:%d", h.IP, portRaft),
		"--gossip-addr", fmt.Sprintf("%s:%d", h.IP, portGossip),
		"--http-addr", fmt.Sprintf("%s:%d", h.IP, portHTTP),
		"--join", strings.Join(join, ","),
		"--bootstrap-expect", fmt.Sprint(len(hs.Nodes)),
		"--log-level", logLevel,
	}
	if hs.LogStore != "" {
		args = append(args, "--raft-log-store", hs.LogStore)
	}
	if len(h.TLSArgs) > 0 {
		args = append(args, h.TLSArgs...) // mutual TLS and gossip encryption (Hosts' PKI)
	} else {
		args = append(args, "--insecure")
	}
	if root := localcluster.DatasetRoot(); root != "" {
		args = append(args, "--dataset-root", root) // jobs name datasets/fashion-mnist
	}
	return args
}

// RunSuite creates the hosts, starts the cluster, runs the workloads under
// the nemesis, checks the history and writes the results to cfg.OutDir. It
// returns the summary; err is set when the run itself could not be carried
// out (cluster never formed), not for violations (see Summary.Valid).
func RunSuite(ctx context.Context, cfg SuiteConfig) (sum Summary, err error) {
	cfg.setDefaults()
	if err := os.MkdirAll(cfg.OutDir, 0o755); err != nil {
		return sum, err
	}
	h, err := NewHistory(filepath.Join(cfg.OutDir, "history.jsonl"))
	if err != nil {
		return sum, err
	}
	defer h.Close()
	sum = Summary{Start: h.Start(), Nodes: cfg.Nodes, Binary: cfg.Binary, LogStore: cfg.LogStore, Ops: map[string]int{}, Faults: map[string]int{}}

	hs, err := NewHosts(HostsConfig{Nodes: cfg.Nodes, LogDir: filepath.Join(cfg.OutDir, "logs"), LogStore: cfg.LogStore})
	if err != nil {
		return sum, err
	}
	defer hs.Close()
	dataRoot, err := os.MkdirTemp("", fmt.Sprintf("rps-%d-data-", os.Getpid()))
	if err != nil {
		return sum, err
	}
	unreg := registerCleanup(func() { _ = os.RemoveAll(dataRoot) })
	defer func() { unreg(); _ = os.RemoveAll(dataRoot) }()

	var names, addrs []string
	for _, n := range hs.Nodes {
		args := NodeArgs(hs, n, filepath.Join(dataRoot, n.Name), cfg.LogLevel)
		if err := n.Start(append([]string{cfg.Binary}, args...)...); err != nil {
			return sum, err
		}
		names = append(names, n.Name)
		addrs = append(addrs, fmt.Sprintf("%s:%d", n.IP, portGRPC))
	}
	defer func() {
		for _, n := range hs.Nodes {
			n.Stop(5 * time.Second)
		}
	}()
	creds, err := hs.DialOptions() // the admin's mutual TLS (plaintext with --insecure hosts)
	if err != nil {
		return sum, err
	}
	conns, err := Dial(names, addrs, creds...)
	if err != nil {
		return sum, err
	}
	defer conns.Close()

	formCtx, cancel := context.WithTimeout(ctx, 90*time.Second)
	leader, err := conns.WaitLeader(formCtx)
	if err == nil {
		// A leader is not enough: wait for a write to be acknowledged.
		_, err = conns.PutFence(formCtx, "/jepsen/fence", "start")
	}
	cancel()
	if err != nil {
		return sum, fmt.Errorf("jepsen: cluster did not form (see %s): %w", hs.LogDir, err)
	}
	cfg.Logf("cluster formed; leader %s", leader)
	h.Notef("cluster formed; leader %s", leader)

	startRev, err := conns.LinearizableRevision(ctx, "/jepsen/fence")
	if err != nil {
		return sum, err
	}
	watchers := StartWatchers(ctx, WatchConfig{Watchers: 3, Prefix: "/jepsen/"}, conns, h, startRev+1)

	var (
		trainDone = make(chan TrainingHistory, 1)
		trainErr  error
	)
	if cfg.Training {
		closeBal, err := submitTraining(ctx, cfg, hs, addrs, creds, h, trainDone, &trainErr)
		if err != nil {
			return sum, err
		}
		defer closeBal()
	}

	acked, leaseRecs, faults := runWorkload(ctx, cfg, hs, conns, h)

	// Quiesce: one acknowledged fence put, every watcher must reach it.
	runs, fenceRev, finalRev, final := quiesce(ctx, conns, watchers, h)
	// The final state counts as acknowledged (quiesce).
	acked = append(acked, final...)

	// Check.
	regOps := h.RegisterOps()
	results, info := checkHistory(cfg, h, regOps, runs, acked, fenceRev, finalRev, leaseRecs, faults)
	sum.Results = results
	watchRes := results[1]
	if cfg.Training {
		cfg.Logf("waiting for the training job to end")
		th, ok := <-trainDone
		sum.Results = append(sum.Results, trainingResult(cfg, th, ok, trainErr, &sum))
	}
	if err := WriteVisualization(filepath.Join(cfg.OutDir, "linearizability.html"), info, faults); err != nil {
		h.Notef("visualization: %v", err)
	}
	sum.Ops["register"] = len(regOps)
	sum.Ops["lease"] = len(leaseRecs)
	sum.Ops["watch-events"] = watchRes.Stats["events"]
	return finishSummary(cfg, h, sum, faults)
}

// finishSummary ends a suite run: it counts the faults into sum, closes
// the history, writes sum (with its results) into cfg.OutDir and returns
// it with its verdict.
func finishSummary(cfg SuiteConfig, h *History, sum Summary, faults []Fault) (Summary, error) {
	for _, f := range faults {
		sum.Faults[f.Type]++
	}
	sum.FaultList = faults
	sum.Duration = time.Since(h.Start()).Round(time.Second).String()
	if err := h.Close(); err != nil {
		cfg.Logf("history: %v", err)
	}
	if err := WriteSummary(cfg.OutDir, sum); err != nil {
		return sum, err
	}
	sum.Valid = Valid(sum.Results)
	return sum, nil
}

// setDefaults fills the zero fields of cfg that have defaults.
func (cfg *SuiteConfig) setDefaults() {
	if cfg.Logf == nil {
		cfg.Logf = func(string, ...any) {}
	}
	if cfg.ElectionTimeout == 0 {
		cfg.ElectionTimeout = 500 * time.Millisecond
	}
	if cfg.LogLevel == "" {
		cfg.LogLevel = "info"
	}
	if cfg.CheckTimeout == 0 {
		cfg.CheckTimeout = time.Minute
	}
}

// submitTraining submits the suite's training job and follows its events
// into trainDone; a failed submit closes trainDone and sets *trainErr.
// closeBal closes the connection the follower reads with (a no-op if none).
func submitTraining(ctx context.Context, cfg SuiteConfig, hs *Hosts, addrs []string, creds []grpc.DialOption, h *History,
	trainDone chan TrainingHistory, trainErr *error) (closeBal func(), err error) {
	closeBal = func() {}
	name := fmt.Sprintf("jepsen-%d", os.Getpid())
	args := append([]string{"job", "submit", "--endpoints", strings.Join(addrs, ",")}, localcluster.CLIFlags(hs.Admin())...)
	args = append(append(args, "--name", name, "--dataset", cfg.DatasetDir), cfg.TrainingArgs...)
	out, err := exec.CommandContext(ctx, cfg.Binary, args...).CombinedOutput()
	h.Notef("training: raftps %s: %v\n%s", strings.Join(args, " "), err, out)
	if err != nil {
		*trainErr = fmt.Errorf("submit: %w: %s", err, out)
		close(trainDone)
	} else {
		bal, err := DialBalanced(addrs, creds...)
		if err != nil {
			return nil, err
		}
		closeBal = func() { bal.Close() }
		tctx, tcancel := context.WithTimeout(ctx, cfg.Workload+2*time.Minute)
		go func() {
			defer tcancel()
			th, _ := FollowJob(tctx, pb.NewMasterClient(bal), pb.NewWatchClient(bal), name)
			trainDone <- th
		}()
	}
	return closeBal, nil
}

// trainingResult checks the training job's history th (ok: the job was
// submitted; else trainErr says why not), writes it to training.json and
// counts its events in sum.
func trainingResult(cfg SuiteConfig, th TrainingHistory, ok bool, trainErr error, sum *Summary) Result {
	var tr Result
	if !ok {
		tr = newResult("training")
		tr.Verdict = VerdictUnknown
		tr.Notes = append(tr.Notes, fmt.Sprintf("job not submitted: %v", trainErr))
	} else {
		tr = CheckTraining(th)
		if th.Final != nil {
			tr.Notes = append(tr.Notes, fmt.Sprintf("job %s: state %s, pass %d, done %d, failed %d, requeued %d, restores %d, pointers seen %d",
				th.Job, th.Final.GetState(), th.Final.GetPass(), th.Final.GetDone(), th.Final.GetFailed(), th.Final.GetRequeued(), len(th.Restores), len(th.Pointers)))
		}
		sum.Ops["job-events"] = len(th.Events)
		if b, err := json.MarshalIndent(th, "", " "); err == nil {
			_ = os.WriteFile(filepath.Join(cfg.OutDir, "training.json"), b, 0o644)
		}
	}
	return tr
}

// runWorkload runs the register and lease workloads for cfg.Workload with
// the nemesis injecting cfg.Faults, then heals every fault and restarts a
// node not running. It returns the acknowledged puts, the lease records
// and the faults injected.
func runWorkload(ctx context.Context, cfg SuiteConfig, hs *Hosts, conns ConnSet, h *History) ([]AckedPut, []LeaseRecord, []Fault) {
	wctx, wcancel := context.WithTimeout(ctx, cfg.Workload)
	defer wcancel()
	var (
		wg         sync.WaitGroup
		acked      []AckedPut
		leaseRecs  []LeaseRecord
		faults     []Fault
		leaseCfg   = LeaseConfig{TTL: 4}
		regCfg     = RegisterConfig{Clients: 5, Keys: 3, Serializable: cfg.Serializable}
		faultSlots = len(cfg.Faults) + 1
	)
	hold := cfg.Hold
	if hold == 0 {
		hold = 4 * time.Second
	}
	quiet := cfg.Workload/time.Duration(faultSlots) - hold
	if quiet < 2*time.Second {
		quiet = 2 * time.Second
	}
	nem := NewNemesis(NemesisConfig{Faults: cfg.Faults, Hold: hold, Quiet: quiet, Seed: cfg.Seed}, hs, conns, h)
	wg.Add(3)
	go func() { defer wg.Done(); acked = RunRegisters(wctx, regCfg, conns, h) }()
	go func() { defer wg.Done(); leaseRecs = RunLeases(wctx, leaseCfg, conns, h) }()
	go func() { defer wg.Done(); faults = nem.Run(wctx) }()
	cfg.Logf("workload running for %s with %d faults (hold %s, quiet %s)", cfg.Workload, len(cfg.Faults), hold, quiet)
	wg.Wait()
	_ = hs.Heal()
	for _, n := range hs.Nodes {
		if !n.Running() {
			h.Notef("node %s not running at the end of the workload; restarting", n.Name)
			_ = n.Restart()
		}
	}
	return acked, leaseRecs, faults
}

// quiesce puts the end fence and waits (30 s at most) for every watcher to
// reach it; it returns the watchers' runs, the fence's revision, and the
// linearizable revision and key/values read after the watchers stopped
// (finalRev 0 and no key/values if a read failed). The final state counts
// as acknowledged: each key's last put committed at its mod_revision, so
// every watcher that covered that revision must have it (this catches
// gaps at unacknowledged writes).
func quiesce(ctx context.Context, conns ConnSet, watchers *Watchers, h *History) (runs []WatcherRun, fenceRev, finalRev int64, final []AckedPut) {
	endCtx, endCancel := context.WithTimeout(ctx, 60*time.Second)
	defer endCancel()
	fenceRev, ferr := conns.PutFence(endCtx, "/jepsen/fence", "end")
	runs = watchers.Finish(fenceRev, 30*time.Second)
	// Read after the watchers stopped: every event they got was committed
	// before this read, so none may be beyond its revision (lease expiries
	// go on after the workload).
	finalRev, rerr := conns.LinearizableRevision(endCtx, "/jepsen/fence")
	kvs, serr := conns.FinalState(endCtx, "/jepsen/")
	if ferr != nil || rerr != nil || serr != nil {
		h.Notef("final fence/reads failed: %v %v %v", ferr, rerr, serr)
		finalRev = 0
	} else {
		return runs, fenceRev, finalRev, kvs
	}
	return runs, fenceRev, finalRev, nil
}

// checkHistory runs the register, watch and lease checkers over the
// run's history; it returns their results in that order and the
// linearizability info for the visualization.
func checkHistory(cfg SuiteConfig, h *History, regOps []RegisterOp, runs []WatcherRun, acked []AckedPut, fenceRev, finalRev int64,
	leaseRecs []LeaseRecord, faults []Fault) ([]Result, porcupine.LinearizationInfo) {
	regRes, info := CheckRegisters(regOps, cfg.CheckTimeout)
	watchRes := CheckWatches(runs, acked, finalRev)
	for _, r := range runs {
		if r.EndRevision < fenceRev {
			watchRes.Notes = append(watchRes.Notes, fmt.Sprintf("watcher %d covered only up to %d < fence %d", r.ID, r.EndRevision, fenceRev))
		}
	}
	terms := TermChanges(regOps, leaseRecs)
	leaseRes := CheckLeases(leaseRecs, LeaseBounds{
		ElectionTimeout: cfg.ElectionTimeout, Slack: 2 * time.Second, Margin: 100 * time.Millisecond,
		Faults: append(append([]Fault(nil), faults...), terms...),
	})
	leaseRes.Stats["term-changes"] = len(terms)
	for _, tc := range terms {
		h.Notef("observed %s first at %s", tc.Target, fmtNs(tc.Start))
	}
	return []Result{regRes, watchRes, leaseRes}, info
}
