package node

import (
	"context"
	"net"
	"time"

	"google.golang.org/grpc"

	"github.com/raftps/raftps/gossip"
	"github.com/raftps/raftps/master"
	"github.com/raftps/raftps/pserver"
	pagent "github.com/raftps/raftps/pserver/agent"
	"github.com/raftps/raftps/pserver/checkpoint"
	"github.com/raftps/raftps/pserver/psclient"
	"github.com/raftps/raftps/pserver/replica"
	"github.com/raftps/raftps/pserver/wire"
	"github.com/raftps/raftps/schema"
	tagent "github.com/raftps/raftps/trainer/agent"

	pb "github.com/raftps/raftps/api/raftpspb"
)

// pruneInterval between sweeps of unreferenced checkpoint versions.
const pruneInterval = 10 * time.Minute

// gossipPeers adapts gossip membership to what the role agents and the
// checkpoint manager need.
type gossipPeers struct {
	g    *gossip.Gossip
	self string
}

// PServerNodes counts alive members with the pserver role.
func (p gossipPeers) PServerNodes() int {
	n := 0
	for _, m := range p.g.Members() {
		if m.Status == gossip.StatusAlive && m.Meta.HasRole(gossip.RolePServer) {
			n++
		}
	}
	return n
}

// PServerPeers lists the alive pserver nodes with their data path
// addresses (backups of replicated slots; pserver/agent).
func (p gossipPeers) PServerPeers() []schema.ReplicaMember {
	var out []schema.ReplicaMember
	for _, m := range p.g.Members() {
		if m.Status == gossip.StatusAlive && m.Meta.HasRole(gossip.RolePServer) && m.Meta.PServerAddr != "" {
			out = append(out, schema.ReplicaMember{Node: m.Meta.ID, Addr: m.Meta.PServerAddr, Zone: m.Meta.Zone, Instance: m.Meta.PServerInstance})
		}
	}
	return out
}

// Peers lists the other alive nodes that can hold checkpoint replicas.
func (p gossipPeers) Peers() []checkpoint.Peer {
	var out []checkpoint.Peer
	for _, m := range p.g.Members() {
		if m.Meta.ID == p.self || m.Status != gossip.StatusAlive {
			continue
		}
		host, _, _ := net.SplitHostPort(m.Meta.Peer())
		out = append(out, checkpoint.Peer{ID: m.Meta.ID, Addr: m.Meta.Peer(), Host: host})
	}
	return out
}

// IsMember reports whether id is still a gossip member: alive, or failed
// (dead: a crash or a partition it may come back from) until gossip
// forgets it after DeadRetention; false once it left.
func (p gossipPeers) IsMember(id string) bool {
	m, ok := p.g.Member(id)
	return ok && m.Status != gossip.StatusLeft
}

