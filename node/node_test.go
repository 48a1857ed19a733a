package node

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/raftps/raftps/gossip"
	"github.com/raftps/raftps/internal/testing/localcluster"
	"github.com/raftps/raftps/internal/testing/testutil"
	"github.com/raftps/raftps/raftstore"
	"github.com/raftps/raftps/security"
)

// testConfig is a server-only node on free loopback ports in a temp dir.
func testConfig(t *testing.T, id string) Config {
	t.Helper()
	ports, err := localcluster.FreePorts(4)
	if err != nil {
		t.Fatal(err)
	}
	a := func(p int) string { return fmt.Sprintf("127.0.0.1:%d", p) }
	cfg := DefaultConfig()
	cfg.ID, cfg.DataDir = id, filepath.Join(t.TempDir(), id)
	cfg.GRPCAddr, cfg.RaftAddr, cfg.GossipAddr, cfg.HTTPAddr = a(ports[0]), a(ports[1]), a(ports[2]), a(ports[3])
	cfg.Roles = []string{gossip.RoleServer}
	cfg.Logger = testutil.Logger(t)
	return cfg
}

// mustOpen opens a node of cfg and waits for it to lead.
func mustOpen(t *testing.T, cfg Config) *Node {
	t.Helper()
	if cfg.TLS.Enabled() && cfg.GossipKeyringFile == "" && !cfg.InsecureGossip {
		cfg.GossipKeyringFile = filepath.Join(t.TempDir(), "gossip.keyring") // ErrNoGossipKeyring
		if err := security.NewKeyringFile(cfg.GossipKeyringFile); err != nil {
			t.Fatal(err)
		}
	}
	n, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := n.Open(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { n.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := n.Store().WaitForLeader(ctx); err != nil {
		t.Fatal(err)
	}
	return n
}

func TestConfigValidate(t *testing.T) {
	ok := DefaultConfig()
	ok.ID, ok.DataDir = "a", "d"
	if err := ok.Validate(); err != nil {
		t.Fatalf("DefaultConfig with ID and DataDir: %v", err)
	}
	with := func(f func(*Config)) Config {
		c := ok
		f(&c)
		return c
	}
	for _, tc := range []struct {
		name string
		cfg  Config
		want string
	}{
		{"no id", with(func(c *Config) { c.ID = "" }), "--id"},
		{"zone too long", with(func(c *Config) { c.Zone = strings.Repeat("z", MaxZoneLen+1) }), "--zone"},
		{"no data dir", with(func(c *Config) { c.DataDir = "" }), "--data-dir"},
		{"unknown role", with(func(c *Config) { c.Roles = []string{"server", "cook"} }), "cook"},
		{"no server role and nothing to join", with(func(c *Config) { c.Roles = []string{gossip.RoleTrainer} }), "--join"},
		{"unknown raft log store", with(func(c *Config) { c.RaftLogStore = "rocksdb" }), "--raft-log-store"},
		{"negative log verify interval", with(func(c *Config) { c.RaftLogVerifyInterval = -time.Second }), "--raft-log-verify-interval"},
		{"negative expect", with(func(c *Config) { c.BootstrapExpect = -1 }), "bootstrap-expect"},
		{"pserver lease ttl below 2s", with(func(c *Config) { c.PServerLeaseTTL = time.Second }), "--pserver-lease-ttl"},
		{"pserver lease ttl not whole seconds", with(func(c *Config) { c.PServerLeaseTTL = 2500 * time.Millisecond }), "--pserver-lease-ttl"},
		{"pserver lease ttl above an hour", with(func(c *Config) { c.PServerLeaseTTL = 2 * time.Hour }), "--pserver-lease-ttl"},
		{"pserver failover timeout below 10ms", with(func(c *Config) { c.PServerFailoverTimeout = 9 * time.Millisecond }), "--pserver-failover-timeout"},
		{"pserver failover timeout above a minute", with(func(c *Config) { c.PServerFailoverTimeout = 61 * time.Second }), "--pserver-failover-timeout"},
		{"negative pserver failover timeout", with(func(c *Config) { c.PServerFailoverTimeout = -time.Second }), "--pserver-failover-timeout"},
		{"election timeout below 5 heartbeats", with(func(c *Config) {
			c.HeartbeatInterval, c.ElectionTimeout = 100*time.Millisecond, 499*time.Millisecond
		}), "--election-timeout 499 ms should be at least 5 times --heartbeat-interval 100 ms"},
		{"election timeout above 50 s", with(func(c *Config) { c.ElectionTimeout = 50001 * time.Millisecond }), "--election-timeout 50001 is too long"},
		{"heartbeat interval not whole ms", with(func(c *Config) { c.HeartbeatInterval = 1500 * time.Microsecond }), "--heartbeat-interval"},
		{"election timeout below 10 ms", with(func(c *Config) {
			c.HeartbeatInterval, c.ElectionTimeout = time.Millisecond, 9*time.Millisecond
		}), "--election-timeout"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.cfg.Validate()
			if !errors.Is(err, ErrInvalidConfig) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Validate() = %v, want ErrInvalidConfig naming %q", err, tc.want)
			}
			if _, err := New(tc.cfg); !errors.Is(err, ErrInvalidConfig) {
				t.Fatalf("New() = %v, want ErrInvalidConfig", err)
			}
		})
	}
}

