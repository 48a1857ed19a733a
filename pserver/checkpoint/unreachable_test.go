package checkpoint

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	pb "github.com/raftps/raftps/api/raftpspb"
)

// refusedAddr accepts no connection: a client call to it answers
// Unavailable (a holder that is restarting or partitioned).
const refusedAddr = "127.0.0.1:1"

// switchPeers is a Peers and Membership whose answers a test changes:
// list is what Peers returns, members who else is still a member.
type switchPeers struct {
	mu      sync.Mutex
	list    []Peer
	members map[string]bool
}

func (p *switchPeers) Peers() []Peer {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]Peer(nil), p.list...)
}

func (p *switchPeers) IsMember(id string) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.members[id] {
		return true
	}
	for _, pe := range p.list {
		if pe.ID == id {
			return true
		}
	}
	return false
}

func (p *switchPeers) set(list []Peer, members ...string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.list, p.members = list, map[string]bool{}
	for _, id := range members {
		p.members[id] = true
	}
}

// onlyOnReplica: 2 nodes; n0 checkpoints slot 0 of 1 at versions 1 and 2,
// both replicated to n1 (replicas n0,n1). Then n0 loses what break removes
// of version 2 locally, so version 2 is intact only on n1, version 1 on
// both. It returns the cluster and a Manager of n0 over peers.
func onlyOnReplica(t *testing.T, peers *switchPeers, breakLocal func(c *testCluster)) (*testCluster, *Manager) {
	t.Helper()
	c := mustCluster(t, 2)
	c.cli.ProbeTimeout = 500 * time.Millisecond
	c.claim(testJob, 0, c.nodes[0], 1)
	w := c.nodes[0].mgr.Writer(testJob, 0)
	for v := int64(1); v <= 2; v++ {
		p := mustCheckpoint(t, w, WriteRequest{Job: testJob, Slot: 0, NumPservers: 1, Version: v, Step: v * 100, Incarnation: 1,
			Blobs: slotBlobs(v, 0, 1, testNV, testSize), Policy: &pb.CheckpointPolicy{Replicas: 2}})
		if !equalStrings(p.GetReplicas(), []string{"n0", "n1"}) {
			t.Fatalf("version %d replicas %v, want n0,n1", v, p.GetReplicas())
		}
	}
	breakLocal(c)
	mgr, err := New(Config{NodeID: "n0", Host: "h0", Store: c.nodes[0].store, Meta: c.meta, Client: c.cli, Logger: testLogger(t), Peers: peers})
	if err != nil {
		t.Fatal(err)
	}
	return c, mgr
}

// dropLocalManifest deletes version 2's manifest from n0.
func dropLocalManifest(c *testCluster) {
	if _, err := c.nodes[0].store.deleteManifestKeys([]string{ManifestKey(testJob, 2, 0)}); err != nil {
		c.tb.Fatal(err)
	}
}

// corruptLocalBlob flips a byte of one of version 2's blobs on n0: the
// manifest reads locally, that blob only from n1.
func corruptLocalBlob(c *testCluster) {
	flipByte(c.tb, c.nodes[0].store, MD5Hex(fakeBlob(2, 0, testSize)), 17)
}

// TestRestoreDoesNotFallBackPastUnreachableReplica: the newest version is
// intact only on a replica that answers Unavailable (or is a member that
// gossip does not list as alive). Restore must not fall back to version 1
// (a sync job would roll every slot back): it returns ErrUnreachable naming
// the version and the holder, and restores version 2 once the holder
// answers again. Both for a manifest and for a blob only the holder has,
// sync and async.
func TestRestoreDoesNotFallBackPastUnreachableReplica(t *testing.T) {
	for _, tc := range []struct {
		name  string
		local func(*testCluster)
		async bool
		down  func(p *switchPeers) // makes n1 unreachable but a member
	}{
		{"manifest/unavailable", dropLocalManifest, false, func(p *switchPeers) { p.set([]Peer{{ID: "n1", Addr: refusedAddr, Host: "h1"}}) }},
		{"manifest/not-alive-member", dropLocalManifest, false, func(p *switchPeers) { p.set(nil, "n1") }},
		{"blob/unavailable", corruptLocalBlob, false, func(p *switchPeers) { p.set([]Peer{{ID: "n1", Addr: refusedAddr, Host: "h1"}}) }},
		{"async/manifest/unavailable", dropLocalManifest, true, func(p *switchPeers) { p.set([]Peer{{ID: "n1", Addr: refusedAddr, Host: "h1"}}) }},
		{"async/blob/not-alive-member", corruptLocalBlob, true, func(p *switchPeers) { p.set(nil, "n1") }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			peers := &switchPeers{}
			c, mgr := onlyOnReplica(t, peers, tc.local)
			ctx := context.Background()
			req := RestoreRequest{Job: testJob, Slot: 0, NumPservers: 1, Async: tc.async}
			tc.down(peers)
			blobs, rec, err := mgr.Restore(ctx, req)
			if !errors.Is(err, ErrUnreachable) || blobs != nil || rec != nil {
				t.Fatalf("n1 unreachable: err %v, record %v (restored: %v); want ErrUnreachable and no fallback", err, rec, blobs != nil)
			}
			if msg := err.Error(); !strings.Contains(msg, "version 2") || !strings.Contains(msg, "n1") {
				t.Fatalf("error %q does not name version 2 and holder n1", msg)
			}
			peers.set([]Peer{{ID: "n1", Addr: c.nodes[1].addr, Host: "h1"}})
			blobs, rec, err = mgr.Restore(ctx, req)
			if err != nil {
				t.Fatalf("n1 back: %v", err)
			}
			if v := checkWhole(t, blobs, vshardsOf(0, 1, testNV), testSize); v != 2 || rec.GetVersion() != 2 || !strings.HasPrefix(rec.GetReason(), "newest") {
				t.Fatalf("n1 back: restored version %d, record %v; want version 2, newest", v, rec)
			}
		})
	}
}

