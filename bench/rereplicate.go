package bench

import (
	"context"
	"fmt"
	"os"
	"strconv"
)

// rereplicateSection (issue 34, "time to re-replicate a slot while
// training") runs pserver/agent's BenchmarkRereplicate once: three
// loopback nodes, one momentum slot of RereplicateParams parameters
// (1M in Quick runs) with replicas 2, a trainer pushing gradients (of at
// most 8M parameters);
// the backup's node dies and a new backup is built on a third node from
// the primary's snapshot while the trainer goes on. Rows: the build time,
// and the trainer's pushes per second during the build vs before it.
// Skipped with "rereplicate" in Config.Skip.
func (r *runner) rereplicateSection(ctx context.Context) {
	if r.skipped("rereplicate") {
		return
	}
	params := int64(RereplicateParams)
	if r.cfg.Quick {
		params = 1 << 20
	}
	r.logf("go test -bench BenchmarkRereplicate ./pserver/agent (%d params)", params)
	// The size goes by the environment (RunGoBench's flags come before
	// the package, where go test refuses the benchmark's own flag).
	os.Setenv(rereplicateParamsEnv, strconv.FormatInt(params, 10))
	res, out, err := RunGoBench(ctx, r.cfg.Root, "./pserver/agent", "^BenchmarkRereplicate$", "1x")
	os.Unsetenv(rereplicateParamsEnv)
	if err != nil || len(res) == 0 {
		r.note(fmt.Sprintf("pserver/agent BenchmarkRereplicate: no result (%v)", err))
		r.logf("%s", out)
	}
	r.raw["go/rereplicate"] = res
	for _, row := range rereplicateRows(res, params) {
		r.add(row)
	}
}

// rereplicateRows are the section's rows from BenchmarkRereplicate's
// results for a slot of params parameters (n/a where missing).
func rereplicateRows(res []GoBench, params int64) []Row {
	name := fmt.Sprintf("Rereplicate/params=%d", params)
	what := fmt.Sprintf("%dM-param momentum slot (%d MiB)", params>>20, 8*params>>20)
	return []Row{
		{Section: "replicated slots (go bench)", Metric: "re-replicate a " + what + " while training: build time", Unit: "s",
			Ours: Find(res, name, "build_s"), Base: NA,
			Note: "snapshot, Install, catch-up and join, from the new node's arrival to the record naming it"},
		{Section: "replicated slots (go bench)", Metric: "trainer throughput during the re-replication of a " + what + " vs before",
			Unit: "push/s", Ours: Find(res, name, "push/s_during"), BaseName: "before (R = 2)", Base: Find(res, name, "push/s_before"),
			Note: fmt.Sprintf("pushes of min(slot, 8M params), back to back; above 16M params, of 1M params every 200 ms (see BenchmarkRereplicate); after the join: %.2f push/s", Find(res, name, "push/s_after"))},
	}
}

// RereplicateParams is the slot size of the re-replication rows (100M
// parameters: 400 MB of values, 800 MB with momentum; issue 34's figure).
const RereplicateParams = 100 << 20

// rereplicateParamsEnv is pserver/agent's RereplicateParamsEnv.
const rereplicateParamsEnv = "RAFTPS_BENCH_REREPLICATE_PARAMS"
