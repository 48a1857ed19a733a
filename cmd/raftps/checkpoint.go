package main

import (
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"sort"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"google.golang.org/grpc"

	pb "github.com/raftps/raftps/api/raftpspb"
	"github.com/raftps/raftps/cmd/raftps/offline"
	"github.com/raftps/raftps/pserver/checkpoint"
	"github.com/raftps/raftps/raftstore/client"
)

// remoteMeta is checkpoint.Meta over the gRPC KV API.
type remoteMeta struct{ cl *client.Client }

func (m remoteMeta) Txn(ctx context.Context, req *pb.TxnRequest) (*pb.TxnResponse, error) {
	return m.cl.KV.Txn(ctx, req)
}
func (m remoteMeta) Range(ctx context.Context, req *pb.RangeRequest) (*pb.RangeResponse, error) {
	return m.cl.KV.Range(ctx, req)
}

// remotePeers lists the cluster's nodes as checkpoint peers.
type remotePeers []checkpoint.Peer

func (p remotePeers) Peers() []checkpoint.Peer { return p }

// openManager builds a checkpoint manager for the CLI: an empty scratch
// store (the CLI holds no blobs) and every alive node as a peer, so reads
// and verification go to the replicas over gRPC.
// opts dial the nodes' CheckpointStore (the client's --cacert, --cert, --key).
func openManager(ctx context.Context, cl *client.Client, opts ...grpc.DialOption) (*checkpoint.Manager, func(), error) {
	dir, err := os.MkdirTemp("", "raftps-cli-ckpt-")
	if err != nil {
		return nil, nil, err
	}
	st, err := checkpoint.Open(dir, discardLogger())
	if err != nil {
		os.RemoveAll(dir)
		return nil, nil, err
	}
	cleanup := func() { st.Close(); os.RemoveAll(dir) }
	mresp, err := cl.Cluster.Members(ctx, &pb.MembersRequest{})
	if err != nil {
		cleanup()
		return nil, nil, rpcError(err)
	}
	var peers remotePeers
	for _, m := range mresp.Members {
		if m.Status != "alive" {
			continue
		}
		host, _, _ := net.SplitHostPort(m.GrpcAddr)
		peers = append(peers, checkpoint.Peer{ID: m.Id, Addr: m.GrpcAddr, Host: host})
	}
	mgr, err := checkpoint.New(checkpoint.Config{NodeID: "cli", Store: st, Meta: remoteMeta{cl}, Peers: peers,
		Client: checkpoint.NewClient(opts...), Logger: discardLogger()})
	if err != nil {
		cleanup()
		return nil, nil, err
	}
	return mgr, cleanup, nil
}

// evalMetrics maps checkpoint versions to the test accuracy measured on
// their own parameters: the version the job recorded with a pass's eval
// (PassMetric.checkpoint_version, the version holding the parameters after
// exactly the step evaluated), and only if that version's step is the
// evaluated step (records of older releases named the newest checkpoint
// instead). A pass with no such version names none.
func evalMetrics(ctx context.Context, cl *client.Client, job string, versions []checkpoint.VersionInfo) checkpoint.Metrics {
	resp, err := cl.Master.GetJob(ctx, &pb.GetJobRequest{Name: job})
	if err != nil {
		return nil
	}
	step := make(map[int64]int64, len(versions))
	for _, vi := range versions {
		step[vi.Version] = vi.Step
	}
	out := checkpoint.Metrics{}
	for _, m := range resp.Status.Metrics {
		if s, ok := step[m.CheckpointVersion]; ok && m.CheckpointVersion > 0 && s == m.Step {
			out[m.CheckpointVersion] = m.TestAccuracy
		}
	}
	return out
}

