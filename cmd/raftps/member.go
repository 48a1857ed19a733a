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
