package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
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
					rows = append(rows, []string{m.Id, m.Status, suffrageOf(m), m.GrpcAddr, m.GossipAddr, strings.Join(m.Roles, ",")})
				}
				return g.printer.Table(resp, []string{"ID", "STATUS", "RAFT", "GRPC", "GOSSIP", "ROLES"}, rows)
			})
		},
	}
}

// newMemberCmd is `raftps member list|add|promote|remove` (etcdctl's
// member commands; hashicorp/raft's AddVoter, AddNonvoter, RemoveServer).
// raftps also changes membership itself: a node that starts with --join
// is added by the leader (a voter up to 5 servers, else a non-voter) and
// non-voters are promoted as room appears; a server dead longer than
// --dead-server-timeout is removed, never below 3 voters.
//
//   - member add NAME --peer-urls RAFT_ADDR [--learner] adds a server
//     before it starts (etcd's order): a voter, or with --learner a
//     non-voter that the leader holds a non-voter until `member promote`.
//     Then start it with --id NAME --raft-addr RAFT_ADDR --join ....
//   - member promote ID makes a learner that has caught up a voter.
//   - member remove ID takes out a server gone for good (Consul's
//     operator raft remove-peer).
//
// add, promote and remove go to the leader (found with Status and
// Members through any endpoint). Errors keep their gRPC code: AlreadyExists
// (add: the id or address is a member), NotFound (unknown id),
// FailedPrecondition (promote: a voter, or a learner not in sync with the
// leader; remove: a live member).
func newMemberCmd(g *globals) *cobra.Command {
	c := &cobra.Command{Use: "member", Short: "cluster membership"}
	list := newMembersCmd(g)
	list.Use, list.Short = "list", "list the cluster's members: id, gossip status, Raft suffrage (voter, nonvoter, learner), addresses, roles"
	c.AddCommand(list, newMemberAddCmd(g), newMemberPromoteCmd(g), newMemberRemoveCmd(g))
	return c
}

// newMemberRemoveCmd is `raftps member remove`.
func newMemberRemoveCmd(g *globals) *cobra.Command {
	c := &cobra.Command{
		Use: "remove ID", Short: "remove a server that is gone for good from the Raft configuration", Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return g.callLeader(cmd.Context(), func(ctx context.Context, cl *client.Client) error {
				resp, err := cl.Cluster.MemberRemove(ctx, &pb.MemberRemoveRequest{Id: args[0]})
				if err != nil {
					return rpcError(err)
				}
				return g.printer.Object(resp, func(w io.Writer) {
					fmt.Fprintf(w, "member %s removed; Raft configuration: %s\n", args[0], configString(resp.Members))
				})
			})
		},
	}
	return c
}

// newMemberAddCmd is `raftps member add`.
func newMemberAddCmd(g *globals) *cobra.Command {
	var peerURL string
	var learner bool
	c := &cobra.Command{
		Use:   "add NAME --peer-urls RAFT_ADDR [--learner]",
		Short: "add a server (a voter, or a learner with --learner) to the Raft configuration before starting it",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			addr, err := raftAddrOf(peerURL)
			if err != nil {
				return err
			}
			return g.callLeader(cmd.Context(), func(ctx context.Context, cl *client.Client) error {
				resp, err := cl.Cluster.MemberAdd(ctx, &pb.MemberAddRequest{Id: args[0], RaftAddr: addr, IsLearner: learner})
				if err != nil {
					return rpcError(err)
				}
				return g.printer.Object(resp, func(w io.Writer) {
					kind := "voter"
					if learner {
						kind = "learner"
					}
					fmt.Fprintf(w, "member %s added as a %s at %s; Raft configuration: %s\n", args[0], kind, addr, configString(resp.Members))
					fmt.Fprintf(w, "start it with: raftps node --id %s --raft-addr %s --join <a member's gossip address> ...\n", args[0], addr)
				})
			})
		},
	}
	c.Flags().StringVar(&peerURL, "peer-urls", "", "the new node's Raft address, host:port (its --raft-addr)")
	c.Flags().BoolVar(&learner, "learner", false, "add a non-voter, held until `raftps member promote`")
	return c
}

// newMemberPromoteCmd is `raftps member promote`.
func newMemberPromoteCmd(g *globals) *cobra.Command {
	c := &cobra.Command{
		Use: "promote ID", Short: "make a learner that is in sync with the leader a voter", Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return g.callLeader(cmd.Context(), func(ctx context.Context, cl *client.Client) error {
				resp, err := cl.Cluster.MemberPromote(ctx, &pb.MemberPromoteRequest{Id: args[0]})
				if err != nil {
					return rpcError(err)
				}
				return g.printer.Object(resp, func(w io.Writer) {
					fmt.Fprintf(w, "member %s promoted to voter; Raft configuration: %s\n", args[0], configString(resp.Members))
				})
			})
		},
	}
	return c
}

// raftAddrOf is the host:port of --peer-urls: host:port, or a URL as
// etcdctl takes it (http://10.0.0.4:7001: the scheme is dropped; the Raft
// transport is raftps's own TCP, with TLS from the node's flags).
func raftAddrOf(peerURL string) (string, error) {
	addr := peerURL
	if strings.Contains(addr, "://") {
		u, err := url.Parse(addr)
		if err != nil {
			return "", fmt.Errorf("--peer-urls %q: %w", peerURL, err)
		}
		addr = u.Host
	}
	if host, port, err := net.SplitHostPort(addr); err != nil || host == "" || port == "" {
		return "", fmt.Errorf("--peer-urls %q: want the new node's Raft address, host:port (its --raft-addr)", peerURL)
	}
	return addr, nil
}

// suffrageOf is a member's RAFT column: voter, nonvoter, learner or none.
func suffrageOf(m *pb.Member) string {
	if m.IsLearner {
		return "learner"
	}
	return m.Suffrage
}

// configString is "n1(voter), n4(learner)".
func configString(ms []*pb.Member) string {
	ids := make([]string, 0, len(ms))
	for _, m := range ms {
		ids = append(ids, m.Id+"("+suffrageOf(m)+")")
	}
	return strings.Join(ids, ", ")
}

// callLeader runs fn with a client of the leader, found through
// --endpoints: membership changes are made by the leader only.
func (g *globals) callLeader(parent context.Context, fn func(ctx context.Context, cl *client.Client) error) error {
	var leaderAddr string
	err := g.call(parent, func(ctx context.Context, cl *client.Client) error {
		st, err := cl.Cluster.Status(ctx, &pb.StatusRequest{})
		if err != nil {
			return rpcError(err)
		}
		if st.Leader == "" {
			return errors.New("no leader: membership changes need a leader (with a majority gone for good, see `raftps node --force-new-cluster`)")
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
	return g.oneClient(parent, leaderAddr, fn)
}
