package bench

import (
	"context"
	"fmt"
	"math"
)

// LogStoreRow names the row of puts by clients clients with
// hashicorp/raft-wal in place of raft-boltdb.
func LogStoreRow(clients int) string {
	return PutWorkload(clients).Name + ": raft-wal log store vs raft-boltdb"
}

// goBenchSection runs the Go benchmarks other engineers wrote and turns
// their figures into ratios; a benchmark that does not exist gives n/a.
// Each package's benchmarks run Pairs times, one `go test` after the other
// (a run measures both sides of its rows, one right after the other), and
// each row is the median of the per-run ratios with their spread.
func (r *runner) goBenchSection(ctx context.Context) {
	bt := "1x"
	run := func(pkg, pattern, benchtime string) [][]GoBench {
		var runs [][]GoBench
		for p := 0; p < Pairs; p++ {
			r.logf("go test -bench %s -benchtime %s %s (run %d of %d)", pattern, benchtime, pkg, p+1, Pairs)
			res, out, err := RunGoBench(ctx, r.cfg.Root, pkg, pattern, benchtime)
			if err != nil {
				r.note(fmt.Sprintf("%s %s: %v", pkg, pattern, err))
				r.logf("%s", out)
			}
			if len(res) == 0 {
				r.note(fmt.Sprintf("%s: no result for -bench %s", pkg, pattern))
				return runs
			}
			runs = append(runs, res)
		}
		r.raw["go/"+pkg] = runs
		return runs
	}
	// col is the figure of each run.
	col := func(runs [][]GoBench, name, unit string) []float64 {
		out := make([]float64, len(runs))
		for i, res := range runs {
			out[i] = Find(res, name, unit)
		}
		return out
	}

	// pserver: push+pull of a 10M-parameter model vs the transports under it.
	ps := run("./pserver", "^Benchmark(PushPull|GRPCEcho|RawTCP|Memcpy|SyncPushCores|SyncStepTrainers)$", bt)
	echo, tcp, mem := col(ps, "GRPCEcho", "MB/s"), col(ps, "RawTCP", "MB/s"), col(ps, "Memcpy", "MB/s")
	best := make([]float64, len(ps))
	bestName := map[string]int{}
	for i, res := range ps {
		best[i] = NA
		name := ""
		for _, b := range res {
			if v, ok := b.Metrics["MB/s"]; ok && len(b.Name) > 8 && b.Name[:8] == "PushPull" && (math.IsNaN(best[i]) || v > best[i]) {
				best[i], name = v, b.Name
			}
		}
		bestName[name]++
	}
	bestNote := fmt.Sprint(bestName)
	for _, name := range []string{"PushPull/unary/trainers=1", "PushPull/stream/trainers=1", "PushPull/stream/trainers=4"} {
		r.add(pairRow(Row{Section: "pserver (go bench)", Metric: name + " vs gRPC echo", Unit: "MB/s", BaseName: "gRPC echo"}, col(ps, name, "MB/s"), echo))
	}
	r.add(pairRow(Row{Section: "pserver (go bench)", Metric: "best push+pull vs raw TCP", Unit: "MB/s", BaseName: "raw TCP", Note: bestNote}, best, tcp))
	r.add(pairRow(Row{Section: "pserver (go bench)", Metric: "best push+pull vs memcpy", Unit: "MB/s", BaseName: "memcpy", Note: bestNote}, best, mem))
	r.add(pairRow(Row{Section: "pserver (go bench)", Metric: "gRPC echo vs raw TCP", Unit: "MB/s", BaseName: "raw TCP", Note: "not raftps code: the transport's own cost"}, echo, tcp))
	r.add(pairRow(Row{Section: "pserver (go bench)", Metric: "sync step update, 8.4M params, momentum: every core vs one", Unit: "Mparams/s", BaseName: "one core",
		Note: "Slot.Push without gRPC; the two sides alternate inside the benchmark"},
		col(ps, "SyncPushCores", "parallel-Mparams/s"), col(ps, "SyncPushCores", "serial-Mparams/s")))
	r.add(pairRow(Row{Section: "pserver (go bench)", Metric: "sync step of 2 trainers, 8.4M params (mean + update): every core vs one", Unit: "Mparams/s", BaseName: "one core",
		Note: "Slot.Push without gRPC; the two sides alternate inside the benchmark"},
		col(ps, "SyncStepTrainers", "parallel-Mparams/s"), col(ps, "SyncStepTrainers", "serial-Mparams/s")))
	r.add(pairRow(Row{Section: "pserver (go bench)", Metric: "PushPull/stream/trainers=1 per CPU-s vs gRPC echo", Unit: "MB/cpu-s", BaseName: "gRPC echo",
		Note: "CPU-normalized: less sensitive to other load"}, col(ps, "PushPull/stream/trainers=1", "MB/cpu-s"), col(ps, "GRPCEcho", "MB/cpu-s")))

	// The trainer row's round trip: the MLP's push+pull right after 2 ms of
	// computing (the threads serving it woke from idle, as in a trainer)
	// vs back to back.
	mlp := run("./pserver", "^BenchmarkPushPullMLP$", "600x")
	r.add(pairRow(Row{Section: "pserver (go bench)", Metric: "MLP push+pull (101,770 params) after 2 ms busy vs back to back", Unit: "us", BaseName: "back to back",
		Note: "what waking idle threads adds to the trainer row's round trip on this machine"},
		col(mlp, "PushPullMLP", "cold-us"), col(mlp, "PushPullMLP", "warm-us")))

	// checkpoint: write throughput vs a plain sequential write + fsync of
	// the same bytes, interleaved inside the benchmark too.
	ck := run("./pserver/checkpoint", "^BenchmarkCheckpointVsFile$", "3x")
	r.add(pairRow(Row{Section: "checkpoint (go bench)", Metric: "checkpoint write vs plain write+fsync", Unit: "MB/s", BaseName: "plain file"},
		col(ck, "CheckpointVsFile", "ckpt_MB/s"), col(ck, "CheckpointVsFile", "file_MB/s")))

	// raftstore: puts with hashicorp/raft-wal in place of raft-boltdb, the
	// measured "why" of the 1-client put row (see fsyncAnalysis). Each run
	// is two pairs, one in each order.
	ls := run("./raftstore", "^BenchmarkPutLogStore$", "2x")
	for _, c := range []int{1, 16} {
		r.add(pairRow(Row{Section: "raft log store (go bench)", Metric: LogStoreRow(c), Unit: "ops/s", BaseName: "raft-boltdb",
			Note: "3 nodes in one process; raft-boltdb is the default, raft-wal is --raft-log-store wal"},
			col(ls, "PutLogStore", fmt.Sprintf("c%d-wal-ops/s", c)), col(ls, "PutLogStore", fmt.Sprintf("c%d-boltdb-ops/s", c))))
	}

	// trainer: examples/s of the task loop and over RPC vs in-process training.
	tr := run("./trainer", "^Benchmark(TrainLocal|TrainerLoop)$", "1x")
	for _, m := range []string{"softmax", "mlp", "hashed_lr"} {
		r.add(pairRow(Row{Section: "training (go bench)", Metric: "trainer loop (fakes) vs in-process, " + m, Unit: "examples/s", BaseName: "TrainLocal"},
			col(tr, "TrainerLoop/"+m, "examples/s"), col(tr, "TrainLocal/"+m, "examples/s")))
	}
	ta := run("./trainer/agent", "^BenchmarkTrainerRPCvsLocal$", "1x")
	r.add(pairRow(Row{Section: "training (go bench)", Metric: "1 trainer + 1 pserver over gRPC vs in-process", Unit: "examples/s", BaseName: "TrainLocal"},
		col(ta, "TrainerRPCvsLocal", "rpc-examples/s"), col(ta, "TrainerRPCvsLocal", "local-examples/s")))
	r.add(pairRow(Row{Section: "training (go bench)", Metric: "1 trainer + 1 pserver: time in pserver calls per step vs the whole step", Unit: "ms", BaseName: "whole step",
		Note: "trainer.Stats.PSTime (push, update, parameters back); the ratio is its share of the step"},
		col(ta, "TrainerRPCvsLocal", "rpc-ps-ms/step"), col(ta, "TrainerRPCvsLocal", "rpc-ms/step")))
	r.add(pairRow(Row{Section: "training (go bench)", Metric: "1 trainer + 1 pserver over gRPC vs in-process per CPU-s", Unit: "examples/cpu-s", BaseName: "TrainLocal",
		Note: "CPU-normalized (trainer and pserver in one process): less sensitive to other load"},
		col(ta, "TrainerRPCvsLocal", "rpc-examples/cpu-s"), col(ta, "TrainerRPCvsLocal", "local-examples/cpu-s")))
}
