package bench

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"time"

	"github.com/raftps/raftps/internal/testing/localcluster"

	pb "github.com/raftps/raftps/api/raftpspb"
	"github.com/raftps/raftps/raftstore"
	"github.com/raftps/raftps/raftstore/client"
)

// Cluster is a 3-member cluster of one system on loopback whose members
// the harness can SIGKILL and restart.
type Cluster interface {
	Name() string
	// Start starts every member and waits for an agreed leader.
	Start(ctx context.Context) error
	// Leader waits until every running member names the same leader and
	// returns its index.
	Leader(ctx context.Context) (int, error)
	// Kill SIGKILLs member i.
	Kill(i int)
	// Restart starts member i again with the same command line and data.
	Restart(i int) error
	// Endpoints are the client addresses of the members, skipping the
	// indexes in except.
	Endpoints(except ...int) []string
	// NewStore connects a Store to endpoints.
	NewStore(endpoints []string) (Store, error)
	// Members returns the member IDs in index order.
	Members() []string
	// Close kills every member.
	Close()
}

func skip(i int, except []int) bool {
	for _, e := range except {
		if e == i {
			return true
		}
	}
	return false
}

// raftpsCluster runs `raftps node` processes as integration/harness.go does.
type raftpsCluster struct {
	name  string // "raftps", or "raftps-wal" with --raft-log-store wal
	bin   string
	dir   string
	procs []*proc
	grpc  []string
}

// newRaftpsCluster prepares n nodes in dir with the Raft log store
// logStore ("" or "boltdb": the default; "wal": named raftps-wal) and the
// extra node flags.
func newRaftpsCluster(bin, dir string, n int, logStore string, extra ...string) (*raftpsCluster, error) {
	c := &raftpsCluster{name: "raftps", bin: bin, dir: dir}
	if logStore != "" && logStore != raftstore.LogStoreBoltDB {
		c.name = "raftps-" + logStore
	}
	type addrs struct{ grpc, raft, gossip, http, peer, pserver string }
	var as []addrs
	// One call for every port of every node: ports of separate calls can
	// repeat, and a port left to the node (ephemeral) can be one chosen
	// here for a node not started yet.
	ps, err := localcluster.FreePorts(6 * n)
	if err != nil {
		return nil, err
	}
	a := func(p int) string { return fmt.Sprintf("127.0.0.1:%d", p) }
	for i := 0; i < n; i++ {
		p := ps[6*i:]
		as = append(as, addrs{a(p[0]), a(p[1]), a(p[2]), a(p[3]), a(p[4]), a(p[5])})
	}
	for i, a := range as {
		id := fmt.Sprintf("n%d", i+1)
		var join []string
		for j, o := range as {
			if j != i {
				join = append(join, o.gossip)
			}
		}
		args := []string{"node", "--id", id, "--data-dir", filepath.Join(dir, id), "--grpc-addr", a.grpc,
			"--raft-addr", a.raft, "--gossip-addr", a.gossip, "--http-addr", a.http, "--peer-addr", a.peer, "--pserver-addr", a.pserver, "--log-level", "info",
			"--join", strings.Join(join, ","), "--bootstrap-expect", fmt.Sprint(n)}
		if logStore != "" {
			args = append(args, "--raft-log-store", logStore)
		}
		args = append(args, extra...)
		args = append(args, "--insecure") // plaintext, as the etcd baseline runs; the tls section measures mutual TLS against this
		if root := localcluster.DatasetRoot(); root != "" {
			args = append(args, "--dataset-root", root) // jobs name datasets/fashion-mnist
		}
		c.procs = append(c.procs, &proc{ID: id, Bin: bin, Args: args, LogPath: filepath.Join(dir, id+".log")})
		c.grpc = append(c.grpc, a.grpc)
	}
	return c, nil
}

func (c *raftpsCluster) Name() string { return c.name }

func (c *raftpsCluster) Members() []string {
	var ids []string
	for _, p := range c.procs {
		ids = append(ids, p.ID)
	}
	return ids
}

func (c *raftpsCluster) Start(ctx context.Context) error {
	for _, p := range c.procs {
		if err := p.start(); err != nil {
			return err
		}
	}
	_, err := c.Leader(ctx)
	return err
}

func (c *raftpsCluster) Leader(ctx context.Context) (int, error) {
	return waitLeader(ctx, c.procs, func(ctx context.Context, i int) (string, error) {
		cl, err := client.New([]string{c.grpc[i]})
		if err != nil {
			return "", err
		}
		defer cl.Close()
		st, err := cl.Cluster.Status(ctx, &pb.StatusRequest{})
		if err != nil {
			return "", err
		}
		return st.Leader, nil
	}, func(id string) int {
		for i, p := range c.procs {
			if p.ID == id {
				return i
			}
		}
		return -1
	})
}

