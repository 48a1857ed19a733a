package node

import (
	"context"
	"errors"
	"sort"
	"time"

	"github.com/hashicorp/raft"

	pb "github.com/raftps/raftps/api/raftpspb"
	"github.com/raftps/raftps/gossip"
	"github.com/raftps/raftps/raftstore"
	"github.com/raftps/raftps/raftstore/client"
)

// bootstrapExpect waits until gossip shows BootstrapExpect alive server
// nodes, checks that none of them is already part of a cluster, and then
// bootstraps all of them with the same configuration (Consul's
// bootstrap_expect; identical configurations on every node are safe: they
// make the same log entry 1).
func (n *Node) bootstrapExpect(ctx context.Context) {
	t := time.NewTicker(200 * time.Millisecond)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if has, err := n.hasClusterState(); err != nil || has {
			if err == nil {
				return // restarted node or a cluster exists: the leader adds us
			}
			continue
		}
		servers := n.expectedServers()
		if len(servers) < n.cfg.BootstrapExpect {
			continue
		}
		if n.peersInCluster(ctx, servers) {
			n.log.Info("bootstrap-expect: a cluster exists; waiting to be added by its leader")
			return
		}
		err := n.store.Bootstrap(servers)
		if errors.Is(err, raftstore.ErrHasState) {
			return
		}
		if err != nil {
			n.log.Error("bootstrap-expect: bootstrap failed", "err", err)
			continue
		}
		n.log.Info("bootstrap-expect: bootstrapped", "servers", len(servers))
		return
	}
}

// expectedServers are the alive server nodes in gossip as Raft voters,
// sorted by ID (RaftAddr in gossip metadata is the advertised address).
func (n *Node) expectedServers() []raft.Server {
	var servers []raft.Server
	for _, m := range n.gossip.Members() {
		if m.Status == gossip.StatusAlive && m.Meta.HasRole(gossip.RoleServer) {
			servers = append(servers, raft.Server{Suffrage: raft.Voter, ID: raft.ServerID(m.Meta.ID), Address: raft.ServerAddress(m.Meta.RaftAddr)})
		}
	}
	sort.Slice(servers, func(i, j int) bool { return servers[i].ID < servers[j].ID })
	return servers
}

func (n *Node) hasClusterState() (bool, error) {
	servers, err := n.store.Configuration()
	if err != nil {
		return false, err
	}
	return len(servers) > 0, nil
}

// peersInCluster asks each peer whether it already has a Raft configuration.
func (n *Node) peersInCluster(ctx context.Context, servers []raft.Server) bool {
	for _, s := range servers {
		if string(s.ID) == n.cfg.ID {
			continue
		}
		m, ok := n.gossip.Member(string(s.ID))
		if !ok {
			continue
		}
		c, err := client.New([]string{m.Meta.GRPCAddr}, n.dial...)
		if err != nil {
			continue
		}
		cctx, cancel := context.WithTimeout(ctx, time.Second)
		st, err := c.Cluster.Status(cctx, &pb.StatusRequest{})
		cancel()
		c.Close()
		if err == nil && (len(st.Voters) > 0 || st.Leader != "") {
			return true
		}
	}
	return false
}
