package node

import (
	"context"
	"errors"
	"fmt"
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
// make the same log entry 1). It does not bootstrap while a peer's state
// cannot be confirmed (peersInCluster's error): a peer that does not answer
// may be in a cluster, and a node that bootstraps beside a cluster makes an
// entry 1 of its own with the same index and term as the cluster's. It
// asks again on the next round and says why it waits.
func (n *Node) bootstrapExpect(ctx context.Context) {
	t := time.NewTicker(200 * time.Millisecond)
	defer t.Stop()
	var warned time.Time
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
		// Gossip is not authenticated without a keyring: every server of
		// the first configuration must prove its node identity first.
		if err := n.verifyServers(ctx, servers); err != nil {
			if time.Since(warned) >= 5*time.Second {
				warned = time.Now()
				n.log.Warn("bootstrap-expect: not bootstrapping while a server in gossip has not proved its node identity", "err", err)
			}
			continue
		}
		in, err := peersInCluster(ctx, n.cfg.ID, servers, n.peerStatus)
		if err != nil {
			if time.Since(warned) >= 5*time.Second {
				warned = time.Now()
				n.log.Warn("bootstrap-expect: not bootstrapping while a peer's cluster state is unknown; asking again", "err", err)
			}
			continue
		}
		if in {
			n.log.Info("bootstrap-expect: a cluster exists; waiting to be added by its leader")
			return
		}
		err = n.store.Bootstrap(servers)
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

// verifyServers checks every server but this node with
// raftstore.Store.VerifyPeer.
func (n *Node) verifyServers(ctx context.Context, servers []raft.Server) error {
	for _, srv := range servers {
		if string(srv.ID) == n.cfg.ID {
			continue
		}
		if err := n.store.VerifyPeer(ctx, string(srv.ID), string(srv.Address)); err != nil {
			return err
		}
	}
	return nil
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

// peerStatus asks node id (found in gossip) for its cluster status, within
// a second.
func (n *Node) peerStatus(ctx context.Context, id string) (*pb.StatusResponse, error) {
	m, ok := n.gossip.Member(id)
	if !ok {
		return nil, fmt.Errorf("%s is no longer in gossip", id)
	}
	c, err := client.New([]string{m.Meta.GRPCAddr}, n.dial...)
	if err != nil {
		return nil, err
	}
	defer c.Close()
	cctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	return c.Cluster.Status(cctx, &pb.StatusRequest{})
}

// peersInCluster asks every server but self whether it already has a Raft
// configuration (status). It returns true as soon as one has (voters or a
// leader known), false if every one answered that it has none, and an
// error naming a server that could not be asked (its state is unknown).
func peersInCluster(ctx context.Context, self string, servers []raft.Server,
	status func(ctx context.Context, id string) (*pb.StatusResponse, error)) (bool, error) {
	var unknown error
	for _, s := range servers {
		id := string(s.ID)
		if id == self {
			continue
		}
		st, err := status(ctx, id)
		if err != nil {
			if unknown == nil {
				unknown = fmt.Errorf("cluster status of %s: %w", id, err)
			}
			continue
		}
		if len(st.Voters) > 0 || st.Leader != "" {
			return true, nil
		}
	}
	return false, unknown
}
