package jepsen

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/status"

	pb "github.com/raftps/raftps/api/raftpspb"
	"github.com/raftps/raftps/internal/testing/localcluster"
)

// scenario is one fresh cluster in namespaces for a scenario test, with its
// history and results directory.
type scenario struct {
	t        *testing.T
	bin      string
	out      string
	h        *History
	hs       *Hosts
	conns    ConnSet
	names    []string
	addrs    []string
	pservers map[string]string // node -> pserver address
	creds    []grpc.DialOption // the admin's (Hosts.DialOptions)
	sum      Summary
}

// pserverArgs gives a node a fixed pserver port the probes can reach.
func pserverArgs(h *Host) []string {
	return []string{"--pserver-addr", fmt.Sprintf("%s:%d", h.IP, portPServer)}
}

// newScenario skips without root or with -short, starts nodes nodes (each
// with NodeArgs + extra(h)) and waits for an acknowledged write. Everything
// is torn down by t.Cleanup.
func newScenario(t *testing.T, name string, nodes int, extra func(h *Host) []string) *scenario {
	t.Helper()
	if testing.Short() {
		t.Skip("jepsen: -short; skipped (the scenario runs a real cluster)")
	}
	if os.Geteuid() != 0 {
		t.Fatal("jepsen: needs root to create network namespaces (CI runs as root; run the suite as root, or with -short to leave it out)")
	}
	sc := &scenario{t: t, bin: raftpsBinary(t), pservers: map[string]string{}}
	SweepStale()
	sc.out = *flagOut
	if sc.out == "" {
		sc.out = filepath.Join(moduleRoot(t), "integration", "results", time.Now().UTC().Format("20060102T150405Z")+"-"+name)
	} else {
		sc.out = filepath.Join(sc.out, name)
	}
	if err := os.MkdirAll(sc.out, 0o755); err != nil {
		t.Fatal(err)
	}
	h, err := NewHistory(filepath.Join(sc.out, "history.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	sc.h = h
	t.Cleanup(func() { _ = h.Close() })
	sc.sum = Summary{Start: h.Start(), Nodes: nodes, Binary: sc.bin, Ops: map[string]int{}, Faults: map[string]int{}}
	hs, err := NewHosts(HostsConfig{Nodes: nodes, LogDir: filepath.Join(sc.out, "logs"), LogStore: *flagLogStore})
	if err != nil {
		t.Fatalf("jepsen: hosts: %v", err)
	}
	sc.hs = hs
	t.Cleanup(func() { _ = hs.Close() })
	dataRoot, err := os.MkdirTemp("", fmt.Sprintf("rps-%d-data-", os.Getpid()))
	if err != nil {
		t.Fatal(err)
	}
	unreg := registerCleanup(func() { _ = os.RemoveAll(dataRoot) })
	t.Cleanup(func() { unreg(); _ = os.RemoveAll(dataRoot) })
	for _, n := range hs.Nodes {
		args := NodeArgs(hs, n, filepath.Join(dataRoot, n.Name), "info")
		if extra != nil {
			args = append(args, extra(n)...)
		}
		if err := n.Start(append([]string{sc.bin}, args...)...); err != nil {
			t.Fatal(err)
		}
		sc.names = append(sc.names, n.Name)
		sc.addrs = append(sc.addrs, fmt.Sprintf("%s:%d", n.IP, portGRPC))
		sc.pservers[n.Name] = fmt.Sprintf("%s:%d", n.IP, portPServer)
	}
	t.Cleanup(func() {
		for _, n := range hs.Nodes {
			n.Stop(5 * time.Second)
		}
	})
	if sc.creds, err = hs.DialOptions(); err != nil { // the admin's mutual TLS
		t.Fatal(err)
	}
	conns, err := Dial(sc.names, sc.addrs, sc.creds...)
	if err != nil {
		t.Fatal(err)
	}
	sc.conns = conns
	t.Cleanup(conns.Close)
	if err := sc.waitFormed(90 * time.Second); err != nil {
		t.Fatalf("jepsen: cluster did not form (see %s): %v", hs.LogDir, err)
	}
	t.Logf("%s: cluster formed; results go to %s", name, sc.out)
	return sc
}

// waitFormed waits for a leader and an acknowledged fence write.
func (sc *scenario) waitFormed(d time.Duration) error {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	leader, err := sc.conns.WaitLeader(ctx)
	if err == nil {
		_, err = sc.conns.PutFence(ctx, "/jepsen/fence", "formed")
	}
	if err == nil {
		sc.h.Notef("cluster formed; leader %s", leader)
	}
	return err
}

// cli runs the raftps binary against every node's client port, as the admin.
func (sc *scenario) cli(ctx context.Context, args ...string) (string, error) {
	args = append(append(args, "--endpoints", strings.Join(sc.addrs, ",")), localcluster.CLIFlags(sc.hs.Admin())...)
	out, err := exec.CommandContext(ctx, sc.bin, args...).CombinedOutput()
	sc.h.Notef("raftps %s: %v\n%s", strings.Join(args, " "), err, out)
	return string(out), err
}

// submit submits a training job on Fashion-MNIST with `raftps job submit`.
// Its slots are not replicated (--slot-replicas 1, whatever the master's
// default): these scenarios check R = 1's lease fence, handover and
// restores, where two nodes serving one slot is a violation; replicated
// slots, whose deposed primary may still answer reads while the backups
// refuse its writes, have their own scenario and checker
// (TestJepsenReplicatedSlots).
func (sc *scenario) submit(name string, args ...string) {
	sc.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	base := []string{"job", "submit", "--name", name, "--dataset", filepath.Join(moduleRoot(sc.t), "datasets", "fashion-mnist"),
		"--model", "mlp", "--hidden", "16", "--optimizer", "sgd", "--lr", "0.1", "--records", "60000", "--records-per-task", "2000",
		"--slot-replicas", "1"}
	if out, err := sc.cli(ctx, append(base, args...)...); err != nil {
		sc.t.Fatalf("jepsen: submit %s: %v\n%s", name, err, out)
	}
}

// allSeeAlive reports whether every node's gossip view holds n alive members.
func (sc *scenario) allSeeAlive(n int) bool {
	for _, c := range sc.conns {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		resp, err := c.Cluster.Members(ctx, &pb.MembersRequest{})
		cancel()
		if err != nil {
			return false
		}
		alive := 0
		for _, m := range resp.GetMembers() {
			if m.GetStatus() == "alive" {
				alive++
			}
		}
		if alive < n {
			return false
		}
	}
	return true
}

// cancelJob cancels a job through any node (best effort: the test is over).
func (sc *scenario) cancelJob(name string) {
	for _, c := range sc.conns {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		_, err := c.Master.CancelJob(ctx, &pb.CancelJobRequest{Name: name})
		cancel()
		if err == nil {
			return
		}
	}
}

// fault records f in the history and the summary.
func (sc *scenario) fault(f Fault) {
	sc.h.Add(Record{Type: "fault", At: f.Start, Fault: &f})
	sc.countFault(f)
}

// countFault records f in the summary (a fault already in the history).
func (sc *scenario) countFault(f Fault) {
	sc.sum.Faults[f.Type]++
	sc.sum.FaultList = append(sc.sum.FaultList, f)
}

// finish writes the summary and fails the test on any violation.
func (sc *scenario) finish(results ...Result) {
	sc.t.Helper()
	sc.sum.Results = append(sc.sum.Results, results...)
	sc.sum.Duration = time.Since(sc.h.Start()).Round(time.Second).String()
	sc.sum.Valid = Valid(sc.sum.Results)
	if err := WriteSummary(sc.out, sc.sum); err != nil {
		sc.t.Errorf("summary: %v", err)
	}
	sc.t.Logf("\n%s", sc.sum.Text())
	sc.t.Logf("results: %s", sc.out)
	if !sc.sum.Valid {
		sc.t.Fatalf("jepsen: a checker reported a violation; see %s/summary.txt", sc.out)
	}
}

// fenceLogTimes returns when (ns since the history's start) node's log
// says a slot was fenced ("slot fenced" lines of pserver/agent), after from.
func fenceLogTimes(path string, start time.Time, from int64) []int64 {
	f, err := os.Open(path)
	if err != nil {
		return nil
	}
	defer f.Close()
	var out []int64
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if !strings.Contains(line, `msg="slot fenced"`) || !strings.HasPrefix(line, "time=") {
			continue
		}
		ts, _, _ := strings.Cut(strings.TrimPrefix(line, "time="), " ")
		at, err := time.Parse(time.RFC3339Nano, ts)
		if err != nil {
			continue
		}
		if ns := int64(at.Sub(start)); ns >= from {
			out = append(out, ns)
		}
	}
	return out
}

// waitFor polls cond every 200ms for at most d.
func waitFor(d time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(d)
	for time.Now().Before(deadline) {
		if cond() {
			return true
		}
		time.Sleep(200 * time.Millisecond)
	}
	return cond()
}

// pserverLeaseTTL is pserver/agent's default lease TTL (Config.LeaseTTL),
// which `raftps node` uses.
const pserverLeaseTTL = 5 * time.Second

// TestJepsenFollowerLeaseLoss: a follower that hosts a pserver slot of a
// running async job is partitioned from the other nodes for 3 x the
// pserver lease TTL (15 s; clients in the root namespace still reach it).
// Probes Pull every slot on every node's pserver port every 100 ms
// throughout. CheckSlotServing: no two claims of one slot served in
// overlapping time, and the follower stopped serving within the TTL
// (measured fence time in the notes and "fence-ms-max"). After the heal,
// the same process (same pid, no restart) must serve a slot again: a
// second job of 3 slots is submitted and the fair share (one slot per
// node) gives it one. Short and long.
func TestJepsenFollowerLeaseLoss(t *testing.T) {
	sc := newScenario(t, "lease-loss", 3, pserverArgs)
	probes, err := StartServeProbes(sc.h, sc.pservers, 100*time.Millisecond, sc.creds...)
	if err != nil {
		t.Fatal(err)
	}
	stopped := false
	stopProbes := func() []ServeProbe {
		if stopped {
			return nil
		}
		stopped = true
		return probes.Stop()
	}
	t.Cleanup(func() { stopProbes() })

	job1, job2 := "lease-loss-1", "lease-loss-2"
	sc.submit(job1, "--pservers", "3", "--mode", "async", "--passes", "500", "--checkpoint-steps", "100")
	t.Cleanup(func() { sc.cancelJob(job1); sc.cancelJob(job2) })
	probes.Watch(job1, 3)
	if !waitFor(90*time.Second, func() bool {
		n := 0
		for _, s := range probes.Serving(job1) {
			n += len(s)
		}
		return n == 3
	}) {
		t.Fatalf("jepsen: %s: not every slot served within 90s: %v (logs in %s)", job1, probes.Serving(job1), sc.hs.LogDir)
	}
	time.Sleep(2 * time.Second) // pushes flowing

	ctx := context.Background()
	leader := sc.conns.Leader(ctx, 2*time.Second)
	var target *Host
	serving := probes.Serving(job1)
	for _, n := range sc.hs.Nodes {
		if n.Name != leader && len(serving[n.Name]) > 0 {
			target = n
			break
		}
	}
	if target == nil {
		t.Fatalf("jepsen: no follower serves a slot (leader %q, serving %v)", leader, serving)
	}
	pid := target.Pid()
	var others []*Host
	for _, n := range sc.hs.Nodes {
		if n != target {
			others = append(others, n)
		}
	}
	hold := 3 * pserverLeaseTTL
	f := Fault{Type: "partition-follower-3ttl", Target: target.Name, Start: sc.h.Now(),
		Detail: fmt.Sprintf("follower %s (leader %s) serving slots %v of %s isolated for %s", target.Name, leader, serving[target.Name], job1, hold)}
	if err := sc.hs.Partition([]*Host{target}, others); err != nil {
		f.Err = err.Error()
	}
	sc.h.Notef("nemesis: %s", f.Detail)
	time.Sleep(hold)
	if err := sc.hs.Heal(); err != nil && f.Err == "" {
		f.Err = err.Error()
	}
	f.End = sc.h.Now()
	sc.fault(f)
	t.Logf("partitioned %s (serving %v) for %s; healed", target.Name, serving[target.Name], hold)

	// After the heal: the same process serves a slot again. Job 2 has 3
	// slots and each of the 3 nodes claims at most its fair share of 1, as
	// the claimant's gossip sees the pserver nodes: job 2 is submitted once
	// every node sees all 3 alive again (before that, a node that still
	// counts the healed one as dead takes 2 slots, and no slot is left for
	// it: a race of the test, not a fault of the node).
	if !waitFor(60*time.Second, func() bool { return sc.allSeeAlive(len(sc.conns)) }) {
		t.Fatalf("jepsen: gossip did not see all %d nodes alive on every node within 60s of the heal", len(sc.conns))
	}
	sc.submit(job2, "--pservers", "3", "--mode", "async", "--passes", "500", "--checkpoint-steps", "100")
	probes.Watch(job2, 3)
	healed := f.End
	reserve := newResult("reserve-after-heal")
	var reservedAt int64
	// A claim the target made anew: a (job, slot, incarnation) it did not
	// serve before the partition began (serving on under the old claim is
	// what a node that never noticed its lost lease does).
	type claimKey struct {
		job  string
		slot int32
		inc  int64
	}
	ok := waitFor(90*time.Second, func() bool {
		old := map[claimKey]bool{}
		for _, pr := range snapshotProbes(probes) {
			k := claimKey{pr.Job, pr.Slot, pr.Incarnation}
			switch {
			case pr.Node != target.Name || !pr.OK:
			case pr.Call < f.Start:
				old[k] = true
			case pr.Call > healed && !old[k]:
				reservedAt = pr.Return
				return true
			}
		}
		return false
	})
	switch {
	case !ok:
		reserve.violate("%s served no new claim within 90s of the heal (logs in %s)", target.Name, sc.hs.LogDir)
	case target.Pid() != pid || !target.Running():
		reserve.violate("%s was restarted (pid %d -> %d)", target.Name, pid, target.Pid())
	default:
		reserve.Notes = append(reserve.Notes, fmt.Sprintf("%s (pid %d, not restarted) served a new claim again %s after the heal", target.Name, pid, fmtNs(reservedAt-healed)))
		reserve.Stats["reserve-ms"] = int((reservedAt - healed) / 1e6)
	}
	time.Sleep(3 * time.Second)
	all := stopProbes()
	if b, err := json.Marshal(all); err == nil {
		_ = os.WriteFile(filepath.Join(sc.out, "probes.json"), b, 0o644)
	}
	res := CheckSlotServing(all, SlotServingBounds{TTL: pserverLeaseTTL, ProbeSlack: 300 * time.Millisecond, Isolated: []Fault{f}})
	for _, at := range fenceLogTimes(target.LogPath(), sc.h.Start(), f.Start) {
		if at <= f.End {
			res.Notes = append(res.Notes, fmt.Sprintf("%s's log: slot fenced %s after the partition began", target.Name, fmtNs(at-f.Start)))
		}
	}
	sc.sum.Ops["serve-probes"] = len(all)
	sc.finish(res, reserve)
}

func snapshotProbes(p *ServeProbes) []ServeProbe {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]ServeProbe(nil), p.probes...)
}

