package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/spf13/cobra"
	"google.golang.org/protobuf/proto"

	pb "github.com/raftps/raftps/api/raftpspb"
	"github.com/raftps/raftps/raftstore/client"
	"github.com/raftps/raftps/schema"
)

// ErrFlags: a command's flags contradict each other.
var ErrFlags = errors.New("bad flags")

// newKVCmd is `raftps kv put|get|del|watch|txn` (etcdctl's).
func newKVCmd(g *globals) *cobra.Command {
	c := &cobra.Command{Use: "kv", Short: "key/value commands"}
	put := newKVPutCmd(g)
	get := newKVGetCmd(g)
	del := newKVDelCmd(g)
	watch := newKVWatchCmd(g)
	c.AddCommand(put, get, del, watch, newTxnCmd(g))
	return c
}

// newKVPutCmd is `raftps kv put`.
func newKVPutCmd(g *globals) *cobra.Command {
	var (
		lease  int64
		prevKV bool
	)
	c := &cobra.Command{
		Use: "put KEY VALUE", Short: "put a key", Args: cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			return g.call(cmd.Context(), func(ctx context.Context, cl *client.Client) error {
				resp, err := cl.KV.Put(ctx, &pb.PutRequest{Key: []byte(args[0]), Value: []byte(args[1]), Lease: lease, PrevKv: prevKV})
				if err != nil {
					return rpcError(err)
				}
				return g.printer.Object(resp, func(w io.Writer) {
					fmt.Fprintln(w, "OK")
					if p := resp.GetPrevKv(); p != nil { // etcdctl's: the previous key and value
						fmt.Fprintf(w, "%s\n%s\n", p.Key, p.Value)
					}
				})
			})
		},
	}
	c.Flags().Int64Var(&lease, "lease", 0, "attach the key to this lease id")
	c.Flags().BoolVar(&prevKV, "prev-kv", false, "print the key's previous value (etcdctl's --prev-kv)")
	return c
}

// newKVGetCmd is `raftps kv get`.
func newKVGetCmd(g *globals) *cobra.Command {
	var (
		prefix, serializable, fromKey, keysOnly, valueOnly bool
		limit, getRev                                      int64
	)
	c := &cobra.Command{
		Use: "get KEY", Short: "get a key (or every key with --prefix)", Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return g.call(cmd.Context(), func(ctx context.Context, cl *client.Client) error {
				req := &pb.RangeRequest{Key: []byte(args[0]), Serializable: serializable, Limit: limit, KeysOnly: keysOnly, Revision: getRev}
				switch {
				case prefix:
					req.RangeEnd = schema.PrefixEnd(req.Key)
				case fromKey:
					req.RangeEnd = []byte{0}
				}
				resp, err := cl.KV.Range(ctx, req)
				if err != nil {
					return rpcError(err)
				}
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
				// A missing key is no error and prints nothing (etcdctl's).
				if g.output == outputTable {
					rows := make([][]string, 0, len(out.KVs))
					for _, kv := range out.KVs {
						rows = append(rows, []string{kv.Key, kv.Value, fmt.Sprint(kv.ModRevision), fmt.Sprint(kv.Lease)})
					}
					return g.printer.Table(out, []string{"KEY", "VALUE", "MOD_REVISION", "LEASE"}, rows)
				}
				return g.printer.Object(out, func(w io.Writer) {
					for _, kv := range resp.Kvs {
						if keysOnly || (prefix || fromKey) && !valueOnly {
							fmt.Fprintln(w, string(kv.Key))
						}
						if !keysOnly {
							fmt.Fprintln(w, string(kv.Value))
						}
					}
				})
			})
		},
	}
	c.PreRunE = func(*cobra.Command, []string) error {
		switch {
		case prefix && fromKey:
			return fmt.Errorf("%w: --prefix and --from-key cannot be set at the same time, choose one", ErrFlags)
		case keysOnly && valueOnly:
			return fmt.Errorf("%w: --keys-only and --print-value-only cannot be set at the same time, choose one", ErrFlags)
		case limit < 0:
			return fmt.Errorf("%w: --limit %d: want 0 (no limit) or more", ErrFlags, limit)
		case getRev < 0:
			return fmt.Errorf("%w: --rev %d: want 0 (the current revision) or more", ErrFlags, getRev)
		}
		return nil
	}
	c.Flags().BoolVar(&prefix, "prefix", false, "get every key with this prefix")
	c.Flags().BoolVar(&fromKey, "from-key", false, "get every key >= KEY (byte order)")
	c.Flags().BoolVar(&keysOnly, "keys-only", false, "print only the keys")
	c.Flags().BoolVar(&valueOnly, "print-value-only", false, "print only the values (also with --prefix or --from-key)")
	c.Flags().Int64Var(&limit, "limit", 0, "at most this many keys (0: no limit)")
	c.Flags().Int64Var(&getRev, "rev", 0, "read the keys as they were at this revision (0: the current one; etcdctl's --rev)")
	c.Flags().BoolVar(&serializable, "serializable", false, "read the local node's state (may be stale)")
	return c
}

// newKVDelCmd is `raftps kv del`.
func newKVDelCmd(g *globals) *cobra.Command {
	var delPrefix bool
	c := &cobra.Command{
		Use: "del KEY", Short: "delete a key (or a prefix)", Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return g.call(cmd.Context(), func(ctx context.Context, cl *client.Client) error {
				req := &pb.DeleteRangeRequest{Key: []byte(args[0])}
				if delPrefix {
					req.RangeEnd = schema.PrefixEnd(req.Key)
				}
				resp, err := cl.KV.DeleteRange(ctx, req)
				if err != nil {
					return rpcError(err)
				}
				return g.printer.Object(resp, func(w io.Writer) { fmt.Fprintln(w, resp.Deleted) })
			})
		},
	}
	c.Flags().BoolVar(&delPrefix, "prefix", false, "delete every key with this prefix")
	return c
}

// newKVWatchCmd is `raftps kv watch`.
func newKVWatchCmd(g *globals) *cobra.Command {
	var watchPrefix bool
	var rev int64
	c := &cobra.Command{
		Use: "watch KEY", Short: "watch a key (or a prefix) from a revision", Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			cl, err := g.client()
			if err != nil {
				return err
			}
			defer cl.Close()
			req := &pb.WatchRequest{Key: []byte(args[0]), StartRevision: rev}
			if watchPrefix {
				req.RangeEnd = schema.PrefixEnd(req.Key)
			}
			return watchLoop(cmd.Context(), cl, req, func(ev *pb.Event) error {
				return g.printer.Object(ev, func(w io.Writer) {
					fmt.Fprintf(w, "%s %s %s (rev %d)\n", ev.Type, ev.Kv.Key, ev.Kv.Value, ev.Kv.ModRevision)
				})
			})
		},
	}
	c.Flags().BoolVar(&watchPrefix, "prefix", false, "watch every key with this prefix")
	c.Flags().Int64Var(&rev, "rev", 0, "start revision (0: from now)")
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