// openRoles starts what every node serves (the checkpoint store, so that
// any node can hold replicas) and the pserver and trainer agents of its
// roles.
func (n *Node) openRoles(ctx context.Context) error {
	local := n.store // the agents' in-process client: the store's roles (raftstore/roles)
	store, err := checkpoint.Open(n.dataDirOf("checkpoints"), n.log.With("component", "checkpoint"))
	if err != nil {
		return err
	}
	n.onClose = append(n.onClose, store.Close)
	// Peers fetch and store replicas on the node-to-node port; the CLI
	// reads and verifies them on the client port.
	ckptSvc := checkpoint.NewService(store, n.log).WithMeta(local) // deletes and manifest replacements are checked against pointers
	pb.RegisterCheckpointStoreServer(n.peer, ckptSvc)
	pb.RegisterCheckpointStoreServer(n.client, ckptSvc)
	host, _, _ := net.SplitHostPort(n.GRPCAddr())
	peers := gossipPeers{g: n.gossip, self: n.cfg.ID}
	ccfg := checkpoint.Config{NodeID: n.cfg.ID, Host: host, Store: store, Meta: local, Peers: peers, Logger: n.log}
	if n.dial != nil {
		ccfg.Client = checkpoint.NewClient(n.dial...) // replicas over mutual TLS
	}
	mgr, err := checkpoint.New(ccfg)
	if err != nil {
		return err
	}
	n.ckpt = mgr
	// Old replicas and crashed writers' attempts that no pointer names.
	n.goAgent(ctx, func(ctx context.Context) error {
		t := time.NewTicker(pruneInterval)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return nil
			case <-t.C:
			}
			if k, err := mgr.Prune(ctx); err != nil {
				n.log.Warn("checkpoint prune", "err", err)
			} else if k > 0 {
				n.log.Info("checkpoint prune", "manifests_deleted", k)
			}
		}
	})

	if n.cfg.hasRole(gossip.RolePServer) {
		srv := pserver.NewServer()
		n.ps = srv
		pb.RegisterPServerServer(n.pserver, srv)
		// The backups this node holds of other nodes' slots (issue 34).
		rs := replica.NewService()
		rs.OnBroken = n.reportBrokenStream // a broken stream from a primary: probe it (issue 34)
		pb.RegisterReplicaServer(n.pserver, rs)
		// Slot records carry the data path's address: trainers dial it.
		a := pagent.New(pagent.Config{NodeID: n.cfg.ID, Addr: n.advertised(n.PServerAddr()), Zone: n.cfg.Zone, Instance: n.instance, MemoryBudget: n.cfg.PServerMemoryBudget,
			LeaseTTL: int64(n.cfg.PServerLeaseTTL / time.Second), Logger: n.log,
			Replicas: rs, DialOptions: n.dial}, local, srv, mgr, peers)
		n.goAgent(ctx, a.Run)
	}
	if n.cfg.hasRole(gossip.RoleTrainer) {
		a := tagent.New(tagent.Config{NodeID: n.cfg.ID, Addr: n.GRPCAddr(), DataDir: n.cfg.DatasetDir, DialOptions: n.dial,
			MemoryBudget:   n.cfg.TrainerMemoryBudget,
			ResolveDataset: n.resolveDataset, Logger: n.log},
			local, n.trainerMaster())
		n.goAgent(ctx, a.Run)
	}
	return nil
}

// goAgent runs an agent until the node closes; Close waits for it before
// closing the stores (agents release their leases on the way out).
func (n *Node) goAgent(ctx context.Context, run func(context.Context) error) {
	actx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = run(actx)
	}()
	n.onClose = append(n.onClose, func() error {
		cancel()
		<-done
		return nil
	})
}

// trainerMaster is the master service the node's trainer agent calls in
// process: it takes the trainers' suspect reports (master.Suspects).
func (n *Node) trainerMaster() *master.Service {
	ms := master.NewService(n.store, n.gossip)
	ms.Suspects = n.suspects
	return ms
}

// probePServer is the node's master.Prober: a psclient.Probe of addr,
// the pserver port of a suspect primary, over the node's dial (mutual
// TLS with its certificate).
func (n *Node) probePServer(ctx context.Context, addr, job string, slot int32) error {
	cc, err := grpc.NewClient(addr, append(wire.DialOptions(), n.dial...)...)
	if err != nil {
		return err
	}
	defer cc.Close()
	return psclient.Probe(ctx, cc, job, slot)
}

// reportBrokenStream reports the primary of (job, slot), whose
// replication stream to this node's backup broke, to the node's
// master.Suspects (which probes it before it fails it over).
func (n *Node) reportBrokenStream(job string, slot int32) {
	ctx, cancel := context.WithTimeout(context.Background(), psclient.ReportTimeout)
	defer cancel()
	out, err := n.suspects.Report(ctx, &pb.ReportSuspectRequest{Job: job, Slot: slot, Reason: "the primary's replication stream to this backup broke",
		Source: master.SourceReplication})
	n.log.Info("replication stream from a primary broke: reported", "job", job, "slot", slot, "verdict", out.GetVerdict(), "err", err)
}
