package integration

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestWALClusterSurvivesKill: three nodes started with --raft-log-store
// wal keep their Raft log in raft-wal (raft/wal, recorded in
// raft/log-store); the leader is SIGKILLed mid-way through acknowledged
// writes, the survivors keep every one and take more, and the killed node
// restarts on its wal data dir and catches up.
func TestWALClusterSurvivesKill(t *testing.T) {
	c := NewCluster(t, binPath, 3, "--raft-log-store", "wal")
	c.StartAll()
	leader := mustLeader(t, c, 20*time.Second)
	for i := range 20 {
		mustCLI(t, c, c.Procs[i%3], "kv", "put", "/wal/seq", fmt.Sprint(i))
	}
	c.Kill(leader)
	newLeader := mustLeader(t, c, 20*time.Second)
	t.Logf("leader %s SIGKILLed; new leader %s", leader.ID, newLeader.ID)
	if got := strings.TrimSpace(mustCLI(t, c, newLeader, "kv", "get", "/wal/seq")); got != "19" {
		t.Fatalf("last acknowledged write lost: /wal/seq = %q, want 19", got)
	}
	mustCLI(t, c, newLeader, "kv", "put", "/wal/after", "kill")

	c.Start(leader)
	waitFor(t, 30*time.Second, "the killed node to catch up on its wal", func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		out, _, err := c.CLI(ctx, leader, "kv", "get", "/wal/after", "--serializable")
		return err == nil && strings.TrimSpace(out) == "kill"
	})
	for _, p := range c.Procs {
		dir := filepath.Join(p.DataDir, "raft")
		if b, err := os.ReadFile(filepath.Join(dir, "log-store")); err != nil || strings.TrimSpace(string(b)) != "wal" {
			t.Fatalf("%s: log-store record %q, %v; want wal", p.ID, b, err)
		}
		if _, err := os.Stat(filepath.Join(dir, "wal")); err != nil {
			t.Fatalf("%s: no wal dir: %v", p.ID, err)
		}
		if _, err := os.Stat(filepath.Join(dir, "raft.db")); err == nil {
			t.Fatalf("%s: a wal node wrote raft.db", p.ID)
		}
	}
}

// TestLogStoreMigration is the documented migration of a node from boltdb
// to wal: its restart with --raft-log-store wal on its boltdb data dir is
// refused with an error naming both stores; stopped (it leaves the Raft
// configuration), wiped and started with wal and --join, it rejoins as a
// voter with every write, on raft-wal.
func TestLogStoreMigration(t *testing.T) {
	c := NewCluster(t, binPath, 3)
	c.StartAll()
	leader := mustLeader(t, c, 20*time.Second)
	for i := range 10 {
		mustCLI(t, c, c.Procs[i%3], "kv", "put", "/mig/seq", fmt.Sprint(i))
	}
	var p, other *Proc
	for _, x := range c.Procs {
		if x != leader && p == nil {
			p = x
		} else if x != leader {
			other = x
		}
	}
	if err := c.Stop(p); err != nil {
		t.Fatalf("graceful stop of %s: %v", p.ID, err)
	}
	waitFor(t, 30*time.Second, p.ID+" removed from the Raft configuration", func() bool {
		st := nodeStatus(t, c, other)
		return !contains(st.Voters, p.ID) && !contains(st.Nonvoters, p.ID)
	})

	p.Args = append(p.Args, "--raft-log-store", "wal")
	c.Start(p)
	select {
	case <-p.Exited():
	case <-time.After(20 * time.Second):
		t.Fatal("a node started with wal on its boltdb data dir kept running")
	}
	if log, _ := os.ReadFile(p.LogPath); !strings.Contains(string(log), "holds a boltdb log store") || !strings.Contains(string(log), "--raft-log-store boltdb") {
		t.Fatalf("the refusal does not name both stores:\n%s", lastBytes(string(log), 2000))
	}

	if err := os.RemoveAll(p.DataDir); err != nil {
		t.Fatal(err)
	}
	p.Args = dropFlag(p.Args, "--bootstrap-expect") // a joiner, as a new node
	mustCLI(t, c, other, "kv", "put", "/mig/seq", "after")
	c.Start(p)
	waitFor(t, 60*time.Second, p.ID+" a voter again, caught up on wal", func() bool {
		st := nodeStatus(t, c, other)
		if !contains(st.Voters, p.ID) {
			return false
		}
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		out, _, err := c.CLI(ctx, p, "kv", "get", "/mig/seq", "--serializable")
		return err == nil && strings.TrimSpace(out) == "after"
	})
	if b, err := os.ReadFile(filepath.Join(p.DataDir, "raft", "log-store")); err != nil || strings.TrimSpace(string(b)) != "wal" {
		t.Fatalf("%s after the migration: log-store %q, %v; want wal", p.ID, b, err)
	}
	mustCLI(t, c, p, "kv", "put", "/mig/seq", "through-wal-node")
	if got := strings.TrimSpace(mustCLI(t, c, leader, "kv", "get", "/mig/seq")); got != "through-wal-node" {
		t.Fatalf("write through the migrated node: %q", got)
	}
}

// dropFlag removes flag and its value from args.
func dropFlag(args []string, flag string) []string {
	var out []string
	for i := 0; i < len(args); i++ {
		if args[i] == flag {
			i++
			continue
		}
		out = append(out, args[i])
	}
	return out
}
