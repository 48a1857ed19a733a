package raftstore

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/raft"
	"google.golang.org/protobuf/proto"

	pb "github.com/raftps/raftps/api/raftpspb"
	"github.com/raftps/raftps/fsm"
	"github.com/raftps/raftps/internal/testing/testutil"
)

// testLogger logs to tb (RAFTPS_TEST_LOG sets the level; default warn,
// error in benchmarks).
func testLogger(tb testing.TB) *slog.Logger {
	tb.Helper()
	level := slog.LevelWarn
	if _, ok := tb.(*testing.B); ok {
		level = slog.LevelError
	}
	return testutil.LoggerLevel(tb, level)
}

// cluster is n in-process stores on loopback TCP transports; stores[i] is
// nil once crashed.
type cluster struct {
	tb     testing.TB
	mu     sync.Mutex
	stores []*Store
	dirs   []string
}

// directForwarder calls the leader store's *Local methods directly, as the
// node's gRPC Internal service would. A crashed or closed target reports
// ErrNotLeader (it certainly did not apply the command).
type directForwarder struct{ c *cluster }

func (f directForwarder) target(id string) (*Store, error) {
	f.c.mu.Lock()
	defer f.c.mu.Unlock()
	for _, s := range f.c.stores {
		if s != nil && s.cfg.ID == id {
			return s, nil
		}
	}
	return nil, fmt.Errorf("%w: %s is down", ErrNotLeader, id)
}

func notLeaderIfClosed(err error) error {
	if errors.Is(err, ErrNotOpen) {
		return fmt.Errorf("%w: %w", ErrNotLeader, err)
	}
	return err
}

func (f directForwarder) ForwardApply(ctx context.Context, id, _ string, cmd *pb.Command) (*pb.Result, error) {
	s, err := f.target(id)
	if err != nil {
		return nil, err
	}
	res, err := s.ApplyLocal(ctx, cmd)
	if res != nil && res.Error != nil {
		return res, nil // the Result carries the error, as over gRPC
	}
	return res, notLeaderIfClosed(err)
}

func (f directForwarder) ReadIndex(ctx context.Context, id, _ string) (uint64, error) {
	s, err := f.target(id)
	if err != nil {
		return 0, err
	}
	i, err := s.ReadIndexLocal(ctx)
	return i, notLeaderIfClosed(err)
}

func (f directForwarder) LeaseKeepAlive(ctx context.Context, id, _ string, lease int64) (int64, error) {
	s, err := f.target(id)
	if err != nil {
		return 0, err
	}
	ttl, err := s.LeaseKeepAliveLocal(ctx, lease)
	return ttl, notLeaderIfClosed(err)
}

func (f directForwarder) LeaseTimeToLive(ctx context.Context, id, _ string, lease int64) (int64, error) {
	s, err := f.target(id)
	if err != nil {
		return 0, err
	}
	ttl, err := s.LeaseTimeToLiveLocal(ctx, lease)
	return ttl, notLeaderIfClosed(err)
}

// forEachLogStore runs test once per Raft log store, as subtests named
// after the store ("boltdb", "wal"); testConfig gives every store such a
// subtest starts (directly or through mustCluster) that log store.
func forEachLogStore(t *testing.T, test func(t *testing.T)) {
	for _, ls := range LogStores() {
		t.Run(ls, test)
	}
}

// logStoreOf is the log store of the forEachLogStore subtest tb runs in
// (or under): the last element of its name that names a store; "" (the
// default, boltdb) outside one.
func logStoreOf(tb testing.TB) string {
	parts := strings.Split(tb.Name(), "/")
	for i := len(parts) - 1; i > 0; i-- {
		if slices.Contains(LogStores(), parts[i]) {
			return parts[i]
		}
	}
	return ""
}

func testConfig(tb testing.TB, id, dir string) Config {
	cfg := DefaultConfig()
	cfg.ID = id
	cfg.DataDir = dir
	cfg.LogStore = logStoreOf(tb)
	cfg.RaftAddr = "127.0.0.1:0"
	cfg.Logger = testLogger(tb).With("node", id)
	return cfg
}

// mustCluster starts n stores: n1 bootstraps, the others join through it.
func mustCluster(tb testing.TB, n int) *cluster {
	tb.Helper()
	c := &cluster{tb: tb}
	fwd := directForwarder{c}
	for i := 0; i < n; i++ {
		id := fmt.Sprintf("n%d", i+1)
		dir := tb.TempDir()
		cfg := testConfig(tb, id, dir)
		cfg.Bootstrap = i == 0
		s, err := New(cfg, fsm.New(nil), fwd)
		if err != nil {
			tb.Fatal(err)
		}
		if err := s.Open(); err != nil {
			tb.Fatal(err)
		}
		c.mu.Lock()
		c.stores = append(c.stores, s)
		c.dirs = append(c.dirs, dir)
		c.mu.Unlock()
		tb.Cleanup(func() { s.Close() })
		if i == 0 {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			if err := s.WaitForLeader(ctx); err != nil {
				cancel()
				tb.Fatal(err)
			}
			cancel()
			continue
		}
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		join(ctx, tb, c.leader, id, s.Addr())
		cancel()
	}
	// Every store knows the leader and has caught up.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, s := range c.live() {
		if err := s.LinearizableRead(ctx); err != nil {
			tb.Fatalf("%s: %v", s.cfg.ID, err)
		}
	}
	return c
}

