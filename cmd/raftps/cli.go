package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	pb "github.com/raftps/raftps/api/raftpspb"
	"github.com/raftps/raftps/raftstore/client"
)

// exitError carries a process exit code.
type exitError struct {
	code int
	err  error
}

func (e *exitError) Error() string { return e.err.Error() }
func (e *exitError) Unwrap() error { return e.err }

func exitCode(err error) int {
	var ee *exitError
	if errors.As(err, &ee) {
		return ee.code
	}
	return 1
}

// globals are the flags every client subcommand shares.
type globals struct {
	endpoints []string
	timeout   time.Duration
	output    string
	out, err  io.Writer
}

func (g *globals) client() (*client.Client, error) { return client.New(g.endpoints) }

// call runs fn with a client of --endpoints and a context bounded by --timeout.
func (g *globals) call(parent context.Context, fn func(ctx context.Context, cl *client.Client) error) error {
	cl, err := g.client()
	if err != nil {
		return err
	}
	defer cl.Close()
	ctx, cancel := g.ctx(parent)
	defer cancel()
	return fn(ctx, cl)
}

func (g *globals) ctx(parent context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(parent, g.timeout)
}

// printProto prints m as indented JSON (protojson, field names as in the .proto).
func (g *globals) printProto(m proto.Message) error {
	b, err := protojson.MarshalOptions{Multiline: true, Indent: "  ", UseProtoNames: true, EmitUnpopulated: true}.Marshal(m)
	if err != nil {
		return err
	}
	fmt.Fprintln(g.out, string(b))
	return nil
}

func (g *globals) printJSON(v any) error {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	fmt.Fprintln(g.out, string(b))
	return nil
}

// rpcError turns a gRPC error into a user-facing one.
func rpcError(err error) error {
	if err == nil {
		return nil
	}
	if s, ok := status.FromError(err); ok {
		return fmt.Errorf("%s: %s", s.Code(), s.Message())
	}
	return err
}

func newRootCmd(out, errOut io.Writer) *cobra.Command {
	g := &globals{out: out, err: errOut}
	root := &cobra.Command{
		Use:           "raftps",
		Short:         "raftps: fault-tolerant parameter-server training on an embedded Raft cluster",
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.SetOut(out)
	root.SetErr(errOut)
	pf := root.PersistentFlags()
	pf.StringSliceVar(&g.endpoints, "endpoints", []string{"127.0.0.1:7000"}, "gRPC endpoints of cluster nodes (host:port,...)")
	pf.DurationVar(&g.timeout, "timeout", 10*time.Second, "timeout of one client command")
	pf.StringVarP(&g.output, "output", "o", "", "output format: json")

	root.AddCommand(newNodeCmd(g), newKVCmd(g), newLeaseCmd(g), newMembersCmd(g), newStatusCmd(g), newJobCmd(g))
	for _, f := range extraCommands {
		root.AddCommand(f(g))
	}
	return root
}

// extraCommands are added by other files of this package (train, demo, ...).
var extraCommands []func(*globals) *cobra.Command

func newLogger(w io.Writer, level string) (*slog.Logger, error) {
	var l slog.Level
	if err := l.UnmarshalText([]byte(level)); err != nil {
		return nil, fmt.Errorf("--log-level %q: want debug, info, warn or error", level)
	}
	return slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: l})), nil
}

