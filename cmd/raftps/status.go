package main

import (
	"context"
	"fmt"
	"io"
	"strings"

	"github.com/spf13/cobra"

	pb "github.com/raftps/raftps/api/raftpspb"
	"github.com/raftps/raftps/raftstore/client"
)

func newStatusCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use: "status", Short: "show a node's Raft status", Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return g.call(cmd.Context(), func(ctx context.Context, cl *client.Client) error {
				st, err := cl.Cluster.Status(ctx, &pb.StatusRequest{})
				if err != nil {
					return rpcError(err)
				}
				return g.printer.Object(map[string]any{
					"id": st.Id, "leader": st.Leader, "leader_addr": st.LeaderAddr, "term": st.Term,
					"commit_index": st.CommitIndex, "applied_index": st.AppliedIndex, "last_log_index": st.LastLogIndex,
					"raft_state": st.RaftState, "voters": nonNil(st.Voters), "nonvoters": nonNil(st.Nonvoters), "revision": st.Revision,
					"errors": nonNil(st.Errors), "tls": onOff(st.Tls),
				}, func(w io.Writer) {
					fmt.Fprintf(w, "id: %s\nstate: %s\nleader: %s (%s)\nterm: %d\ncommit index: %d\napplied index: %d\nvoters: %s\nnonvoters: %s\nrevision: %d\n",
						st.Id, st.RaftState, st.Leader, st.LeaderAddr, st.Term, st.CommitIndex, st.AppliedIndex,
						strings.Join(st.Voters, ","), strings.Join(st.Nonvoters, ","), st.Revision)
					fmt.Fprintf(w, "tls: %s\n", onOff(st.Tls))
					for _, e := range st.Errors {
						fmt.Fprintf(w, "error: %s\n", e)
					}
				})
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

func onOff(b bool) string {
	if b {
		return "on"
	}
	return "off"
}
