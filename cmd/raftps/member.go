package main

import (
	"context"
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

// newMemberCmd is `raftps member list` (etcdctl's member list): the
// cluster's members as gossip and the Raft configuration see them.
// raftps changes membership itself (a node joins with `raftps node
// --join`; the leader adds it, and removes a server dead longer than
// --dead-server-timeout), so there is no member add or remove.
func newMemberCmd(g *globals) *cobra.Command {
	c := &cobra.Command{Use: "member", Short: "cluster membership"}
	list := newMembersCmd(g)
	list.Use, list.Short = "list", "list the cluster's members: id, gossip status, Raft suffrage, addresses, roles"
	c.AddCommand(list)
	return c
}