// TestJepsenSpecFuzzRestart submits the fixed extreme job specs of
// SpecMutations and 40 random ones (seeded by -jepsen.seed) while the
// register workload runs; each must be refused with InvalidArgument (or
// ResourceExhausted) or accepted as a job with tasks (CheckSpecFuzz). Then
// every node streams a snapshot (`raftps snapshot save`, which decodes it
// in full) and `raftps snapshot status` reads it; every node is killed at
// once (SIGKILL), all are restarted on their data dirs, the cluster must form again,
// serve the accepted jobs unchanged and stream decodable snapshots again;
// the register history across the restart must be linearizable. The
// nodes have the server role only, so that no accepted huge model is
// allocated by a pserver or trainer on this shared machine (admission of
// such models is item 11's). Short and long.
func TestJepsenSpecFuzzRestart(t *testing.T) {
	sc := newScenario(t, "spec-fuzz-restart", 3, func(*Host) []string { return []string{"--roles", "server"} })
	seed := *flagSeed
	if seed == 0 {
		seed = uint64(time.Now().UnixNano())
	}
	sc.h.Notef("seed %d", seed)
	r := rand.New(rand.NewPCG(seed, 12))
	regs := func(d time.Duration) {
		ctx, cancel := context.WithTimeout(context.Background(), d)
		defer cancel()
		RunRegisters(ctx, RegisterConfig{Clients: 3, Keys: 3}, sc.conns, sc.h)
	}
	done := make(chan struct{})
	go func() { defer close(done); regs(15 * time.Second) }()

	base := &pb.JobSpec{
		Model:          &pb.ModelSpec{Name: "mlp", Hidden: []int32{16}},
		Dataset:        &pb.DatasetSpec{Path: filepath.Join(moduleRoot(t), "datasets", "fashion-mnist"), Records: 60000},
		RecordsPerTask: 2000, Passes: 1, BatchSize: 64, NumPservers: 2,
		Optimizer:  &pb.OptimizerSpec{Name: "sgd", LearningRate: 0.1},
		Checkpoint: &pb.CheckpointPolicy{EverySteps: 200, KeepMax: 3, Replicas: 2},
	}
	muts := append([]SpecMutation{{Name: "none (the valid base spec)", Apply: func(*pb.JobSpec) {}}}, SpecMutations(r, 40)...)
	var outs []SpecOutcome
	accepted := map[string]*pb.JobStatus{}
	for i, m := range muts {
		name := fmt.Sprintf("fuzz-%03d", i)
		spec := MutatedSpec(base, name, m)
		_, c := sc.conns.Random(r)
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		_, err := c.Master.SubmitJob(ctx, &pb.SubmitJobRequest{Spec: spec})
		cancel()
		o := SpecOutcome{Mutation: name + " " + m.Name, Code: status.Code(err).String()}
		if err != nil {
			o.Message = status.Convert(err).Message()
		} else {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			resp, gerr := c.Master.GetJob(ctx, &pb.GetJobRequest{Name: name})
			cancel()
			if gerr != nil {
				o.Code, o.Message = "GetJob "+status.Code(gerr).String(), status.Convert(gerr).Message()
			} else {
				o.State, o.Tasks = resp.GetStatus().GetState().String(), resp.GetStatus().GetTotalTasks()
				accepted[name] = resp.GetStatus()
			}
		}
		sc.h.Notef("spec fuzz: %+v", o)
		outs = append(outs, o)
	}
	<-done
	fuzz := CheckSpecFuzz(outs)
	if b, err := json.MarshalIndent(outs, "", " "); err == nil {
		_ = os.WriteFile(filepath.Join(sc.out, "specs.json"), b, 0o644)
	}

	restart := newResult("restart")
	snapshots := func(phase string) {
		for i, n := range sc.hs.Nodes {
			file := filepath.Join(sc.out, fmt.Sprintf("snapshot-%s-%s.db", phase, n.Name))
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			out, err := exec.CommandContext(ctx, sc.bin, append([]string{"snapshot", "save", file, "--endpoints", sc.addrs[i]}, localcluster.CLIFlags(sc.hs.Admin())...)...).CombinedOutput()
			if err == nil {
				out, err = exec.CommandContext(ctx, sc.bin, "snapshot", "status", file).CombinedOutput()
			}
			cancel()
			sc.h.Notef("snapshot %s %s: %v\n%s", phase, n.Name, err, out)
			if err != nil {
				restart.violate("%s: snapshot of %s not saved or not decodable: %v: %s", phase, n.Name, err, strings.TrimSpace(string(out)))
			} else {
				restart.Stats["snapshots"]++
			}
			_ = os.Remove(file)
		}
	}
	snapshots("before")
	start := sc.h.Now()
	// Every node at once, SIGKILL: no graceful leave (which would remove
	// the first stopped nodes from the Raft configuration), every node
	// restarts from what it has on disk.
	var kills sync.WaitGroup
	for _, n := range sc.hs.Nodes {
		kills.Add(1)
		go func() { defer kills.Done(); n.Kill() }()
	}
	kills.Wait()
	for _, n := range sc.hs.Nodes {
		if err := n.Restart(); err != nil {
			t.Fatal(err)
		}
	}
	formedErr := sc.waitFormed(2 * time.Minute)
	sc.fault(Fault{Type: "restart-all", Target: names(sc.hs.Nodes), Start: start, End: sc.h.Now(), Err: errString(formedErr)})
	if formedErr != nil {
		restart.violate("the cluster did not come back within 2 minutes: %v", formedErr)
	} else {
		restart.Notes = append(restart.Notes, fmt.Sprintf("killed (SIGKILL, all at once) and restarted all %d nodes; formed again %s after the kill", len(sc.hs.Nodes), fmtNs(sc.h.Now()-start)))
		snapshots("after")
		for name, before := range accepted {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			resp, err := sc.conns[0].Master.GetJob(ctx, &pb.GetJobRequest{Name: name})
			cancel()
			switch {
			case err != nil:
				restart.violate("accepted job %s not served after the restart: %v", name, err)
			case resp.GetStatus().GetTotalTasks() != before.GetTotalTasks():
				restart.violate("accepted job %s: %d tasks before the restart, %d after", name, before.GetTotalTasks(), resp.GetStatus().GetTotalTasks())
			default:
				restart.Stats["jobs-intact"]++
			}
		}
		regs(10 * time.Second)
	}
	ops := sc.h.RegisterOps()
	regRes, _ := CheckRegisters(ops, time.Minute)
	sc.sum.Ops["register"] = len(ops)
	sc.sum.Ops["job-submit"] = len(outs)
	sc.finish(fuzz, restart, regRes)
}

func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}
