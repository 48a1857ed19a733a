package raftstore

import (
	"bytes"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"github.com/raftps/raftps/fsm"
)

// fsmSnapshot is the FSM snapshot of s (what `raftps snapshot save` carries).
func fsmSnapshot(tb testing.TB, s *Store) []byte {
	tb.Helper()
	snap, err := s.FSM().Snapshot()
	if err != nil {
		tb.Fatal(err)
	}
	sink := &memSink{}
	if err := snap.Persist(sink); err != nil {
		tb.Fatal(err)
	}
	return sink.Bytes()
}

type memSink struct{ bytes.Buffer }

func (*memSink) ID() string    { return "test" }
func (*memSink) Cancel() error { return nil }
func (*memSink) Close() error  { return nil }

// freeAddrs returns n loopback addresses with ports free right now.
func freeAddrs(tb testing.TB, n int) []string {
	tb.Helper()
	var out []string
	var ls []net.Listener
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			tb.Fatal(err)
		}
		ls = append(ls, l)
		out = append(out, l.Addr().String())
	}
	for _, l := range ls {
		l.Close()
	}
	return out
}

// A snapshot seeds a new 3-server cluster that holds every key of it; a
// corrupt snapshot and a used data dir are refused and write nothing.
func TestSeedFromSnapshot(t *testing.T) { forEachLogStore(t, testSeedFromSnapshot) }

