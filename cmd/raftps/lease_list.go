package main

import (
	"context"
	"fmt"
	"io"
	"strconv"

	"github.com/spf13/cobra"
	etcdpb "go.etcd.io/etcd/api/v3/etcdserverpb"

	pb "github.com/raftps/raftps/api/raftpspb"
	"github.com/raftps/raftps/raftstore/client"
)

// withLeaseListing adds `lease list` and `lease timetolive` (etcdctl's)
// to the lease command c.
func withLeaseListing(c *cobra.Command, g *globals) *cobra.Command {
	c.AddCommand(newLeaseListCmd(g), newLeaseTimeToLiveCmd(g))
	return c
}

// newLeaseListCmd is `raftps lease list` (etcdctl's).
func newLeaseListCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use: "list", Short: "list the ids of every lease", Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return g.call(cmd.Context(), func(ctx context.Context, cl *client.Client) error {
				// raftps' etcd v3 API serves LeaseLeases on the same port.
				resp, err := etcdpb.NewLeaseClient(cl.Conn()).LeaseLeases(ctx, &etcdpb.LeaseLeasesRequest{})
				if err != nil {
					return rpcError(err)
				}
				type leaseJ struct {
					ID int64 `json:"id"`
				}
				out := struct {
					Leases []leaseJ `json:"leases"`
				}{Leases: []leaseJ{}}
				rows := [][]string{}
				for _, l := range resp.Leases {
					out.Leases = append(out.Leases, leaseJ{l.ID})
					rows = append(rows, []string{strconv.FormatInt(l.ID, 10)})
				}
				return g.printer.Table(out, []string{"ID"}, rows)
			})
		},
	}
}

// newLeaseTimeToLiveCmd is `raftps lease timetolive` (etcdctl's).
func newLeaseTimeToLiveCmd(g *globals) *cobra.Command {
	var keys bool
	c := &cobra.Command{
		Use: "timetolive ID", Short: "a lease's remaining and granted TTL (and its keys with --keys)", Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			id, err := strconv.ParseInt(args[0], 10, 64)
			if err != nil {
				return fmt.Errorf("lease id %q: %w", args[0], err)
			}
			return g.call(cmd.Context(), func(ctx context.Context, cl *client.Client) error {
				resp, err := cl.Lease.LeaseTimeToLive(ctx, &pb.LeaseTimeToLiveRequest{Id: id, Keys: keys})
				if err != nil {
					return rpcError(err)
				}
				return g.printer.Object(resp, func(w io.Writer) {
					if resp.Ttl < 0 {
						fmt.Fprintf(w, "lease %d already expired\n", id)
						return
					}
					fmt.Fprintf(w, "lease %d granted with TTL(%ds), remaining(%ds)", id, resp.GrantedTtl, resp.Ttl)
					if keys {
						fmt.Fprint(w, ", attached keys(")
						for i, k := range resp.Keys {
							if i > 0 {
								fmt.Fprint(w, " ")
							}
							fmt.Fprint(w, string(k))
						}
						fmt.Fprint(w, ")")
					}
					fmt.Fprintln(w)
				})
			})
		},
	}
	c.Flags().BoolVar(&keys, "keys", false, "also list the keys attached to the lease")
	return c
}