// TestRaftTimeouts: etcd's heartbeat interval and election timeout map
// onto hashicorp/raft's timeouts as RaftTimeouts documents, and the
// mapping always passes raftstore's (hashicorp/raft's) own checks.
func TestRaftTimeouts(t *testing.T) {
	ms := func(n int) time.Duration { return time.Duration(n) * time.Millisecond }
	for _, tc := range []struct {
		heartbeat, election             time.Duration
		wantHB, wantElection, wantLease time.Duration
	}{
		{0, 0, 10 * DefaultHeartbeatInterval, DefaultElectionTimeout, 10 * DefaultHeartbeatInterval},
		{ms(100), ms(1000), ms(1000), ms(1000), ms(1000)}, // etcd's defaults: exactly etcd's meaning
		{ms(100), ms(500), ms(500), ms(500), ms(500)},     // 5x: heartbeats every 50-100 ms
		{ms(100), ms(3000), ms(1000), ms(3000), ms(1000)}, // 30x: followers stand after 10 heartbeats
	} {
		hb, el, lease := RaftTimeouts(tc.heartbeat, tc.election)
		if hb != tc.wantHB || el != tc.wantElection || lease != tc.wantLease {
			t.Errorf("RaftTimeouts(%v, %v) = %v, %v, %v; want %v, %v, %v", tc.heartbeat, tc.election,
				hb, el, lease, tc.wantHB, tc.wantElection, tc.wantLease)
		}
		rc := raftstore.DefaultConfig()
		rc.ID, rc.DataDir, rc.RaftAddr = "n1", "d", "127.0.0.1:0"
		rc.HeartbeatTimeout, rc.ElectionTimeout, rc.LeaderLeaseTimeout = hb, el, lease
		if err := rc.Validate(); err != nil {
			t.Errorf("RaftTimeouts(%v, %v): raftstore refuses it: %v", tc.heartbeat, tc.election, err)
		}
	}
}

// TestNodeOpenReadyClose: a single server bootstraps, leads, answers
// /healthz and /readyz, and Close is safe twice.
func TestNodeOpenReadyClose(t *testing.T) {
	n := mustOpen(t, testConfig(t, "n1"))
	if st := n.Store().Stats(); st.LeaderID != "n1" {
		t.Fatalf("leader %q, want n1", st.LeaderID)
	}
	// Ready once the FSM has applied what is committed (just after the
	// election it may not have yet).
	deadline := time.Now().Add(10 * time.Second)
	for !ready(n.HTTPAddr()) {
		if time.Now().After(deadline) {
			t.Fatal("/readyz not 200 within 10 s of leading")
		}
		time.Sleep(20 * time.Millisecond)
	}
	for _, path := range []string{"/healthz", "/readyz", "/metrics"} {
		resp, err := http.Get("http://" + n.HTTPAddr() + path)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("%s: %d %s", path, resp.StatusCode, body)
		}
		if path == "/metrics" && !strings.Contains(string(body), "raftps_gossip_members") {
			t.Fatalf("/metrics lacks the node collector:\n%.500s", body)
		}
	}
	if err := n.Close(); err != nil {
		t.Fatalf("close: %v", err)
	}
	if err := n.Close(); err != nil {
		t.Fatalf("second close: %v", err)
	}
}

// TestRunStopsOnCancel: Run serves until its context ends, then closes
// the node (what SIGTERM does to `raftps node`), and the data dir can be
// opened again by the next process.
func TestRunStopsOnCancel(t *testing.T) {
	cfg := testConfig(t, "n1")
	n, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- n.Run(ctx) }()
	deadline := time.Now().Add(20 * time.Second)
	for !ready(cfg.HTTPAddr) {
		if time.Now().After(deadline) {
			t.Fatal("not ready within 20 s")
		}
		time.Sleep(50 * time.Millisecond)
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Run after cancel: %v", err)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("Run did not return within 15 s of its context ending")
	}
	// The same data dir and ID restart without bootstrapping again.
	m := mustOpen(t, cfg)
	if st := m.Store().Stats(); st.LeaderID != "n1" {
		t.Fatalf("restarted: leader %q", st.LeaderID)
	}
}

// ready reports whether the node's /readyz at addr answers 200.
func ready(addr string) bool {
	resp, err := http.Get("http://" + addr + "/readyz")
	if err != nil {
		return false
	}
	resp.Body.Close()
	return resp.StatusCode == http.StatusOK
}
