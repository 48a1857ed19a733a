package integration

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	pb "github.com/raftps/raftps/api/raftpspb"
	"github.com/raftps/raftps/internal/testing/localcluster"
	"github.com/raftps/raftps/raftstore/client"
)

// dropKeyring runs p's gossip in the clear (localcluster.SetKeyring nil:
// --insecure-gossip), as the README's set-up did before a TLS node
// required a keyring.
func dropKeyring(t *testing.T, p *Proc) {
	t.Helper()
	if err := localcluster.SetKeyring(p, nil); err != nil {
		t.Fatal(err)
	}
}

// raftMembers returns the voters and non-voters the leader's status
// reports, asked through every running node.
func raftMembers(t *testing.T, c *Cluster) []string {
	t.Helper()
	cl := c.Client()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	st, err := cl.Cluster.Status(ctx, &pb.StatusRequest{})
	if err != nil {
		return nil
	}
	return append(slices.Clone(st.Voters), st.Nonvoters...)
}

// startRogue starts `raftps node --insecure --id rogue --join <the
// cluster's gossip addresses>`: no certificate, no keyring.
func startRogue(t *testing.T, c *Cluster) *Proc {
	t.Helper()
	rogue, err := localcluster.Add(c.Bin, c.Dir, c.Procs, "--insecure")
	if err != nil {
		t.Fatal(err)
	}
	// Its own name and data dir (c.AddProc makes the next n<i>).
	rogue.ID, rogue.DataDir, rogue.LogPath = "rogue", filepath.Join(c.Dir, "rogue"), filepath.Join(c.Dir, "rogue.log")
	for i, a := range rogue.Args {
		switch a {
		case "--id":
			rogue.Args[i+1] = rogue.ID
		case "--data-dir":
			rogue.Args[i+1] = rogue.DataDir
		}
	}
	if err := rogue.Start(); err != nil {
		t.Fatal(err)
	}
	return rogue
}

// TestRogueOutOfKeyringGossip is the rest of issue 32's hole 3: a TLS
// node without a gossip keyring refuses to start (naming `raftps keyring
// generate` and --insecure-gossip; before the fix it started with gossip
// in the clear, which any process that reaches the gossip port may join
// and report members dead through), and against a cluster with a keyring
// `raftps node --insecure --join` never enters gossip while the real
// nodes stay alive in the members list.
func TestRogueOutOfKeyringGossip(t *testing.T) {
	c := NewCluster(t, binPath, 3)
	c.StartAll()
	mustLeader(t, c, 60*time.Second)

	// A node with certificates but no keyring exits at start with the
	// command that makes one.
	bare := c.AddProc()
	if i := slices.Index(bare.Args, "--gossip-keyring-file"); i >= 0 {
		bare.Args = slices.Delete(bare.Args, i, i+2)
	}
	bare.Keyring = ""
	c.Start(bare)
	select {
	case <-bare.Exited():
	case <-time.After(30 * time.Second):
		bare.Kill()
		t.Fatal("a TLS node without --gossip-keyring-file is running; want it to refuse to start")
	}
	log, err := os.ReadFile(bare.LogPath)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"--gossip-keyring-file", "raftps keyring generate", "--insecure-gossip"} {
		if !strings.Contains(string(log), want) {
			t.Fatalf("the refusal does not name %q:\n%s", want, log)
		}
	}

	rogue := startRogue(t, c)
	defer rogue.Kill()
	assertOutOfGossip(t, c.Client(c.Procs[:3]...), rogue.ID, 3)
}

// assertOutOfGossip polls the members list through cl for 15 s: the
// member id (a rogue retrying its join) must never be in it, and alive
// members must be exactly alive.
func assertOutOfGossip(t *testing.T, cl *client.Client, id string, alive int) {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	polls := 0
	for time.Now().Before(deadline) {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		r, err := cl.Cluster.Members(ctx, &pb.MembersRequest{})
		cancel()
		if err == nil {
			polls++
			n := 0
			for _, m := range r.Members {
				if m.Id == id {
					t.Fatalf("the rogue without the keyring joined gossip: %+v", m)
				}
				if m.Status == "alive" {
					n++
				}
			}
			if n != alive {
				t.Fatalf("members %v: want %d alive while the rogue tries to join", r.Members, alive)
			}
		}
		time.Sleep(500 * time.Millisecond)
	}
	if polls == 0 {
		t.Fatal("no members list answered in 15 s")
	}
}

// TestInsecureRogueNeverBecomesMember is issue 32's hole 3: against a
// mutual-TLS cluster whose gossip has no keyring, `raftps node --insecure
// --join <gossip addr>` joins gossip but never enters the Raft
// configuration (before the fix the master made it a voter within
// seconds); a real node with a node certificate still joins.
func TestInsecureRogueNeverBecomesMember(t *testing.T) {
	c := NewCluster(t, binPath, 3)
	for _, p := range c.Procs {
		dropKeyring(t, p)
	}
	c.StartAll()
	mustLeader(t, c, 60*time.Second)
	waitFor(t, 30*time.Second, "3 members", func() bool { return len(raftMembers(t, c)) == 3 })

	rogue := startRogue(t, c)
	defer rogue.Kill()
	// It is in gossip (the master sees it) within a few seconds; it must
	// stay out of Raft for the whole window.
	deadline := time.Now().Add(15 * time.Second)
	for time.Now().Before(deadline) {
		if m := raftMembers(t, c); slices.Contains(m, "rogue") {
			t.Fatalf("the insecure rogue node became a Raft member: %v", m)
		}
		time.Sleep(500 * time.Millisecond)
	}
	if !c.Procs[0].Running() {
		t.Fatal("n1 stopped")
	}

	// A node with a node certificate of the cluster's CA still joins.
	n4 := c.AddProc()
	dropKeyring(t, n4)
	c.Start(n4)
	waitFor(t, 60*time.Second, "n4 in the Raft configuration", func() bool { return slices.Contains(raftMembers(t, c), n4.ID) })
	if m := raftMembers(t, c); slices.Contains(m, "rogue") {
		t.Fatalf("the rogue node became a member: %v", m)
	}
}