// newCheckpointCmd is `raftps checkpoint list|verify|export|best`: each
// reads the checkpoints from the replicas through a checkpoint.Manager
// over the cluster (openManager); the export file's formats and atomic
// write are package offline's.
func newCheckpointCmd(g *globals) *cobra.Command {
	c := &cobra.Command{Use: "checkpoint", Short: "list, verify, export checkpoints; find the best one"}
	c.AddCommand(newCheckpointListCmd(g), newCheckpointVerifyCmd(g), newCheckpointExportCmd(g), newCheckpointBestCmd(g))
	return c
}

// newCheckpointListCmd is `raftps checkpoint list`.
func newCheckpointListCmd(g *globals) *cobra.Command {
	c := &cobra.Command{
		Use: "list JOB", Short: "list a job's checkpoint versions", Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return withManager(cmd.Context(), g, func(ctx context.Context, cl *client.Client, mgr *checkpoint.Manager) error {
				vs, err := mgr.List(ctx, args[0], nil)
				if err != nil {
					return err
				}
				vs, err = mgr.List(ctx, args[0], evalMetrics(ctx, cl, args[0], vs))
				if err != nil {
					return err
				}
				rows := make([][]string, 0, len(vs))
				for _, v := range vs {
					acc := "-"
					if v.Metric != nil {
						acc = fmt.Sprintf("%.2f%%", 100**v.Metric)
					}
					rows = append(rows, []string{fmtVersion(v.Version), fmt.Sprint(v.Step), fmt.Sprint(v.Complete), fmt.Sprint(v.Bytes), acc,
						time.Unix(0, v.TimestampUnixNano).Format(time.DateTime), strings.Join(v.Replicas, ",")})
				}
				return g.printer.Table(map[string]any{"versions": vs}, []string{"VERSION", "STEP", "COMPLETE", "BYTES", "ACCURACY", "TIME", "REPLICAS"}, rows)
			})
		},
	}
	return c
}

// newCheckpointVerifyCmd is `raftps checkpoint verify`.
func newCheckpointVerifyCmd(g *globals) *cobra.Command {
	c := &cobra.Command{
		Use: "verify JOB [VERSION]", Short: "re-hash every blob of a version on every replica", Args: cobra.RangeArgs(1, 2),
		RunE: func(cmd *cobra.Command, args []string) error {
			return withManager(cmd.Context(), g, func(ctx context.Context, cl *client.Client, mgr *checkpoint.Manager) error {
				v, err := versionArg(ctx, mgr, args)
				if err != nil {
					return err
				}
				bad, err := mgr.Verify(ctx, args[0], v)
				if err != nil {
					return err
				}
				if err := g.printer.Object(map[string]any{"job": args[0], "version": v, "mismatches": append([]checkpoint.Mismatch{}, bad...)}, func(w io.Writer) {
					for _, m := range bad {
						fmt.Fprintf(w, "MISMATCH node %s slot %d vshard %d md5 %s: %s %s\n", m.Node, m.Slot, m.VShard, m.MD5, m.Problem, m.Actual)
					}
					if len(bad) == 0 {
						fmt.Fprintf(w, "version %s of %s: every blob verified on every replica\n", fmtVersion(v), args[0])
					}
				}); err != nil {
					return err
				}
				if len(bad) > 0 {
					return &exitError{code: codeVerifyFailed, err: fmt.Errorf("version %s of %s: %d mismatches", fmtVersion(v), args[0], len(bad))}
				}
				return nil
			})
		},
	}
	return c
}