// waitLeader polls every running member for its leader until all agree.
func waitLeader(ctx context.Context, procs []*proc, leaderOf func(context.Context, int) (string, error), index func(string) int) (int, error) {
	var last map[string]int
	for {
		leaders := map[string]int{}
		running := 0
		for i, p := range procs {
			if !p.running() {
				continue
			}
			running++
			cctx, cancel := context.WithTimeout(ctx, time.Second)
			l, err := leaderOf(cctx, i)
			cancel()
			if err == nil && l != "" {
				leaders[l]++
			}
		}
		for id, n := range leaders {
			if i := index(id); n == running && i >= 0 && procs[i].running() {
				return i, nil
			}
		}
		last = leaders
		select {
		case <-ctx.Done():
			return -1, fmt.Errorf("no agreed leader (%v): %w", last, ctx.Err())
		case <-time.After(50 * time.Millisecond):
		}
	}
}

func (c *raftpsCluster) Kill(i int)          { c.procs[i].kill() }
func (c *raftpsCluster) Restart(i int) error { return c.procs[i].start() }

func (c *raftpsCluster) Endpoints(except ...int) []string {
	var eps []string
	for i, e := range c.grpc {
		if !skip(i, except) {
			eps = append(eps, e)
		}
	}
	return eps
}

func (c *raftpsCluster) NewStore(endpoints []string) (Store, error) { return newRaftpsStore(endpoints) }

func (c *raftpsCluster) Close() {
	for _, p := range c.procs {
		p.kill()
	}
}

// etcdCluster runs 3 `etcd` members with their default durability
// (fsync of the WAL on every commit), heartbeat and election timeouts.
type etcdCluster struct {
	procs   []*proc
	clients []string
	ids     map[uint64]int // member ID -> index, learned from Status
}

func newEtcdCluster(bin, dir string, n int) (*etcdCluster, error) {
	c := &etcdCluster{ids: map[uint64]int{}}
	var peers, initial []string
	ps, err := localcluster.FreePorts(2 * n) // one call: distinct ports
	if err != nil {
		return nil, err
	}
	for i := 0; i < n; i++ {
		c.clients = append(c.clients, fmt.Sprintf("127.0.0.1:%d", ps[2*i]))
		peers = append(peers, fmt.Sprintf("http://127.0.0.1:%d", ps[2*i+1]))
		initial = append(initial, fmt.Sprintf("e%d=%s", i+1, peers[i]))
	}
	for i := 0; i < n; i++ {
		id := fmt.Sprintf("e%d", i+1)
		args := []string{"--name", id, "--data-dir", filepath.Join(dir, id),
			"--listen-client-urls", "http://" + c.clients[i], "--advertise-client-urls", "http://" + c.clients[i],
			"--listen-peer-urls", peers[i], "--initial-advertise-peer-urls", peers[i],
			"--initial-cluster", strings.Join(initial, ","), "--initial-cluster-state", "new",
			"--initial-cluster-token", "raftps-bench", "--logger", "zap", "--log-level", "warn"}
		c.procs = append(c.procs, &proc{ID: id, Bin: bin, Args: args, LogPath: filepath.Join(dir, id+".log")})
	}
	return c, nil
}

func (c *etcdCluster) Name() string { return "etcd" }

func (c *etcdCluster) Members() []string {
	var ids []string
	for _, p := range c.procs {
		ids = append(ids, p.ID)
	}
	return ids
}

func (c *etcdCluster) Start(ctx context.Context) error {
	for _, p := range c.procs {
		if err := p.start(); err != nil {
			return err
		}
	}
	_, err := c.Leader(ctx)
	return err
}

func (c *etcdCluster) Leader(ctx context.Context) (int, error) {
	return waitLeader(ctx, c.procs, func(ctx context.Context, i int) (string, error) {
		member, leader, err := etcdStatus(ctx, c.clients[i])
		if err != nil {
			return "", err
		}
		c.ids[member] = i
		if leader == 0 {
			return "", nil
		}
		return fmt.Sprint(leader), nil
	}, func(id string) int {
		for mid, i := range c.ids {
			if fmt.Sprint(mid) == id {
				return i
			}
		}
		return -1
	})
}

func (c *etcdCluster) Kill(i int)          { c.procs[i].kill() }
func (c *etcdCluster) Restart(i int) error { return c.procs[i].start() }

func (c *etcdCluster) Endpoints(except ...int) []string {
	var eps []string
	for i, e := range c.clients {
		if !skip(i, except) {
			eps = append(eps, e)
		}
	}
	return eps
}

func (c *etcdCluster) NewStore(endpoints []string) (Store, error) { return newEtcdStore(endpoints) }

func (c *etcdCluster) Close() {
	for _, p := range c.procs {
		p.kill()
	}
}

// ErrNoEtcd: the etcd baseline needs an etcd binary on PATH.
var ErrNoEtcd = errors.New("bench: etcd not found on PATH")

// ensureEtcd returns the path of etcd. The benchmark installs nothing:
// scripts/install-etcd.sh (run by `make bench`) installs Debian's
// etcd-server.
func ensureEtcd(_ context.Context, _ func(string, ...any)) (string, error) {
	p, err := lookPath("etcd")
	if err != nil {
		return "", fmt.Errorf("%w: run scripts/install-etcd.sh (as root) or put etcd on PATH, or --skip kv,failover", ErrNoEtcd)
	}
	return p, nil
}