func testSeedFromSnapshot(t *testing.T) {
	ctx := ctxT(t, 30*time.Second)
	src := mustCluster(t, 1)
	l := src.leader(ctx)
	for i := range 50 {
		mustPut(ctx, t, l, fmt.Sprintf("/k/%02d", i), fmt.Sprintf("v%d", i))
	}
	snap := fsmSnapshot(t, l)
	wantRev := l.FSM().Revision()

	bad := bytes.Clone(snap)
	bad[len(bad)/2] ^= 0xff
	badDir := t.TempDir()
	if _, err := SeedFromSnapshot(SeedConfig{ID: "r1", DataDir: badDir, Servers: []raft.Server{{ID: "r1", Address: "127.0.0.1:1"}}}, bad); !errors.Is(err, fsm.ErrMalformed) {
		t.Fatalf("corrupt snapshot: %v, want ErrMalformed", err)
	}
	if _, err := os.Stat(filepath.Join(badDir, "raft")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("a refused snapshot wrote %s/raft: %v", badDir, err)
	}

	addrs := freeAddrs(t, 3)
	var servers []raft.Server
	for i, a := range addrs {
		servers = append(servers, raft.Server{Suffrage: raft.Voter, ID: raft.ServerID(fmt.Sprintf("r%d", i+1)), Address: raft.ServerAddress(a)})
	}
	c := &cluster{tb: t}
	for i, a := range addrs {
		id, dir := fmt.Sprintf("r%d", i+1), t.TempDir()
		info, err := SeedFromSnapshot(SeedConfig{ID: id, DataDir: dir, Servers: servers, LogStore: logStoreOf(t)}, snap)
		if err != nil {
			t.Fatal(err)
		}
		if info.Revision != wantRev || info.Keys != 50 {
			t.Fatalf("seed info %+v, want revision %d and 50 keys", info, wantRev)
		}
		if _, err := SeedFromSnapshot(SeedConfig{ID: id, DataDir: dir, Servers: servers, LogStore: logStoreOf(t)}, snap); !errors.Is(err, ErrDataDirInUse) {
			t.Fatalf("second seed into %s: %v, want ErrDataDirInUse", dir, err)
		}
		cfg := testConfig(t, id, dir)
		cfg.RaftAddr = a
		s, err := New(cfg, fsm.New(nil), directForwarder{c})
		if err != nil {
			t.Fatal(err)
		}
		if err := s.Open(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		c.stores = append(c.stores, s)
	}
	nl := c.leader(ctx)
	mustPut(ctx, t, nl, "/after", "restore")
	var cids []string
	for _, s := range c.live() {
		if err := s.LinearizableRead(ctx); err != nil {
			t.Fatal(err)
		}
		for i := range 50 {
			v, ok, err := get(ctx, s, fmt.Sprintf("/k/%02d", i), true)
			if err != nil || !ok || v != fmt.Sprintf("v%d", i) {
				t.Fatalf("%s: /k/%02d = %q, %v, %v", s.ID(), i, v, ok, err)
			}
		}
		if s.FSM().Revision() != wantRev+1 {
			t.Fatalf("%s: revision %d, want %d", s.ID(), s.FSM().Revision(), wantRev+1)
		}
		cids = append(cids, s.ClusterID())
	}
	if cids[0] == "" || cids[0] != cids[1] || cids[1] != cids[2] {
		t.Fatalf("cluster ids %q: want one, non-empty", cids)
	}
}

// With two of three servers gone for good, the survivor restarted with
// ForceNewCluster leads alone with every write it had, and grows back.
func TestForceNewCluster(t *testing.T) { forEachLogStore(t, testForceNewCluster) }

func testForceNewCluster(t *testing.T) {
	ctx := ctxT(t, 30*time.Second)
	c := mustCluster(t, 3)
	l := c.leader(ctx)
	for i := range 30 {
		mustPut(ctx, t, l, fmt.Sprintf("/k/%02d", i), "v")
	}
	survivor := c.follower(ctx)
	if err := survivor.LinearizableRead(ctx); err != nil {
		t.Fatal(err)
	}
	wantRev := survivor.FSM().Revision()
	var dir, addr string
	for i, s := range c.stores {
		if s == survivor {
			dir = c.dirs[i]
		}
	}
	addr = survivor.Addr()
	for _, s := range c.live() {
		c.crash(s)
	}

	// Without the flag the survivor cannot elect itself.
	cfg := testConfig(t, survivor.ID(), dir)
	cfg.RaftAddr = addr
	c2 := &cluster{tb: t}
	s, err := New(cfg, fsm.New(nil), directForwarder{c2})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Open(); err != nil {
		t.Fatal(err)
	}
	short := ctxT(t, 3*time.Second)
	if err := s.WaitForLeader(short); err == nil {
		t.Fatal("a lone survivor of 3 elected a leader without --force-new-cluster")
	}
	s.Close()

	cfg.ForceNewCluster = true
	s, err = New(cfg, fsm.New(nil), directForwarder{c2})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Open(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	c2.stores = append(c2.stores, s)
	if c2.leader(ctx) != s {
		t.Fatal("survivor is not the leader")
	}
	if got := s.FSM().Revision(); got != wantRev {
		t.Fatalf("revision after recovery %d, want %d", got, wantRev)
	}
	for i := range 30 {
		if v, ok, err := get(ctx, s, fmt.Sprintf("/k/%02d", i), false); err != nil || !ok || v != "v" {
			t.Fatalf("/k/%02d = %q, %v, %v", i, v, ok, err)
		}
	}
	// Grow back: a new server joins and replicates everything.
	ncfg := testConfig(t, "m2", t.TempDir())
	m2, err := New(ncfg, fsm.New(nil), directForwarder{c2})
	if err != nil {
		t.Fatal(err)
	}
	if err := m2.Open(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m2.Close() })
	c2.mu.Lock()
	c2.stores = append(c2.stores, m2)
	c2.mu.Unlock()
	if err := s.Join(ctx, "m2", m2.Addr(), true); err != nil {
		t.Fatal(err)
	}
	mustPut(ctx, t, s, "/after", "grow")
	if err := m2.LinearizableRead(ctx); err != nil {
		t.Fatal(err)
	}
	if v, ok, err := get(ctx, m2, "/k/29", true); err != nil || !ok || v != "v" {
		t.Fatalf("joined server: /k/29 = %q, %v, %v", v, ok, err)
	}
	servers, err := s.Configuration()
	if err != nil || len(servers) != 2 {
		t.Fatalf("configuration %v, %v; want 2 voters", servers, err)
	}
}
