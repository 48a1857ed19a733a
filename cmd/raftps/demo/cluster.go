package demo

import (
	"context"
	"fmt"
	"strings"
	"time"

	pb "github.com/raftps/raftps/api/raftpspb"
	"github.com/raftps/raftps/internal/testing/localcluster"
	"github.com/raftps/raftps/raftstore/client"
	"github.com/raftps/raftps/security"
)

// Cluster is the local cluster of child processes of `raftps demo`
// and `raftps dev`, with mutual TLS: its own CA and certificates in
// <dir>/pki.
type Cluster struct {
	Nodes []*localcluster.Node
	Admin security.Files // the cluster's client certificate (role admin)
}

// New makes (does not start) a cluster of n nodes of the binary exe in
// dir, each node started with nodeFlags besides its own.
func New(exe, dir string, n int, nodeFlags ...string) (*Cluster, error) {
	// Secure by default: localcluster.New makes the CA, the nodes' and
	// the admin's certificates and the gossip keyring in dir/pki.
	nodes, err := localcluster.New(exe, dir, n, nodeFlags...)
	if err != nil {
		return nil, err
	}
	return FromNodes(nodes), nil
}

// FromNodes is the cluster of nodes (made by localcluster.New or Load);
// the admin certificate is the first node's.
func FromNodes(nodes []*localcluster.Node) *Cluster {
	return &Cluster{Nodes: nodes, Admin: nodes[0].Admin}
}

// StopAll stops every node gracefully (SIGTERM, then SIGKILL after 15 s).
func (c *Cluster) StopAll() {
	for _, d := range c.Nodes {
		if d.Running() {
			_ = d.Stop(15 * time.Second)
		}
	}
}

// Node is the node of ID id, or nil.
func (c *Cluster) Node(id string) *localcluster.Node {
	for _, d := range c.Nodes {
		if d.ID == id {
			return d
		}
	}
	return nil
}

// HTTPAddrs lists the nodes' HTTP addresses (each serves the dashboard),
// comma-separated.
func (c *Cluster) HTTPAddrs() string {
	var a []string
	for _, d := range c.Nodes {
		a = append(a, d.HTTP)
	}
	return strings.Join(a, ", ")
}

// Endpoints lists the nodes' gRPC client addresses.
func (c *Cluster) Endpoints() []string {
	var eps []string
	for _, d := range c.Nodes {
		eps = append(eps, d.GRPC)
	}
	return eps
}

// Start starts every node and waits up to wait for a leader; it returns
// a client of every node holding the admin's certificate (the caller
// closes it) and the leader's id. The demo and `raftps dev` start their
// clusters with it.
func (c *Cluster) Start(ctx context.Context, wait time.Duration) (*client.Client, string, error) {
	for _, d := range c.Nodes {
		if err := d.Start(); err != nil {
			return nil, "", err
		}
	}
	opts, err := localcluster.DialOptions(c.Admin)
	if err != nil {
		return nil, "", err
	}
	cl, err := client.New(c.Endpoints(), opts...)
	if err != nil {
		return nil, "", err
	}
	lctx, cancel := context.WithTimeout(ctx, wait)
	leader, err := WaitLeader(lctx, cl)
	cancel()
	if err != nil {
		cl.Close()
		return nil, "", err
	}
	return cl, leader, nil
}

// WaitLeader waits until ctx ends for a leader and returns its id.
func WaitLeader(ctx context.Context, cl *client.Client) (string, error) {
	for {
		cctx, cancel := context.WithTimeout(ctx, time.Second)
		st, err := cl.Cluster.Status(cctx, &pb.StatusRequest{})
		cancel()
		if err == nil && st.Leader != "" {
			return st.Leader, nil
		}
		select {
		case <-ctx.Done():
			return "", fmt.Errorf("no leader: %w", ctx.Err())
		case <-time.After(100 * time.Millisecond):
		}
	}
}
