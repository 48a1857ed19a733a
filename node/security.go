package node

import (
	"fmt"
	"path/filepath"

	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"

	pb "github.com/raftps/raftps/api/raftpspb"
	"github.com/raftps/raftps/master"
	"github.com/raftps/raftps/security"
)

// serverSecurity returns the server options of the client, node-to-node
// and pserver gRPC servers: with TLS, mutual TLS and a per-method
// authorisation of the caller's role (security.Authorizer; the
// node-to-node port serves the node role only); without, none.
func (n *Node) serverSecurity() (client, peer, pserver []grpc.ServerOption) {
	if n.tls == nil {
		return nil, nil, nil
	}
	log := n.log.With("component", "authz")
	opts := func(a *security.Authorizer) []grpc.ServerOption {
		return []grpc.ServerOption{grpc.Creds(n.tls.ServerCredentials()),
			grpc.ChainUnaryInterceptor(a.UnaryInterceptor()), grpc.ChainStreamInterceptor(a.StreamInterceptor())}
	}
	user := &security.Authorizer{Log: log}
	return opts(user), opts(&security.Authorizer{NodeOnly: true, Log: log}), opts(user)
}

// TLS reports whether the node runs mutual TLS (false: --insecure).
func (n *Node) TLS() bool { return n.tls != nil }

// datasetRoots are Config.DatasetRoots, or <DataDir>/datasets and
// DatasetDir (if set).
func (n *Node) datasetRoots() []string {
	if len(n.cfg.DatasetRoots) > 0 {
		return n.cfg.DatasetRoots
	}
	roots := []string{filepath.Join(n.cfg.DataDir, "datasets")}
	if n.cfg.DatasetDir != "" {
		roots = append(roots, n.cfg.DatasetDir)
	}
	return roots
}

// resolveDataset confines a job's dataset path to the roots.
func (n *Node) resolveDataset(p string) (string, error) {
	return security.ConfinePath(n.datasetRoots(), p)
}

// checkDataset is the submit check: the path must be a dataset under the
// roots; a refusal names neither the roots nor what exists.
func (n *Node) checkDataset(d *pb.DatasetSpec) error {
	if d == nil || d.Path == "" {
		return master.CheckFashionMNIST(d)
	}
	real, err := n.resolveDataset(d.Path)
	if err != nil {
		return err
	}
	cp := proto.Clone(d).(*pb.DatasetSpec)
	cp.Path = real
	if err := master.CheckFashionMNIST(cp); err != nil {
		return fmt.Errorf("dataset.path %q: %w (no %s dataset there)", d.Path, security.ErrOutsideRoots, "fashion-mnist")
	}
	return nil
}
