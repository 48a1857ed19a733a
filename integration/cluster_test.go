package integration

import (
	"context"
	"encoding/json"
	"os"
	"strings"
	"testing"
	"time"

	pb "github.com/raftps/raftps/api/raftpspb"
	"github.com/raftps/raftps/schema"
)

var binPath string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "raftps-bin-")
	if err != nil {
		panic(err)
	}
	binPath, err = BuildBinary(dir)
	if err != nil {
		os.Stderr.WriteString(err.Error() + "\n")
		os.RemoveAll(dir)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

func mustLeader(t *testing.T, c *Cluster, within time.Duration) *Proc {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), within)
	defer cancel()
	l, err := c.Leader(ctx)
	if err != nil {
		t.Fatalf("leader: %v", err)
	}
	return l
}

func mustCLI(t *testing.T, c *Cluster, p *Proc, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	out, errOut, err := c.CLI(ctx, p, args...)
	if err != nil {
		t.Fatalf("raftps %s via %s: %v\nstdout: %s\nstderr: %s", strings.Join(args, " "), p.ID, err, out, errOut)
	}
	return out
}

type statusJSON struct {
	ID           string   `json:"id"`
	Leader       string   `json:"leader"`
	Term         uint64   `json:"term"`
	CommitIndex  uint64   `json:"commit_index"`
	AppliedIndex uint64   `json:"applied_index"`
	Voters       []string `json:"voters"`
	Nonvoters    []string `json:"nonvoters"`
}

func nodeStatus(t *testing.T, c *Cluster, p *Proc) statusJSON {
	t.Helper()
	var st statusJSON
	if err := json.Unmarshal([]byte(mustCLI(t, c, p, "status", "-o", "json")), &st); err != nil {
		t.Fatalf("status json: %v", err)
	}
	return st
}

