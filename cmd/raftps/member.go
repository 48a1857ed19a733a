package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/spf13/cobra"

	pb "github.com/raftps/raftps/api/raftpspb"
	"github.com/raftps/raftps/raftstore/client"
)

func newMembersCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use: "members", Short: "list cluster members", Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return g.call(cmd.Context(), func(ctx context.Context, cl *client.Client) error {
				resp, err := cl.Cluster.Members(ctx, &pb.MembersRequest{})
				if err != nil {
					return rpcError(err)
				}
				rows := make([][]string, 0, len(resp.Members))
				for _, m := range resp.Members {
					rows = append(rows, []string{m.Id, m.Status, m.Suffrage, m.GrpcAddr, m.GossipAddr, strings.Join(m.Roles, ",")})
				}
				return g.printer.Table(resp, []string{"ID", "STATUS", "RAFT", "GRPC", "GOSSIP", "ROLES"}, rows)
			})
		},
	}
}

// newMemberCmd is `raftps member list|remove` (etcdctl's member
// commands). raftps changes membership itself: a node joins with `raftps
// node --join` and the leader adds it (as a voter up to 5) and promotes
// non-voters; it removes a server dead longer than --dead-server-timeout,
// but never below 3 voters. `member remove` is for that last case: a
// server gone for good (Consul's operator raft remove-peer). There is no
// member add or promote: joining does both.
func newMemberCmd(g *globals) *cobra.Command {
	c := &cobra.Command{Use: "member", Short: "cluster membership"}
	list := newMembersCmd(g)
	list.Use, list.Short = "list", "list the cluster's members: id, gossip status, Raft suffrage, addresses, roles"
	remove := &cobra.Command{
		Use: "remove ID", Short: "remove a server that is gone for good from the Raft configuration", Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			var leaderAddr string
			err := g.call(cmd.Context(), func(ctx context.Context, cl *client.Client) error {
				st, err := cl.Cluster.Status(ctx, &pb.StatusRequest{})
				if err != nil {
					return rpcError(err)
				}
				if st.Leader == "" {
					return errors.New("no leader: a server can be removed only by a leader (with a majority gone for good, see `raftps node --force-new-cluster`)")
				}
				ms, err := cl.Cluster.Members(ctx, &pb.MembersRequest{})
				if err != nil {
					return rpcError(err)
				}
				for _, m := range ms.Members {
					if m.Id == st.Leader {
						leaderAddr = m.GrpcAddr
					}
				}
				if leaderAddr == "" {
					return fmt.Errorf("the leader %s announces no gRPC address in gossip yet; retry", st.Leader)
				}
				return nil
			})
			if err != nil {
				return err
			}
			return g.oneClient(cmd.Context(), leaderAddr, func(ctx context.Context, cl *client.Client) error {
				resp, err := cl.Cluster.MemberRemove(ctx, &pb.MemberRemoveRequest{Id: args[0]})
				if err != nil {
					return rpcError(err)
				}
				return g.printer.Object(resp, func(w io.Writer) {
					var ids []string
					for _, m := range resp.Members {
						ids = append(ids, m.Id+"("+m.Suffrage+")")
					}
					fmt.Fprintf(w, "member %s removed; Raft configuration: %s\n", args[0], strings.Join(ids, ", "))
				})
			})
		},
	}
	c.AddCommand(list, remove)
	return c
}