// newCheckpointExportCmd is `raftps checkpoint export`.
func newCheckpointExportCmd(g *globals) *cobra.Command {
	var out, format, mode string
	c := &cobra.Command{
		Use: "export JOB [VERSION] --out FILE", Short: "write every parameter of a version to one portable file (pserver/checkpoint/FORMAT.md)",
		Args: cobra.RangeArgs(1, 2),
		RunE: func(cmd *cobra.Command, args []string) error {
			if out == "" {
				return fmt.Errorf("--out is required")
			}
			if format != "raftps" && format != "safetensors" {
				return fmt.Errorf("--format %q: want raftps or safetensors", format)
			}
			perm, err := offline.ParseFileMode(mode)
			if err != nil {
				return err
			}
			return withManager(cmd.Context(), g, func(ctx context.Context, cl *client.Client, mgr *checkpoint.Manager) error {
				v, err := versionArg(ctx, mgr, args)
				if err != nil {
					return err
				}
				// Without a VERSION the newest complete one is exported;
				// while it is read, checkpoints go on and may supersede
				// it or drop it (keep_max): then the newest is picked
				// again, a bounded number of times. A failure on a version
				// that is still the newest is the error.
				for attempt := 1; ; attempt++ {
					err = offline.ExportFile(ctx, mgr, args[0], v, format, out, perm)
					if err == nil || len(args) > 1 || attempt == 5 {
						break
					}
					again, aerr := versionArg(ctx, mgr, args)
					if aerr != nil || again == v {
						break
					}
					v = again
				}
				if err != nil {
					return err
				}
				return g.printer.Object(map[string]any{"job": args[0], "version": v, "file": out}, func(w io.Writer) {
					fmt.Fprintf(w, "exported version %s of %s to %s\n", fmtVersion(v), args[0], out)
				})
			})
		},
	}
	c.Flags().StringVar(&out, "out", "", "output file")
	c.Flags().StringVar(&mode, "mode", "0600", "the file's permission bits, octal (the parameters are the model: owner-only unless asked otherwise)")
	c.Flags().StringVar(&format, "format", "raftps", "file format: raftps (pserver/checkpoint/FORMAT.md) or safetensors (F32 tensors named and shaped as the job's params; PyTorch's load_state_dict takes them)")
	return c
}

// newCheckpointBestCmd is `raftps checkpoint best`.
func newCheckpointBestCmd(g *globals) *cobra.Command {
	c := &cobra.Command{
		Use: "best JOB", Short: "the complete version with the best test accuracy", Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return withManager(cmd.Context(), g, func(ctx context.Context, cl *client.Client, mgr *checkpoint.Manager) error {
				vs, err := mgr.List(ctx, args[0], nil)
				if err != nil {
					return err
				}
				vs, err = mgr.List(ctx, args[0], evalMetrics(ctx, cl, args[0], vs))
				if err != nil {
					return err
				}
				b, ok := checkpoint.Best(vs, checkpoint.HigherIsBetter)
				if !ok {
					return &exitError{code: codeError, err: fmt.Errorf("no complete version of %s has an eval metric", args[0])}
				}
				fmt.Fprintf(g.err, "version %s (step %d): test accuracy %.2f%%\n", fmtVersion(b.Version), b.Step, 100**b.Metric)
				return g.printer.Object(b, func(w io.Writer) { fmt.Fprintf(w, "%d\n", b.Version) })
			})
		},
	}
	return c
}

func withManager(parent context.Context, g *globals, fn func(context.Context, *client.Client, *checkpoint.Manager) error) error {
	opts, err := g.tls.dialOptions()
	if err != nil {
		return err
	}
	cl, err := g.client()
	if err != nil {
		return err
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(parent, 10*g.timeout)
	defer cancel()
	mgr, cleanup, err := openManager(ctx, cl, opts...)
	if err != nil {
		return err
	}
	defer cleanup()
	return fn(ctx, cl, mgr)
}

// versionArg is args[1] or the newest complete version.
func versionArg(ctx context.Context, mgr *checkpoint.Manager, args []string) (int64, error) {
	if len(args) > 1 {
		return parseVersion(args[1])
	}
	vs, err := mgr.List(ctx, args[0], nil)
	if err != nil {
		return 0, err
	}
	sort.Slice(vs, func(i, j int) bool { return vs[i].Version > vs[j].Version })
	for _, v := range vs {
		if v.Complete {
			return v.Version, nil
		}
	}
	return 0, fmt.Errorf("job %s has no complete checkpoint version", args[0])
}