// batchStats sums BatchStats over the live stores (the leader may change).
func (c *cluster) batchStats() (entries, cmds uint64) {
	for _, s := range c.live() {
		e, n := s.BatchStats()
		entries, cmds = entries+e, cmds+n
	}
	return entries, cmds
}

func (c *cluster) live() []*Store {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []*Store
	for _, s := range c.stores {
		if s != nil {
			out = append(out, s)
		}
	}
	return out
}

// leader waits for a live store that is leader.
func (c *cluster) leader(ctx context.Context) *Store {
	c.tb.Helper()
	for {
		for _, s := range c.live() {
			if s.IsLeader() {
				return s
			}
		}
		select {
		case <-ctx.Done():
			c.tb.Fatal("no leader")
		case <-time.After(5 * time.Millisecond):
		}
	}
}

func (c *cluster) follower(ctx context.Context) *Store {
	c.tb.Helper()
	l := c.leader(ctx)
	for _, s := range c.live() {
		if s != l {
			return s
		}
	}
	c.tb.Fatal("no follower")
	return nil
}

// crash stops s as a SIGKILL would look to its peers: Raft stops without
// handing over leadership, then the transport and bolt close.
func (c *cluster) crash(s *Store) {
	c.mu.Lock()
	for i, x := range c.stores {
		if x == s {
			c.stores[i] = nil
		}
	}
	c.mu.Unlock()
	s.Raft().Shutdown().Error()
	if err := s.Close(); err != nil {
		c.tb.Logf("close crashed %s: %v", s.cfg.ID, err)
	}
}

func putCmd(tb testing.TB, key, value string, lease int64) *pb.Command {
	tb.Helper()
	cmd, err := fsm.NewCommand(pb.CommandType_COMMAND_PUT, &pb.PutRequest{Key: []byte(key), Value: []byte(value), Lease: lease})
	if err != nil {
		tb.Fatal(err)
	}
	return cmd
}

// put writes key=value through s. A Put is idempotent for the final state,
// so it is retried when a leader change leaves its outcome unknown (the
// shared test machine can stall a leader past its lease).
func put(ctx context.Context, tb testing.TB, s *Store, key, value string) (*pb.Result, error) {
	return applyRetry(ctx, s, putCmd(tb, key, value, 0))
}

func applyRetry(ctx context.Context, s *Store, cmd *pb.Command) (*pb.Result, error) {
	for {
		res, err := s.Apply(ctx, cmd)
		if !errors.Is(err, raft.ErrLeadershipLost) || ctx.Err() != nil {
			return res, err
		}
	}
}

func mustPut(ctx context.Context, tb testing.TB, s *Store, key, value string) int64 {
	tb.Helper()
	res, err := put(ctx, tb, s, key, value)
	if err != nil {
		tb.Fatalf("put %s on %s: %v", key, s.cfg.ID, err)
	}
	return res.Revision
}

// get reads key: linearizable unless serializable.
func get(ctx context.Context, s *Store, key string, serializable bool) (string, bool, error) {
	resp, err := s.Range(ctx, &pb.RangeRequest{Key: []byte(key), Serializable: serializable})
	if err != nil {
		return "", false, err
	}
	if len(resp.Kvs) == 0 {
		return "", false, nil
	}
	return string(resp.Kvs[0].Value), true, nil
}

func mustGrant(ctx context.Context, tb testing.TB, s *Store, ttl int64) (id, granted int64) {
	tb.Helper()
	cmd, err := fsm.NewCommand(pb.CommandType_COMMAND_LEASE_GRANT, &pb.LeaseGrantRequest{Ttl: ttl})
	if err != nil {
		tb.Fatal(err)
	}
	res, err := applyRetry(ctx, s, cmd)
	if err != nil {
		tb.Fatalf("lease grant: %v", err)
	}
	var resp pb.LeaseGrantResponse
	if err := proto.Unmarshal(res.Payload, &resp); err != nil {
		tb.Fatal(err)
	}
	return resp.Id, resp.Ttl
}

func ctxT(tb testing.TB, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	tb.Cleanup(cancel)
	return ctx
}

// join adds id as a voter through the current leader, again after a
// leader change (Join is idempotent): on the shared, loaded test machine a
// leader can lose its term while committing the configuration change.
func join(ctx context.Context, tb testing.TB, leader func(context.Context) *Store, id, addr string) {
	tb.Helper()
	for {
		err := leader(ctx).Join(ctx, id, addr, true)
		if err == nil {
			return
		}
		if !errors.Is(err, ErrNotLeader) && !errors.Is(err, raft.ErrLeadershipLost) || ctx.Err() != nil {
			tb.Fatalf("join %s: %v", id, err)
		}
		tb.Logf("join %s: %v; retrying through the next leader", id, err)
		time.Sleep(50 * time.Millisecond)
	}
}