func newNodeCmd(g *globals) *cobra.Command {
	var (
		cfg      NodeConfig
		logLevel string
		key      string
	)
	c := &cobra.Command{
		Use:   "node",
		Short: "run a raftps node",
		Long: `Run a raftps node. The same command line works on first start, on restart
with an existing data dir, and for a node added to a running cluster:

  raftps node --id n1 --data-dir /var/lib/raftps --join 10.0.0.2:7002,10.0.0.3:7002 --bootstrap-expect 3`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			logger, err := newLogger(g.err, logLevel)
			if err != nil {
				return err
			}
			cfg.Logger = logger
			if key != "" {
				cfg.GossipKey = []byte(key)
			}
			n, err := NewNode(cfg)
			if err != nil {
				return err
			}
			if err := n.Open(cmd.Context()); err != nil {
				return err
			}
			select {
			case <-cmd.Context().Done():
				logger.Info("signal received: shutting down")
				return n.Close()
			case err := <-n.Failed():
				n.Close()
				return err
			}
		},
	}
	f := c.Flags()
	f.StringVar(&cfg.ID, "id", "", "node id, unique in the cluster (required)")
	f.StringVar(&cfg.DataDir, "data-dir", "", "data directory (required)")
	f.StringVar(&cfg.GRPCAddr, "grpc-addr", "127.0.0.1:7000", "gRPC API and node-to-node RPC address")
	f.StringVar(&cfg.RaftAddr, "raft-addr", "127.0.0.1:7001", "Raft transport address")
	f.StringVar(&cfg.GossipAddr, "gossip-addr", "127.0.0.1:7002", "gossip address (UDP and TCP)")
	f.StringVar(&cfg.HTTPAddr, "http-addr", "127.0.0.1:7003", "HTTP address (/healthz, /readyz, /metrics)")
	f.StringVar(&cfg.Advertise, "advertise", "", "host other nodes use to reach this one (when binding to 0.0.0.0)")
	f.StringSliceVar(&cfg.Join, "join", nil, "gossip addresses of existing members (host:port,...)")
	f.IntVar(&cfg.BootstrapExpect, "bootstrap-expect", 0, "bootstrap once this many server nodes have joined")
	f.StringSliceVar(&cfg.Roles, "roles", []string{"server", "pserver", "trainer"}, "roles: server, pserver, trainer")
	f.StringVar(&logLevel, "log-level", "info", "log level: debug, info, warn, error")
	f.StringVar(&key, "gossip-key", "", "gossip encryption key (16, 24 or 32 bytes)")
	f.StringVar(&cfg.DatasetDir, "dataset-dir", "", "dataset directory of this node's trainers (default: the job's dataset path)")
	f.DurationVar(&cfg.HeartbeatTimeout, "raft-heartbeat-timeout", 500*time.Millisecond, "Raft heartbeat timeout")
	f.DurationVar(&cfg.ElectionTimeout, "raft-election-timeout", 500*time.Millisecond, "Raft election timeout")
	f.DurationVar(&cfg.LeaderLeaseTimeout, "raft-leader-lease-timeout", 250*time.Millisecond, "Raft leader lease timeout")
	f.DurationVar(&cfg.DeadServerTimeout, "dead-server-timeout", 30*time.Second, "remove a failed server from Raft after this long (never below quorum)")
	return c
}

func newKVCmd(g *globals) *cobra.Command {
	c := &cobra.Command{Use: "kv", Short: "key/value commands"}
	var lease int64
	put := &cobra.Command{
		Use: "put KEY VALUE", Short: "put a key", Args: cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			return g.call(cmd.Context(), func(ctx context.Context, cl *client.Client) error {
				resp, err := cl.KV.Put(ctx, &pb.PutRequest{Key: []byte(args[0]), Value: []byte(args[1]), Lease: lease})
				if err != nil {
					return rpcError(err)
				}
				if g.output == "json" {
					return g.printProto(resp)
				}
				fmt.Fprintln(g.out, "OK")
				return nil
			})
		},
	}
	put.Flags().Int64Var(&lease, "lease", 0, "attach the key to this lease id")

	var prefix, serializable bool
	get := &cobra.Command{
		Use: "get KEY", Short: "get a key (or every key with --prefix)", Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return g.call(cmd.Context(), func(ctx context.Context, cl *client.Client) error {
				req := &pb.RangeRequest{Key: []byte(args[0]), Serializable: serializable}
				if prefix {
					req.RangeEnd = client.PrefixEnd(req.Key)
				}
				resp, err := cl.KV.Range(ctx, req)
				if err != nil {
					return rpcError(err)
				}
				if g.output == "json" {
					type kvj struct {
						Key            string `json:"key"`
						Value          string `json:"value"`
						CreateRevision int64  `json:"create_revision"`
						ModRevision    int64  `json:"mod_revision"`
						Version        int64  `json:"version"`
						Lease          int64  `json:"lease"`
					}
					out := struct {
						Revision int64 `json:"revision"`
						KVs      []kvj `json:"kvs"`
					}{Revision: resp.GetHeader().GetRevision(), KVs: []kvj{}}
					for _, kv := range resp.Kvs {
						out.KVs = append(out.KVs, kvj{string(kv.Key), string(kv.Value), kv.CreateRevision, kv.ModRevision, kv.Version, kv.Lease})
					}
					return g.printJSON(out)
				}
				if len(resp.Kvs) == 0 {
					return &exitError{code: 1, err: fmt.Errorf("key %q not found", args[0])}
				}
				for _, kv := range resp.Kvs {
					if prefix {
						fmt.Fprintln(g.out, string(kv.Key))
					}
					fmt.Fprintln(g.out, string(kv.Value))
				}
				return nil
			})
		},
	}
	get.Flags().BoolVar(&prefix, "prefix", false, "get every key with this prefix")
	get.Flags().BoolVar(&serializable, "serializable", false, "read the local node's state (may be stale)")

	var delPrefix bool
	del := &cobra.Command{
		Use: "del KEY", Short: "delete a key (or a prefix)", Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return g.call(cmd.Context(), func(ctx context.Context, cl *client.Client) error {
				req := &pb.DeleteRangeRequest{Key: []byte(args[0])}
				if delPrefix {
					req.RangeEnd = client.PrefixEnd(req.Key)
				}
				resp, err := cl.KV.DeleteRange(ctx, req)
				if err != nil {
					return rpcError(err)
				}
				fmt.Fprintln(g.out, resp.Deleted)
				return nil
			})
		},
	}
	del.Flags().BoolVar(&delPrefix, "prefix", false, "delete every key with this prefix")

	var watchPrefix bool
	var rev int64
	watch := &cobra.Command{
		Use: "watch KEY", Short: "watch a key (or a prefix) from a revision", Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			cl, err := g.client()
			if err != nil {
				return err
			}
			defer cl.Close()
			req := &pb.WatchRequest{Key: []byte(args[0]), StartRevision: rev}
			if watchPrefix {
				req.RangeEnd = client.PrefixEnd(req.Key)
			}
			return watchLoop(cmd.Context(), cl, req, func(ev *pb.Event) error {
				if g.output == "json" {
					return g.printProto(ev)
				}
				fmt.Fprintf(g.out, "%s %s %s (rev %d)\n", ev.Type, ev.Kv.Key, ev.Kv.Value, ev.Kv.ModRevision)
				return nil
			})
		},
	}
	watch.Flags().BoolVar(&watchPrefix, "prefix", false, "watch every key with this prefix")
	watch.Flags().Int64Var(&rev, "rev", 0, "start revision (0: from now)")
	c.AddCommand(put, get, del, watch)
	return c
}

