package nodetest

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/raftps/raftps/internal/testing/localcluster"
	"github.com/raftps/raftps/internal/testing/testutil"
	"github.com/raftps/raftps/node"
	"github.com/raftps/raftps/security"
)

// Open starts an in-process node id with roles on free loopback ports,
// its data dir under t.TempDir(), jobs confined to the repository's
// datasets/ (they name datasets/fashion-mnist), the test's logger, and
// plaintext unless configure sets TLS (then with a new gossip keyring
// unless configure gives one or InsecureGossip). configure, if not nil, may change
// the Config before the node is made. Open waits until the node leads
// (a single-node cluster) and closes it at the test's end.
func Open(t testing.TB, id string, roles []string, configure func(*node.Config)) *node.Node {
	t.Helper()
	ports, err := localcluster.FreePorts(4)
	if err != nil {
		t.Fatal(err)
	}
	a := func(p int) string { return fmt.Sprintf("127.0.0.1:%d", p) }
	cfg := node.DefaultConfig()
	cfg.ID, cfg.DataDir = id, filepath.Join(t.TempDir(), id)
	cfg.GRPCAddr, cfg.RaftAddr, cfg.GossipAddr, cfg.HTTPAddr = a(ports[0]), a(ports[1]), a(ports[2]), a(ports[3])
	cfg.Roles = roles
	cfg.DatasetRoots = []string{localcluster.DatasetRoot()}
	cfg.Logger = testutil.Logger(t)
	if configure != nil {
		configure(&cfg)
	}
	if cfg.TLS.Enabled() && cfg.GossipKeyringFile == "" && !cfg.InsecureGossip {
		// A TLS node needs a gossip keyring (node.ErrNoGossipKeyring).
		cfg.GossipKeyringFile = filepath.Join(t.TempDir(), "gossip.keyring")
		if err := security.NewKeyringFile(cfg.GossipKeyringFile); err != nil {
			t.Fatal(err)
		}
	}
	n, err := node.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := n.Open(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { n.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := n.Store().WaitForLeader(ctx); err != nil {
		t.Fatal(err)
	}
	return n
}
