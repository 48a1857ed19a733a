package main

import (
	"context"
	"fmt"
	"io"
	"strconv"
	"time"

	"github.com/spf13/cobra"

	pb "github.com/raftps/raftps/api/raftpspb"
	"github.com/raftps/raftps/raftstore/client"
)

func newLeaseCmd(g *globals) *cobra.Command {
	c := &cobra.Command{Use: "lease", Short: "lease commands"}
	c.AddCommand(newLeaseGrantCmd(g), newLeaseRevokeCmd(g), newLeaseKeepaliveCmd(g))
	return c
}

// newLeaseGrantCmd is `raftps lease grant`.
func newLeaseGrantCmd(g *globals) *cobra.Command {
	c := &cobra.Command{
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
				fmt.Fprintf(g.err, "lease %d granted with TTL %ds\n", resp.Id, resp.Ttl)
				return g.printer.Object(resp, func(w io.Writer) { fmt.Fprintf(w, "%d\n", resp.Id) })
			})
		},
	}
	return c
}

// newLeaseRevokeCmd is `raftps lease revoke`.
func newLeaseRevokeCmd(g *globals) *cobra.Command {
	c := &cobra.Command{
		Use: "revoke ID", Short: "revoke a lease and delete its keys", Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			id, err := strconv.ParseInt(args[0], 10, 64)
			if err != nil {
				return fmt.Errorf("lease id %q: %v", args[0], err)
			}
			return g.call(cmd.Context(), func(ctx context.Context, cl *client.Client) error {
				resp, err := cl.Lease.LeaseRevoke(ctx, &pb.LeaseRevokeRequest{Id: id})
				if err != nil {
					return rpcError(err)
				}
				return g.printer.Object(resp, func(w io.Writer) { fmt.Fprintf(w, "lease %d revoked\n", id) })
			})
		},
	}
	return c
}

// newLeaseKeepaliveCmd is `raftps lease keepalive`.
func newLeaseKeepaliveCmd(g *globals) *cobra.Command {
	c := &cobra.Command{
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
					err = keepAliveStream(ctx, stream, id, func(resp *pb.LeaseKeepAliveResponse) error {
						return g.printer.Object(resp, func(w io.Writer) {
							fmt.Fprintf(w, "lease %d keepalived with TTL %d\n", id, resp.Ttl)
						})
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
	return c
}

// keepAliveStream renews id every third of its TTL until ctx ends or the stream fails.
func keepAliveStream(ctx context.Context, stream pb.Lease_LeaseKeepAliveClient, id int64, onResp func(*pb.LeaseKeepAliveResponse) error) error {
	for {
		if err := stream.Send(&pb.LeaseKeepAliveRequest{Id: id}); err != nil {
			return err
		}
		resp, err := stream.Recv()
		if err != nil {
			return err
		}
		if onResp != nil {
			if err := onResp(resp); err != nil {
				return err
			}
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