// watchLoop follows a watch until ctx ends, resuming from the next revision
// after a stream breaks (a node died), so no event is missed or repeated.
func watchLoop(ctx context.Context, cl *client.Client, req *pb.WatchRequest, fn func(*pb.Event) error) error {
	next := req.StartRevision
	for {
		r := proto.Clone(req).(*pb.WatchRequest)
		r.StartRevision = next
		stream, err := cl.Watch.Watch(ctx, r)
		if err == nil {
			for {
				resp, rerr := stream.Recv()
				if rerr != nil {
					err = rerr
					break
				}
				if resp.Canceled {
					return fmt.Errorf("watch canceled: %s (compact revision %d)", resp.CancelReason, resp.CompactRevision)
				}
				for _, ev := range resp.Events {
					if err := fn(ev); err != nil {
						return err
					}
					next = ev.Kv.ModRevision + 1
				}
			}
		}
		if ctx.Err() != nil {
			return nil
		}
		if !client.Retryable(err) && !errors.Is(err, io.EOF) {
			return rpcError(err)
		}
		if next == 0 {
			// We never saw an event: resume from the revision of "now" as the
			// server saw it is unknown, so ask for the current revision.
			if rr, rerr := cl.KV.Range(ctx, &pb.RangeRequest{Key: req.Key, CountOnly: true}); rerr == nil {
				next = rr.Header.Revision + 1
			}
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(200 * time.Millisecond):
		}
	}
}

