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
