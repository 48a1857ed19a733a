package integration

import (
	"fmt"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestDataDirInUse (issue 12 item 7): a second `raftps node` on a data dir
// that a running node holds exits at once, naming the data dir and the
// process holding it, and leaves the first node serving. It used to wait
// forever in bolt's flock and ignore SIGTERM.
func TestDataDirInUse(t *testing.T) {
	c := NewCluster(t, binPath, 1)
	c.StartAll()
	first := c.Procs[0]
	mustLeader(t, c, 20*time.Second)
	mustCLI(t, c, first, "kv", "put", "/lock/a", "1")

	// The same command line but on other ports: the start a user makes by
	// mistake (a second terminal, a service manager restarting too early).
	dup := c.AddProc()
	dup.Args = replaceFlag(replaceFlag(dup.Args, "--id", first.ID), "--data-dir", first.DataDir)
	start := time.Now()
	c.Start(dup)
	select {
	case <-dup.Exited():
	case <-time.After(10 * time.Second):
		dup.Signal(syscall.SIGTERM)
		select {
		case <-dup.Exited():
			t.Fatal("a node on a data dir in use kept running for 10 s (it exited on SIGTERM)")
		case <-time.After(5 * time.Second):
			t.Fatal("a node on a data dir in use kept running for 10 s and ignored SIGTERM")
		}
	}
	elapsed := time.Since(start)
	t.Logf("second node exited %v after its start", elapsed)
	if dup.ExitErr() == nil {
		t.Error("second node exited 0, want an error exit")
	}
	log, _ := os.ReadFile(dup.LogPath)
	for _, want := range []string{first.DataDir, fmt.Sprintf("process %d", first.Pid()), "data dir in use"} {
		if !strings.Contains(string(log), want) {
			t.Errorf("the error does not name %q:\n%s", want, log)
		}
	}
	// Process start-up included; the refusal itself takes under a millisecond.
	if elapsed > time.Second {
		t.Errorf("second node took %v to exit, want under 1 s", elapsed)
	}
	c.Procs = c.Procs[:1]
	if got := strings.TrimSpace(mustCLI(t, c, first, "kv", "get", "/lock/a")); got != "1" {
		t.Fatalf("first node disturbed: %q", got)
	}
}

// TestSIGTERMWhileWaitingForPeers: a node waiting for --bootstrap-expect
// peers that never come stops on SIGTERM, cleanly and at once.
func TestSIGTERMWhileWaitingForPeers(t *testing.T) {
	c := NewCluster(t, binPath, 3)
	p := c.Procs[0] // n2 and n3 are never started
	c.Start(p)
	deadline := time.Now().Add(20 * time.Second)
	for {
		log, _ := os.ReadFile(p.LogPath)
		if strings.Contains(string(log), "node started") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("node did not start within 20 s:\n%s", log)
		}
		time.Sleep(50 * time.Millisecond)
	}
	start := time.Now()
	p.Signal(syscall.SIGTERM)
	select {
	case <-p.Exited():
	case <-time.After(10 * time.Second):
		t.Fatal("node waiting for peers ignored SIGTERM for 10 s")
	}
	t.Logf("exited %v after SIGTERM", time.Since(start))
	if err := p.ExitErr(); err != nil {
		t.Fatalf("exit after SIGTERM: %v, want 0", err)
	}
}