func newLeaseCmd(g *globals) *cobra.Command {
	c := &cobra.Command{Use: "lease", Short: "lease commands"}
	grant := &cobra.Command{
		Use: "grant TTL", Short: "grant a lease of TTL seconds; prints its id", Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ttl, err := strconv.ParseInt(args[0], 10, 64)
			if err != nil || ttl <= 0 {
				return fmt.Errorf("TTL %q: want a positive number of seconds", args[0])
			}
			return g.call(cmd.Context(), func(ctx context.Context, cl *client.Client) error {
				resp, err := cl.Lease.LeaseGrant(ctx, &pb.LeaseGrantRequest{Ttl: ttl})
				if err != nil {
					return rpcError(err)
				}
				if g.output == "json" {
					return g.printProto(resp)
				}
				fmt.Fprintf(g.out, "%d\n", resp.Id)
				fmt.Fprintf(g.err, "lease %d granted with TTL %ds\n", resp.Id, resp.Ttl)
				return nil
			})
		},
	}
	revoke := &cobra.Command{
		Use: "revoke ID", Short: "revoke a lease and delete its keys", Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			id, err := strconv.ParseInt(args[0], 10, 64)
			if err != nil {
				return fmt.Errorf("lease id %q: %v", args[0], err)
			}
			return g.call(cmd.Context(), func(ctx context.Context, cl *client.Client) error {
				if _, err := cl.Lease.LeaseRevoke(ctx, &pb.LeaseRevokeRequest{Id: id}); err != nil {
					return rpcError(err)
				}
				fmt.Fprintf(g.out, "lease %d revoked\n", id)
				return nil
			})
		},
	}
	keepalive := &cobra.Command{
		Use: "keepalive ID", Short: "keep a lease alive until interrupted", Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			id, err := strconv.ParseInt(args[0], 10, 64)
			if err != nil {
				return fmt.Errorf("lease id %q: %v", args[0], err)
			}
			cl, err := g.client()
			if err != nil {
				return err
			}
			defer cl.Close()
			ctx := cmd.Context()
			for ctx.Err() == nil {
				stream, err := cl.Lease.LeaseKeepAlive(ctx)
				if err == nil {
					err = keepAliveStream(ctx, stream, id, func(ttl int64) {
						fmt.Fprintf(g.out, "lease %d keepalived with TTL %d\n", id, ttl)
					})
				}
				if ctx.Err() != nil {
					return nil
				}
				if !client.Retryable(err) {
					return rpcError(err)
				}
				time.Sleep(200 * time.Millisecond)
			}
			return nil
		},
	}
	c.AddCommand(grant, revoke, keepalive)
	return c
}

// keepAliveStream renews id every third of its TTL until ctx ends or the stream fails.
func keepAliveStream(ctx context.Context, stream pb.Lease_LeaseKeepAliveClient, id int64, onTTL func(int64)) error {
	for {
		if err := stream.Send(&pb.LeaseKeepAliveRequest{Id: id}); err != nil {
			return err
		}
		resp, err := stream.Recv()
		if err != nil {
			return err
		}
		if onTTL != nil {
			onTTL(resp.Ttl)
		}
		wait := time.Duration(resp.Ttl) * time.Second / 3
		if wait < 100*time.Millisecond {
			wait = 100 * time.Millisecond
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(wait):
		}
	}
}

func newMembersCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use: "members", Short: "list cluster members", Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return g.call(cmd.Context(), func(ctx context.Context, cl *client.Client) error {
				resp, err := cl.Cluster.Members(ctx, &pb.MembersRequest{})
				if err != nil {
					return rpcError(err)
				}
				if g.output == "json" {
					return g.printProto(resp)
				}
				fmt.Fprintf(g.out, "%-10s %-8s %-9s %-22s %-22s %s\n", "ID", "STATUS", "RAFT", "GRPC", "GOSSIP", "ROLES")
				for _, m := range resp.Members {
					fmt.Fprintf(g.out, "%-10s %-8s %-9s %-22s %-22s %s\n", m.Id, m.Status, m.Suffrage, m.GrpcAddr, m.GossipAddr, strings.Join(m.Roles, ","))
				}
				return nil
			})
		},
	}
}

func newStatusCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use: "status", Short: "show a node's Raft status", Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return g.call(cmd.Context(), func(ctx context.Context, cl *client.Client) error {
				st, err := cl.Cluster.Status(ctx, &pb.StatusRequest{})
				if err != nil {
					return rpcError(err)
				}
				if g.output == "json" {
					return g.printJSON(map[string]any{
						"id": st.Id, "leader": st.Leader, "leader_addr": st.LeaderAddr, "term": st.Term,
						"commit_index": st.CommitIndex, "applied_index": st.AppliedIndex, "last_log_index": st.LastLogIndex,
						"raft_state": st.RaftState, "voters": nonNil(st.Voters), "nonvoters": nonNil(st.Nonvoters), "revision": st.Revision,
					})
				}
				fmt.Fprintf(g.out, "id: %s\nstate: %s\nleader: %s (%s)\nterm: %d\ncommit index: %d\napplied index: %d\nvoters: %s\nnonvoters: %s\nrevision: %d\n",
					st.Id, st.RaftState, st.Leader, st.LeaderAddr, st.Term, st.CommitIndex, st.AppliedIndex,
					strings.Join(st.Voters, ","), strings.Join(st.Nonvoters, ","), st.Revision)
				return nil
			})
		},
	}
}

func nonNil(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}

var _ = os.Stdout

func discardLogger() *slog.Logger { return slog.New(slog.DiscardHandler) }