// TestRestoreFallsBackPastRemovedReplica: a holder that is no longer a
// member (left or removed) counts as missing, so a permanently lost node
// does not block the job: Restore falls back to version 1, intact locally.
func TestRestoreFallsBackPastRemovedReplica(t *testing.T) {
	for _, async := range []bool{false, true} {
		peers := &switchPeers{} // n1 neither listed nor a member
		_, mgr := onlyOnReplica(t, peers, dropLocalManifest)
		blobs, rec, err := mgr.Restore(context.Background(), RestoreRequest{Job: testJob, Slot: 0, NumPservers: 1, Async: async})
		if err != nil {
			t.Fatalf("async=%v: %v", async, err)
		}
		if v := checkWhole(t, blobs, vshardsOf(0, 1, testNV), testSize); v != 1 || !strings.HasPrefix(rec.GetReason(), "fallback:") {
			t.Fatalf("async=%v: restored version %d, record %v; want a fallback to version 1", async, v, rec)
		}
	}
}

// TestRestoreFallsBackPastInconsistentVersionDespiteUnreachable: a version
// that not every old slot names is unusable whatever its holders answer,
// so an unreachable holder of it does not block the fallback.
func TestRestoreFallsBackPastInconsistentVersionDespiteUnreachable(t *testing.T) {
	c, ws := twoSlotCluster(t, &pb.CheckpointPolicy{Replicas: 2})
	// Slot 0 reaches version 2, slot 1 does not (it crashed first).
	mustCheckpoint(t, ws[0], WriteRequest{Job: testJob, Slot: 0, NumPservers: 2, Version: 2, Step: 200, Incarnation: 1,
		Blobs: slotBlobs(2, 0, 2, testNV, testSize), Policy: &pb.CheckpointPolicy{Replicas: 2}})
	ptr := mustPointer(t, c.meta, testJob, 0)
	// Every other node that slot 0 names answers Unavailable.
	var list []Peer
	for _, n := range c.nodes {
		if n.id != "n0" {
			list = append(list, Peer{ID: n.id, Addr: refusedAddr, Host: n.host})
		}
	}
	if _, err := c.nodes[0].store.deleteManifestKeys([]string{ManifestKey(testJob, 2, 0)}); err != nil {
		t.Fatal(err)
	}
	peers := &switchPeers{}
	peers.set(list)
	c.cli.ProbeTimeout = 500 * time.Millisecond
	mgr, err := New(Config{NodeID: "n0", Host: "h0", Store: c.nodes[0].store, Meta: c.meta, Client: c.cli, Logger: testLogger(t), Peers: peers})
	if err != nil {
		t.Fatal(err)
	}
	// Version 1 of slot 0 is local; slot 0 of the new layout needs only old
	// slot 0 (2 pservers → 2 pservers).
	blobs, rec, err := mgr.Restore(context.Background(), RestoreRequest{Job: testJob, Slot: 0, NumPservers: 2})
	if err != nil {
		t.Fatalf("pointer %v: %v", ptr, err)
	}
	if v := checkWhole(t, blobs, vshardsOf(0, 2, testNV), testSize); v != 1 || !strings.Contains(rec.GetReason(), "not globally consistent") {
		t.Fatalf("restored version %d, record %v; want version 1 after an inconsistent version 2", v, rec)
	}
}
