package bench

import (
	"context"
	"fmt"
	"math"
)

// goBenchSection runs the Go benchmarks other engineers wrote and turns
// their figures into ratios; a benchmark that does not exist gives n/a.
func (r *runner) goBenchSection(ctx context.Context) {
	bt := "3x"
	if r.cfg.Quick {
		bt = "1x"
	}
	run := func(pkg, pattern, benchtime string) []GoBench {
		r.logf("go test -bench %s -benchtime %s %s", pattern, benchtime, pkg)
		res, out, err := RunGoBench(ctx, r.cfg.Root, pkg, pattern, benchtime)
		if err != nil {
			r.note(fmt.Sprintf("%s %s: %v", pkg, pattern, err))
			r.logf("%s", out)
		}
		if len(res) == 0 {
			r.note(fmt.Sprintf("%s: no result for -bench %s", pkg, pattern))
		}
		r.raw["go/"+pkg] = res
		return res
	}

	// pserver: push+pull of a 10M-parameter model vs the transports under it.
	ps := run("./pserver", "^Benchmark(PushPull|GRPCEcho|RawTCP|Memcpy)$", bt)
	echo, tcp, mem := Find(ps, "GRPCEcho", "MB/s"), Find(ps, "RawTCP", "MB/s"), Find(ps, "Memcpy", "MB/s")
	best, bestName := NA, ""
	for _, b := range ps {
		if v, ok := b.Metrics["MB/s"]; ok && len(b.Name) > 8 && b.Name[:8] == "PushPull" && (math.IsNaN(best) || v > best) {
			best, bestName = v, b.Name
		}
	}
	for _, name := range []string{"PushPull/unary/trainers=1", "PushPull/stream/trainers=1", "PushPull/stream/trainers=4"} {
		r.add(Row{Section: "pserver (go bench)", Metric: name + " vs gRPC echo", Unit: "MB/s",
			Ours: Find(ps, name, "MB/s"), BaseName: "gRPC echo", Base: echo})
	}
	r.add(Row{Section: "pserver (go bench)", Metric: "best push+pull vs raw TCP", Unit: "MB/s", Ours: best, BaseName: "raw TCP", Base: tcp, Note: bestName})
	r.add(Row{Section: "pserver (go bench)", Metric: "best push+pull vs memcpy", Unit: "MB/s", Ours: best, BaseName: "memcpy", Base: mem, Note: bestName})
	r.add(Row{Section: "pserver (go bench)", Metric: "gRPC echo vs raw TCP", Unit: "MB/s", Ours: echo, BaseName: "raw TCP", Base: tcp, Note: "not raftps code: the transport's own cost"})
	r.add(Row{Section: "pserver (go bench)", Metric: "PushPull/stream/trainers=1 per CPU-s vs gRPC echo", Unit: "MB/cpu-s",
		Ours: Find(ps, "PushPull/stream/trainers=1", "MB/cpu-s"), BaseName: "gRPC echo", Base: Find(ps, "GRPCEcho", "MB/cpu-s"),
		Note: "CPU-normalized: less sensitive to other load"})

	// checkpoint: write throughput vs a plain sequential write + fsync, interleaved in one benchmark.
	ck := run("./pserver/checkpoint", "^BenchmarkCheckpointVsFile$", bt)
	r.add(Row{Section: "checkpoint (go bench)", Metric: "checkpoint write vs plain write+fsync", Unit: "MB/s",
		Ours: Find(ck, "CheckpointVsFile", "ckpt_MB/s"), BaseName: "plain file", Base: Find(ck, "CheckpointVsFile", "file_MB/s")})

	// trainer: examples/s of the task loop and over RPC vs in-process training.
	tr := run("./trainer", "^Benchmark(TrainLocal|TrainerLoop)$", "1x")
	for _, m := range []string{"softmax", "mlp", "hashed_lr"} {
		r.add(Row{Section: "training (go bench)", Metric: "trainer loop (fakes) vs in-process, " + m, Unit: "examples/s",
			Ours: Find(tr, "TrainerLoop/"+m, "examples/s"), BaseName: "TrainLocal", Base: Find(tr, "TrainLocal/"+m, "examples/s")})
	}
	ta := run("./trainer/agent", "^BenchmarkTrainerRPCvsLocal$", "1x")
	r.add(Row{Section: "training (go bench)", Metric: "1 trainer + 1 pserver over gRPC vs in-process", Unit: "examples/s",
		Ours: Find(ta, "TrainerRPCvsLocal", "rpc-examples/s"), BaseName: "TrainLocal", Base: Find(ta, "TrainerRPCvsLocal", "local-examples/s")})
}
