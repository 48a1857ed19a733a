package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/raftps/raftps/cmd/raftps/demo"
	"github.com/raftps/raftps/internal/testing/localcluster"
)

// devNodes is the size of the `raftps dev` cluster.
const devNodes = 3

// newDevCmd is `raftps dev` (Consul's `consul agent -dev`): a throw-away
// 3-node cluster with mutual TLS on loopback, in the foreground until
// Ctrl-C.
func newDevCmd(g *globals) *cobra.Command {
	var (
		dir  string
		wait time.Duration
	)
	c := &cobra.Command{
		Use:   "dev",
		Short: "run a throw-away 3-node TLS cluster on loopback until Ctrl-C",
		Long: `Start a local 3-node cluster (child processes of this one on 127.0.0.1, mutual
TLS, encrypted gossip) with its own CA and an admin client certificate, and
print the export lines that point the raftps CLI (and the Python client) at it:

  raftps dev                      # in one shell; Ctrl-C stops the nodes
  export RAFTPS_ENDPOINTS=...     # in another: paste the printed lines
  raftps kv put /hello world

The export lines go to stdout, everything else to stderr. The nodes log to
<dir>/n1.log .. n3.log. Without --dir, the cluster lives in a temporary
directory removed when it stops; with --dir, the directory is kept and a
later "raftps dev --dir" with the same directory starts the same cluster
again (same ports, certificates and data).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runDev(cmd.Context(), g, dir, wait)
		},
	}
	c.Flags().StringVar(&dir, "dir", "", "directory of the cluster's data, logs and certificates, kept at exit and reused by the next start (default: a temporary directory, removed at exit)")
	c.Flags().DurationVar(&wait, "wait", time.Minute, "how long to wait for the nodes to elect a leader")
	return c
}

// ErrDevStop: a `raftps dev` node did not stop cleanly.
var ErrDevStop = errors.New("node did not stop cleanly")

func runDev(ctx context.Context, g *globals, dir string, wait time.Duration) (err error) {
	exe, err := os.Executable()
	if err != nil {
		return err
	}
	w := g.err
	if dir == "" {
		if dir, err = os.MkdirTemp("", "raftps-dev-"); err != nil {
			return err
		}
		defer func() {
			if rerr := os.RemoveAll(dir); rerr != nil && err == nil {
				err = rerr
			}
			fmt.Fprintf(w, "==> removed %s\n", dir)
		}()
	} else if dir, err = filepath.Abs(dir); err != nil {
		return err
	}
	nodes, err := localcluster.Load(exe, dir)
	fresh := errors.Is(err, fs.ErrNotExist)
	switch {
	case fresh:
		if nodes, err = localcluster.New(exe, dir, devNodes); err != nil {
			return err
		}
		if err := localcluster.Save(dir, nodes); err != nil {
			return err
		}
	case err != nil:
		return err
	}
	cluster := demo.FromNodes(nodes)
	stopped := false
	defer func() {
		if !stopped {
			cluster.StopAll()
		}
	}()
	what := "started"
	if !fresh {
		what = "restarted"
	}
	fmt.Fprintf(w, "==> raftps dev: %s %d nodes on loopback with mutual TLS in %s\n", what, len(nodes), dir)
	cl, leader, err := cluster.Start(ctx, wait)
	if err != nil {
		return fmt.Errorf("%w (node logs: %s)", err, filepath.Join(dir, "n*.log"))
	}
	cl.Close()
	fmt.Fprintf(w, "==> raft leader: %s\n", leader)
	fmt.Fprintf(w, "==> dashboard: http://%s/ (every node serves it: %s)\n", nodes[0].HTTP, cluster.HTTPAddrs())
	fmt.Fprintf(w, "==> node logs: %s\n", filepath.Join(dir, "n*.log"))
	fmt.Fprintf(w, "==> paste these lines into another shell; Ctrl-C here stops the cluster\n")
	printDevExports(g.out, cluster)

	exited := make(chan *localcluster.Node, len(nodes))
	for _, n := range nodes {
		go func() {
			select {
			case <-n.Exited():
				exited <- n
			case <-ctx.Done():
			}
		}()
	}
	var crashed []error
	for running := len(nodes); running > 0; running-- {
		select {
		case <-ctx.Done():
			stopped = true
			return errors.Join(append(crashed, stopDev(w, cluster))...)
		case n := <-exited:
			err := fmt.Errorf("%s: %w: exited while running (%v; see %s)", n.ID, ErrDevStop, n.ExitErr(), n.LogPath)
			fmt.Fprintf(w, "==> %v\n", err)
			crashed = append(crashed, err)
		}
	}
	return errors.Join(crashed...)
}

// printDevExports prints the shell lines that point the CLI at cluster as
// its admin.
func printDevExports(out io.Writer, cluster *demo.Cluster) {
	fmt.Fprintf(out, "export %s=%s\n", envName("endpoints"), strings.Join(cluster.Endpoints(), ","))
	fmt.Fprintf(out, "export %s=%s\n", envName("cacert"), cluster.Admin.CA)
	fmt.Fprintf(out, "export %s=%s\n", envName("cert"), cluster.Admin.Cert)
	fmt.Fprintf(out, "export %s=%s\n", envName("key"), cluster.Admin.Key)
}

// stopDev stops every node of cluster (SIGTERM, SIGKILL after 15 s) and
// fails unless each exited cleanly.
func stopDev(w io.Writer, cluster *demo.Cluster) error {
	fmt.Fprintf(w, "\n==> stopping %d nodes\n", len(cluster.Nodes))
	var errs []error
	for _, n := range cluster.Nodes {
		if !n.Running() {
			continue
		}
		if err := n.Stop(15 * time.Second); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w: %v (see %s)", n.ID, ErrDevStop, err, n.LogPath))
		}
	}
	if len(errs) > 0 {
		return errors.Join(errs...)
	}
	fmt.Fprintf(w, "==> stopped\n")
	return nil
}
