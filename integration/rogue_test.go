package integration

import (
	"context"
	"path/filepath"
	"slices"
	"testing"
	"time"

	pb "github.com/raftps/raftps/api/raftpspb"
	"github.com/raftps/raftps/internal/localcluster"
)

// dropKeyring removes --gossip-keyring-file from p's command line: gossip
// in the clear, as in the README's set-up.
func dropKeyring(p *Proc) {
	if i := slices.Index(p.Args, "--gossip-keyring-file"); i >= 0 {
		p.Args = slices.Delete(p.Args, i, i+2)
	}
	p.Keyring = ""
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

// TestInsecureRogueNeverBecomesMember is issue 32's hole 3: against a
// mutual-TLS cluster whose gossip has no keyring, `raftps node --insecure
// --join <gossip addr>` joins gossip but never enters the Raft
// configuration (before the fix the master made it a voter within
// seconds); a real node with a node certificate still joins.
func TestInsecureRogueNeverBecomesMember(t *testing.T) {
	c := NewCluster(t, binPath, 3)
	for _, p := range c.Procs {
		dropKeyring(p)
	}
	c.StartAll()
	mustLeader(t, c, 60*time.Second)
	waitFor(t, 30*time.Second, "3 members", func() bool { return len(raftMembers(t, c)) == 3 })

	rogue, err := localcluster.Add(c.Bin, c.Dir, c.Procs, "--insecure")
	if err != nil {
		t.Fatal(err)
	}
	// Its own name and data dir (c.AddProc below makes the next n4).
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
	dropKeyring(n4)
	c.Start(n4)
	waitFor(t, 60*time.Second, "n4 in the Raft configuration", func() bool { return slices.Contains(raftMembers(t, c), n4.ID) })
	if m := raftMembers(t, c); slices.Contains(m, "rogue") {
		t.Fatalf("the rogue node became a member: %v", m)
	}
}
