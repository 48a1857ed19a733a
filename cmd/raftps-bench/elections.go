package main

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/raftps/raftps/bench"
	"github.com/raftps/raftps/internal/testing/testutil"
)

func newElectionsCmd(stdout, stderr io.Writer) *cobra.Command {
	cfg := bench.ElectionsConfig{Idle: time.Minute, Loaded: 3 * time.Minute, Hogs: 4, Trials: 5, Log: stderr}
	var flags string
	var keep bool
	c := &cobra.Command{
		Use:          "elections",
		SilenceUsage: true,
		Short:        "count a 3-node cluster's Raft terms per minute idle and beside CPU hogs, and time its failovers",
		Long: `Start a 3-node raftps cluster on loopback with --flags added to every node, count
the Raft terms it goes through for --idle, time --trials failovers (leader SIGKILL to
the first acknowledged write, the node restarted after each), then start
stress-ng --cpu --hogs (Debian's stress-ng) and do the same for --loaded. Prints
one line of figures. node/DESIGN.md ("Raft timing") lists the runs behind the defaults:

  raftps-bench elections --flags "--heartbeat-interval 100 --election-timeout 1000"`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if cfg.Bin == "" {
				root, err := testutil.ModuleRoot()
				if err != nil {
					return fmt.Errorf("--bin: %w", err)
				}
				cfg.Bin = filepath.Join(root, "bin", "raftps")
			}
			dir, err := os.MkdirTemp("", "raftps-elections-")
			if err != nil {
				return err
			}
			if keep {
				fmt.Fprintf(stderr, "data and logs kept in %s\n", dir)
			} else {
				defer os.RemoveAll(dir)
			}
			cfg.Dir = dir
			cfg.Flags = strings.Fields(flags)
			res, err := bench.Elections(cmd.Context(), cfg)
			fmt.Fprintf(stdout, "flags %q: %s\n", flags, res)
			return err
		},
	}
	f := c.Flags()
	f.StringVar(&flags, "flags", "", "flags added to every node's command line, space-separated")
	f.StringVar(&cfg.Bin, "bin", "", "raftps binary (default <module root>/bin/raftps)")
	f.DurationVar(&cfg.Idle, "idle", cfg.Idle, "how long terms are counted without load")
	f.DurationVar(&cfg.Loaded, "loaded", cfg.Loaded, "how long terms are counted beside the hogs")
	f.IntVar(&cfg.Hogs, "hogs", cfg.Hogs, "stress-ng --cpu workers of the loaded phase (0: no loaded phase)")
	f.IntVar(&cfg.Trials, "trials", cfg.Trials, "failover trials in each phase")
	f.BoolVar(&keep, "keep-data", false, "keep the nodes' data dirs and logs (the temp dir is printed)")
	return c
}
