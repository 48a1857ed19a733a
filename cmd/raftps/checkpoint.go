package main

import (
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/google/renameio/v2"
	"github.com/spf13/cobra"
	"google.golang.org/grpc"

	pb "github.com/raftps/raftps/api/raftpspb"
	"github.com/raftps/raftps/pserver/checkpoint"
	"github.com/raftps/raftps/pserver/vshard"
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

// vshardDecoder decodes pserver vshard blobs for export
// (vshard.DecodeValues: shapes and offsets checked, errors wrap
// wire.ErrCorrupt).
var vshardDecoder = checkpoint.DecoderFunc(func(blob []byte) ([]checkpoint.Block, error) {
	runs, err := vshard.DecodeValues(blob)
	if err != nil {
		return nil, err
	}
	out := make([]checkpoint.Block, len(runs))
	for i, r := range runs {
		out[i] = checkpoint.Block{Name: r.Name, Shape: r.Shape, Offset: r.Offset, Data: r.Data}
	}
	return out, nil
})

func newCheckpointCmd(g *globals) *cobra.Command {
	c := &cobra.Command{Use: "checkpoint", Short: "list, verify, export checkpoints; find the best one"}
	list := &cobra.Command{
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
	verify := &cobra.Command{
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
	var out, format, mode string
	export := &cobra.Command{
		Use: "export JOB [VERSION] --out FILE", Short: "write every parameter of a version to one portable file (pserver/checkpoint/FORMAT.md)",
		Args: cobra.RangeArgs(1, 2),
		RunE: func(cmd *cobra.Command, args []string) error {
			if out == "" {
				return fmt.Errorf("--out is required")
			}
			if format != "raftps" && format != "safetensors" {
				return fmt.Errorf("--format %q: want raftps or safetensors", format)
			}
			perm, err := parseFileMode(mode)
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
					err = exportFile(ctx, mgr, args[0], v, format, out, perm)
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
	export.Flags().StringVar(&out, "out", "", "output file")
	export.Flags().StringVar(&mode, "mode", "0600", "the file's permission bits, octal (the parameters are the model: owner-only unless asked otherwise)")
	export.Flags().StringVar(&format, "format", "raftps", "file format: raftps (pserver/checkpoint/FORMAT.md) or safetensors (F32 tensors named and shaped as the job's params; PyTorch's load_state_dict takes them)")
	best := &cobra.Command{
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
	c.AddCommand(list, verify, export, best)
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

// parseFileMode parses an octal permission (--mode "0600").
func parseFileMode(s string) (os.FileMode, error) {
	m, err := strconv.ParseUint(s, 8, 32)
	if err != nil || m > 0o777 {
		return 0, fmt.Errorf("--mode %q: want octal permission bits such as 0600 or 0640", s)
	}
	return os.FileMode(m), nil
}

// exportFile writes version v of job to the file out (exportAs) through
// writeFileAtomicMode with permission bits perm: a failed or killed export
// leaves out as it was.
func exportFile(ctx context.Context, mgr *checkpoint.Manager, job string, v int64, format, out string, perm os.FileMode) error {
	return writeFileAtomicMode(out, perm, func(w io.Writer) error { return exportAs(ctx, mgr, job, v, format, w) })
}

// writeFileAtomic is writeFileAtomicMode with mode 0600.
func writeFileAtomic(path string, write func(io.Writer) error) error {
	return writeFileAtomicMode(path, 0o600, write)
}

// writeFileAtomicMode makes path hold exactly what write writes, or leaves
// it as it was: write goes to a temporary file created with permission
// bits perm (whatever the umask) in path's directory (so the rename stays
// on one file system), which is fsynced and renamed over path only if
// write succeeds, and removed otherwise (google/renameio). A process
// killed mid-write leaves path untouched and at most a ".<base>NNN"
// temporary file beside it.
func writeFileAtomicMode(path string, perm os.FileMode, write func(io.Writer) error) error {
	f, err := renameio.NewPendingFile(path, renameio.WithTempDir(filepath.Dir(path)), renameio.WithStaticPermissions(perm))
	if err != nil {
		return err
	}
	defer f.Cleanup()
	if err := write(f); err != nil {
		return err
	}
	return f.CloseAtomicallyReplace()
}

// exportAs writes version v of job to w in format "raftps" or
// "safetensors" (the raftps export streamed through
// checkpoint.ExportSafetensors).
func exportAs(ctx context.Context, mgr *checkpoint.Manager, job string, v int64, format string, w io.Writer) error {
	if format != "safetensors" {
		return mgr.Export(ctx, job, v, vshardDecoder, w)
	}
	pr, pw := io.Pipe()
	go func() { pw.CloseWithError(mgr.Export(ctx, job, v, vshardDecoder, pw)) }()
	err := checkpoint.ExportSafetensors(pr, w)
	pr.CloseWithError(err)
	return err
}
