package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/raftps/raftps/bench"
	"github.com/raftps/raftps/internal/testing/testutil"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := newBenchCmd(os.Stdout, os.Stderr).ExecuteContext(ctx); err != nil {
		fmt.Fprintln(os.Stderr, "raftps-bench:", err)
		os.Exit(1)
	}
}

func newBenchCmd(stdout, stderr io.Writer) *cobra.Command {
	var (
		quick      bool
		root, out  string
		skip       []string
		dataset    string
		binaryPath string
		keep       bool
	)
	c := &cobra.Command{
		Use:          "raftps-bench",
		SilenceUsage: true,
		Short:        "measure raftps against etcd and its own baselines; write bench/results/<UTC time>.md",
		Long: `Start a 3-node raftps cluster and a 3-node etcd cluster (etcd on PATH: Debian's
etcd-server, installed by scripts/install-etcd.sh) on loopback and drive both with the same load
(puts of 256 B with 1, 16 and 256 clients, linearizable gets, CAS txns, lease
grant+keepalive), time leader failover on both, measure mutual TLS against plaintext (puts with 16
clients and pserver push+pull on two raftps clusters, one --insecure), time recovery of a running
training job after a trainer, a pserver node and the leader are SIGKILLed, run
the Go benchmarks of pserver, checkpoint and trainer, and, where raftps' puts
are behind etcd's, profile raftstore's puts. Every side-by-side row runs its two
sides interleaved in 5 pairs (A B A B ...) and shows the median pair ratio with
its min-max spread. Prints one table of raftps next to its baseline, and writes it with the machine's description to
--out as <UTC timestamp>.md and .json. A full run takes a few minutes; --quick
shortens every measurement.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if root == "" {
				r, err := testutil.ModuleRoot()
				if err != nil {
					return fmt.Errorf("--root: %w", err)
				}
				root = r
			}
			if binaryPath == "" {
				binaryPath = filepath.Join(root, "bin", "raftps")
			}
			if out == "" {
				out = filepath.Join(root, "bench", "results")
			}
			rep, err := bench.Run(cmd.Context(), bench.Config{Bin: binaryPath, Root: root, Dataset: dataset,
				Quick: quick, Skip: skip, KeepData: keep, Log: stderr})
			if rep == nil {
				return err
			}
			fmt.Fprintln(stdout)
			if werr := rep.WriteText(stdout); werr != nil {
				return werr
			}
			paths, serr := rep.Save(out)
			if serr != nil {
				return errors.Join(err, serr)
			}
			for _, p := range paths {
				fmt.Fprintf(stdout, "wrote %s\n", p)
			}
			return err
		},
	}
	f := c.Flags()
	f.BoolVar(&quick, "quick", false, "shorter run: 2 s per workload, 3 recovery trials, 1x Go benchmarks")
	f.StringVar(&root, "root", "", "module root, where the Go benchmarks run (default: the go.mod above the working directory)")
	f.StringVar(&out, "out", "", "results directory (default <root>/bench/results)")
	f.StringSliceVar(&skip, "skip", nil, "sections to skip: kv, etcdclient, failover, tls, training, replicas, gobench, profile, scaling")
	f.StringVar(&dataset, "dataset", "", "Fashion-MNIST directory of the training job (default <root>/datasets/fashion-mnist)")
	f.BoolVar(&keep, "keep-data", false, "keep the clusters' data dirs and logs (the temp dir is printed)")
	f.StringVar(&binaryPath, "bin", "", "raftps binary started as the nodes (default <root>/bin/raftps, built by make build)")
	c.AddCommand(newElectionsCmd(stdout, stderr))
	return c
}