func waitFor(t *testing.T, within time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(within)
	for time.Now().Before(deadline) {
		if cond() {
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("timed out after %v waiting for %s", within, what)
}

// TestClusterLifecycle is issue 2's real-process scenario: three nodes with
// --join and --bootstrap-expect 3; a put through node 3; SIGKILL the leader;
// a get from a survivor; restart with the same command line; a fourth node
// joins; stopped gracefully it leaves the Raft configuration.
func TestClusterLifecycle(t *testing.T) {
	c := NewCluster(t, binPath, 3)
	c.StartAll()
	leader := mustLeader(t, c, 20*time.Second)
	t.Logf("leader: %s", leader.ID)

	n3 := c.Proc("n3")
	if got := mustCLI(t, c, n3, "kv", "put", "/e2e/a", "1"); strings.TrimSpace(got) != "OK" {
		t.Fatalf("put: %q", got)
	}
	for i := 0; i < 20; i++ {
		mustCLI(t, c, c.Procs[i%3], "kv", "put", "/e2e/seq", string(rune('a'+i)))
	}

	killedAt := time.Now()
	c.Kill(leader)
	// A write sent at once, through every endpoint (the dead one included),
	// waits for the next leader instead of failing: the follower that
	// forwards it finds the old leader gone and retries on the new one.
	var all []string
	for _, p := range c.Procs {
		all = append(all, p.GRPC)
	}
	survivorOf := func() *Proc {
		for _, p := range c.Procs {
			if p.Running() {
				return p
			}
		}
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	out, errOut, err := c.CLI(ctx, survivorOf(), "--endpoints", strings.Join(all, ","), "kv", "put", "/e2e/during", "x")
	cancel()
	if err != nil {
		t.Fatalf("put right after the leader kill failed: %v\n%s%s", err, out, errOut)
	}
	t.Logf("put sent right after the leader kill acknowledged %v after the kill", time.Since(killedAt))
	newLeader := mustLeader(t, c, 10*time.Second)
	t.Logf("leader %s SIGKILLed; new leader %s after %v", leader.ID, newLeader.ID, time.Since(killedAt))
	var survivor *Proc
	for _, p := range c.Procs {
		if p.Running() {
			survivor = p
			break
		}
	}
	if got := strings.TrimSpace(mustCLI(t, c, survivor, "kv", "get", "/e2e/a")); got != "1" {
		t.Fatalf("get after leader kill: %q, want 1", got)
	}
	if got := strings.TrimSpace(mustCLI(t, c, survivor, "kv", "get", "/e2e/seq")); got != "t" {
		t.Fatalf("last acknowledged write lost: got %q, want t", got)
	}
	mustCLI(t, c, survivor, "kv", "put", "/e2e/b", "2")

	// Restart the killed node with the same command line and data dir.
	c.Start(leader)
	waitFor(t, 20*time.Second, "restarted node to catch up", func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		out, _, err := c.CLI(ctx, leader, "kv", "get", "/e2e/b", "--serializable")
		return err == nil && strings.TrimSpace(out) == "2"
	})

	// A fourth node joins with --join.
	n4 := c.AddProc()
	joinAt := time.Now()
	c.Start(n4)
	waitFor(t, 30*time.Second, "n4 in the Raft configuration", func() bool {
		st := nodeStatus(t, c, survivor)
		return contains(st.Voters, "n4") || contains(st.Nonvoters, "n4")
	})
	t.Logf("n4 in the Raft configuration %v after start", time.Since(joinAt))
	if got := strings.TrimSpace(mustCLI(t, c, n4, "kv", "get", "/e2e/a")); got != "1" {
		t.Fatalf("get via n4: %q", got)
	}

	// Stopped gracefully, it leaves the configuration.
	stopAt := time.Now()
	if err := c.Stop(n4); err != nil {
		t.Fatalf("graceful stop of n4: %v", err)
	}
	waitFor(t, 30*time.Second, "n4 removed from the Raft configuration", func() bool {
		st := nodeStatus(t, c, survivor)
		return !contains(st.Voters, "n4") && !contains(st.Nonvoters, "n4")
	})
	t.Logf("n4 stopped gracefully and removed from the configuration %v after SIGTERM", time.Since(stopAt))
}

func contains(s []string, x string) bool {
	for _, v := range s {
		if v == x {
			return true
		}
	}
	return false
}

// TestBadStartup: a node started on another node's data dir, or with an id
// that is already in use, refuses to start with a clear error.
func TestBadStartup(t *testing.T) {
	c := NewCluster(t, binPath, 1)
	c.StartAll()
	mustLeader(t, c, 20*time.Second)
	mustCLI(t, c, c.Procs[0], "kv", "put", "/bad/a", "1")

	// A second process with --id n1 joining the running n1.
	dup := c.AddProc()
	dup.Args = replaceFlag(dup.Args, "--id", "n1")
	c.Start(dup)
	select {
	case <-dup.Exited():
	case <-time.After(20 * time.Second):
		t.Fatal("node with a duplicate --id kept running")
	}
	if log, _ := os.ReadFile(dup.LogPath); !strings.Contains(string(log), "already used") {
		t.Fatalf("duplicate id error is not clear:\n%s", log)
	}
	c.Procs = c.Procs[:1]
	if got := strings.TrimSpace(mustCLI(t, c, c.Procs[0], "kv", "get", "/bad/a")); got != "1" {
		t.Fatalf("n1 damaged by the duplicate: %q", got)
	}
	c.Stop(c.Procs[0])

	// n2 pointed at n1's data dir.
	p := c.AddProc()
	p.Args = replaceFlag(p.Args, "--data-dir", c.Procs[0].DataDir)
	c.Start(p)
	select {
	case <-p.Exited():
	case <-time.After(15 * time.Second):
		t.Fatal("node on another node's data dir kept running")
	}
	log, _ := os.ReadFile(p.LogPath)
	if !strings.Contains(string(log), "data dir") {
		t.Fatalf("error does not name the data dir problem:\n%s", log)
	}
	// The original node still has its data.
	c.Start(c.Procs[0])
	mustLeader(t, c, 20*time.Second)
	if got := strings.TrimSpace(mustCLI(t, c, c.Procs[0], "kv", "get", "/bad/a")); got != "1" {
		t.Fatalf("data damaged: %q", got)
	}
}

func replaceFlag(args []string, flag, val string) []string {
	out := append([]string(nil), args...)
	for i := range out {
		if out[i] == flag && i+1 < len(out) {
			out[i+1] = val
		}
	}
	return out
}

// TestFollowerForwarding: writes and linearizable reads sent to any node
// succeed; a value over the limit is InvalidArgument and changes nothing.
func TestFollowerForwarding(t *testing.T) {
	c := NewCluster(t, binPath, 3)
	c.StartAll()
	leader := mustLeader(t, c, 20*time.Second)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, p := range c.Procs {
		if p == leader {
			continue
		}
		cl := c.Client(p)
		if _, err := cl.KV.Put(ctx, &pb.PutRequest{Key: []byte("/fwd/" + p.ID), Value: []byte(p.ID)}); err != nil {
			t.Fatalf("put via follower %s: %v", p.ID, err)
		}
		resp, err := cl.KV.Range(ctx, &pb.RangeRequest{Key: []byte("/fwd/"), RangeEnd: schema.PrefixEnd([]byte("/fwd/"))})
		if err != nil || len(resp.Kvs) == 0 {
			t.Fatalf("linearizable range via follower %s: %v %v", p.ID, resp, err)
		}
		big := make([]byte, 2<<20)
		_, err = cl.KV.Put(ctx, &pb.PutRequest{Key: []byte("/fwd/big"), Value: big})
		if code := grpcCode(err); code != "InvalidArgument" {
			t.Fatalf("oversized put via %s: code %s (%v), want InvalidArgument", p.ID, code, err)
		}
	}
}

// TestNonServerNode: a node without the server role joins as a Raft
// non-voter, serves reads and forwards writes like any node, never counts
// toward quorum, and leaves the configuration when stopped.
func TestNonServerNode(t *testing.T) {
	c := NewCluster(t, binPath, 3)
	c.StartAll()
	mustLeader(t, c, 20*time.Second)
	n4 := c.AddProc()
	n4.Args = append(n4.Args, "--roles", "pserver,trainer")
	c.Start(n4)
	waitFor(t, 30*time.Second, "n4 as a non-voter", func() bool {
		st := nodeStatus(t, c, c.Procs[0])
		return contains(st.Nonvoters, "n4") && !contains(st.Voters, "n4") && len(st.Voters) == 3
	})
	mustCLI(t, c, n4, "kv", "put", "/nonvoter/a", "1")
	if got := strings.TrimSpace(mustCLI(t, c, c.Procs[1], "kv", "get", "/nonvoter/a")); got != "1" {
		t.Fatalf("write through the non-voter: %q", got)
	}
	if got := strings.TrimSpace(mustCLI(t, c, n4, "kv", "get", "/nonvoter/a")); got != "1" {
		t.Fatalf("linearizable read on the non-voter: %q", got)
	}
	if err := c.Stop(n4); err != nil {
		t.Fatalf("graceful stop of n4: %v", err)
	}
	waitFor(t, 30*time.Second, "n4 removed", func() bool {
		st := nodeStatus(t, c, c.Procs[0])
		return !contains(st.Nonvoters, "n4")
	})
}
