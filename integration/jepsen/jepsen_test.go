package jepsen

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/raftps/raftps/internal/testing/testutil"
	"github.com/raftps/raftps/raftstore"
)

var (
	flagBin      = flag.String("jepsen.bin", "", "path to the raftps binary (default: go build -tags raftps_testclock ./cmd/raftps into a temp dir)")
	flagLong     = flag.Bool("jepsen.long", false, "long run: 5 nodes, every fault kind, about 10 minutes (use -timeout 30m)")
	flagOut      = flag.String("jepsen.out", "", "results directory (default: integration/results/<timestamp>)")
	flagSeed     = flag.Uint64("jepsen.seed", 0, "nemesis seed (default: time)")
	flagFaults   = flag.String("jepsen.faults", "", "comma-separated fault schedule overriding the default (kinds: see AllFaults)")
	flagTrain    = flag.Bool("jepsen.training", false, "also run a training job (mlp, 40 passes of 60000 records) under the faults and check its task events and restores (always on with -jepsen.long)")
	flagLogStore = flag.String("jepsen.logstore", "", "every node's --raft-log-store: boltdb or wal (default: the node's default, boltdb)")
	flagCanary   = flag.Bool("jepsen.canary", false, "canary: serializable reads (followers serve their local, possibly stale, state); the test then expects the checker to find a violation")
)

// moduleRoot is the directory holding go.mod.
func moduleRoot(t *testing.T) string {
	t.Helper()
	root, err := testutil.ModuleRoot()
	if err != nil {
		t.Fatal(err)
	}
	return root
}

// built is ./cmd/raftps built once per test process (every test of the
// package runs the same binary); TestMain removes its directory.
var built struct {
	once sync.Once
	dir  string
	bin  string
	out  []byte
}

// raftpsBinary returns -jepsen.bin or builds ./cmd/raftps (with
// raftstore.TestClockTag); the test fails
// when the binary does not build or lacks a node flag the suite uses.
func raftpsBinary(t *testing.T) string {
	t.Helper()
	bin := *flagBin
	if bin == "" {
		built.once.Do(func() {
			dir, err := os.MkdirTemp("", fmt.Sprintf("rps-%d-data-bin-", os.Getpid()))
			if err != nil {
				built.out = []byte(err.Error())
				return
			}
			built.dir = dir
			// With the test clock (raftstore.TestClockTag): the clock-step
			// scenario sets raftstore.TestClockOffsetEnv on its nodes.
			cmd := exec.Command("go", "build", "-tags", raftstore.TestClockTag, "-o", filepath.Join(dir, "raftps"), "./cmd/raftps")
			cmd.Dir = moduleRoot(t)
			if built.out, err = cmd.CombinedOutput(); err == nil {
				built.bin = filepath.Join(dir, "raftps")
			}
		})
		if built.bin == "" {
			t.Fatalf("jepsen: ./cmd/raftps does not build:\n%s", built.out)
		}
		bin = built.bin
	}
	var help bytes.Buffer
	cmd := exec.Command(bin, "node", "--help")
	cmd.Stdout, cmd.Stderr = &help, &help
	_ = cmd.Run() // --help may exit non-zero
	var missing []string
	for _, f := range []string{"--id", "--data-dir", "--grpc-addr", "--raft-addr", "--gossip-addr", "--http-addr", "--join", "--bootstrap-expect", "--log-level"} {
		if !strings.Contains(help.String(), strings.TrimPrefix(f, "-")) {
			missing = append(missing, f)
		}
	}
	if len(missing) > 0 {
		t.Fatalf("jepsen: `%s node --help` lacks %v, which the suite passes to every node\n%s", bin, missing, help.String())
	}
	return bin
}

// TestJepsen runs the fault suite against real raftps processes in network
// namespaces and fails if any checker reports a violation. See doc.go.
func TestJepsen(t *testing.T) {
	if testing.Short() {
		t.Skip("jepsen: -short; skipped (the suite runs real clusters for minutes)")
	}
	if os.Geteuid() != 0 {
		t.Fatal("jepsen: needs root to create network namespaces (CI runs as root; run the suite as root, or with -short to leave it out)")
	}
	bin := raftpsBinary(t)
	if removed := SweepStale(); len(removed) > 0 {
		t.Logf("swept stale objects of dead runs: %v", removed)
	}
	out := *flagOut
	if out == "" {
		out = filepath.Join(moduleRoot(t), "integration", "results", time.Now().UTC().Format("20060102T150405Z"))
	}
	seed := *flagSeed
	if seed == 0 {
		seed = uint64(time.Now().UnixNano())
	}
	cfg := SuiteConfig{
		Binary:       bin,
		Nodes:        3,
		OutDir:       out,
		Workload:     80 * time.Second,
		Faults:       []string{FaultKillLeader, FaultPauseLeader, FaultPartitionLeader, FaultLoss, FaultMembership},
		Hold:         4 * time.Second,
		CheckTimeout: time.Minute,
		Seed:         seed,
		LogStore:     *flagLogStore,
		Logf:         t.Logf,
	}
	if *flagLong {
		cfg.Nodes = 5
		cfg.Workload = 8 * time.Minute
		cfg.Faults = append(append([]string(nil), AllFaults...), AllFaults...)
		cfg.Hold = 6 * time.Second
		cfg.CheckTimeout = 5 * time.Minute
	}
	if *flagTrain || *flagLong {
		cfg.Training = true
		cfg.DatasetDir = filepath.Join(moduleRoot(t), "datasets", "fashion-mnist")
		cfg.TrainingArgs = []string{"--model", "mlp", "--hidden", "16", "--optimizer", "sgd", "--lr", "0.1", "--records", "60000",
			"--records-per-task", "2000", "--passes", "40", "--pservers", "2", "--mode", "sync", "--checkpoint-steps", "20"}
	}
	if *flagFaults != "" {
		cfg.Faults = strings.Split(*flagFaults, ",")
	}
	if *flagCanary {
		cfg.Serializable = true
		if *flagFaults == "" {
			cfg.Faults = []string{FaultPartitionLeader, FaultPartitionHalves, FaultPartitionLeader}
		}
	}
	t.Logf("results go to %s (seed %d)", out, seed)
	ctx, cancel := context.WithTimeout(context.Background(), cfg.Workload+5*time.Minute)
	defer cancel()
	sum, err := RunSuite(ctx, cfg)
	if err != nil {
		for _, n := range []string{"n1", "n2", "n3", "n4", "n5"} {
			if b, rerr := os.ReadFile(filepath.Join(out, "logs", n+".log")); rerr == nil {
				lines := strings.Split(strings.TrimSpace(string(b)), "\n")
				t.Logf("last lines of %s.log:\n%s", n, strings.Join(lines[max(0, len(lines)-15):], "\n"))
			}
		}
		t.Fatalf("jepsen: run failed: %v (results so far in %s)", err, out)
	}
	t.Logf("\n%s", sum.Text())
	t.Logf("results: %s", out)
	if *flagCanary {
		if sum.Valid {
			t.Fatalf("jepsen canary: serializable reads under partitions were not caught; see %s/summary.txt", out)
		}
		t.Logf("jepsen canary: the violation was caught as it should be")
		return
	}
	if !sum.Valid {
		t.Fatalf("jepsen: a checker reported a violation; see %s/summary.txt", out)
	}
}
