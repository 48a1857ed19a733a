package agent

import (
	"context"
	"testing"

	pb "github.com/raftps/raftps/api/raftpspb"
	"github.com/raftps/raftps/pserver"
	"github.com/raftps/raftps/schema"
)

// TestRestartedBackupBuildsNothing: every node of a replicated slot
// restarts (SIGKILL, then the same command line), so no node holds the
// slot's state in memory, while the record still names the old primary
// and its in-sync backup. The restarted backup must not build the slot
// from the initializer (its state is gone, not equal to the initializer),
// so the slot is restored from its checkpoint, at the checkpoint's
// version. Before the records named instances (backups.go) the backup built the
// initializer, the old primary handed the slot off to it
// (handOffLostSlot) and it served version 0: CI's TestTrainingUnderFaults
// ended at 72% accuracy so.
func TestRestartedBackupBuildsNothing(t *testing.T) {
	meta := runOneSlot("restart", 2)
	nodes, _ := startReplicaNodes(t, meta, 2, "n1", "n2")
	var prim, back *replicaNode
	waitFor(t, "a primary serving slot 0 and a backup on the other node", func() bool {
		for i, n := range nodes {
			if _, ok := n.ta.served("restart", 0); ok && nodes[1-i].ta.backupOf("restart", 0) != nil {
				prim, back = n, nodes[1-i]
				return true
			}
		}
		return false
	})
	ps, _ := prim.ta.served("restart", 0)
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	for id := uint64(1); id <= 6; id++ {
		if _, err := pushOne(ctx, ps, id); err != nil {
			t.Fatalf("push %d: %v", id, err)
		}
	}
	waitFor(t, "a checkpoint past the initializer", func() bool { p := pointer(meta, "restart", 0); return p.GetVersion() >= 4 })

	// Both nodes go down: their agents stop and the memory they held (the
	// backup the replica service served) is gone.
	for _, n := range nodes {
		n.ta.stop()
		n.rs.Remove("restart", 0)
	}
	ckpt := pointer(meta, "restart", 0).GetVersion()
	before, ok := replicaRecord(t, meta, "restart", 0)
	if !ok || before.Primary.Node != prim.id || !isBackup(before, back.id) {
		t.Fatalf("record after both stopped: %+v (ok %v), want primary %s and backup %s", before, ok, prim.id, back.id)
	}

	// The backup comes back first and reads the record that names it;
	// then the old primary, which hands the slot on.
	nb := back.start()
	waitFor(t, "the restarted backup to read the record", func() bool {
		nb.a.mu.Lock()
		defer nb.a.mu.Unlock()
		_, stale := nb.a.stale[slotKey{"restart", 0}]
		return stale || nb.a.backups[slotKey{"restart", 0}] != nil
	})
	if b := nb.backupOf("restart", 0); b != nil {
		t.Fatalf("the restarted backup built slot 0 at version %d from the initializer; its state was lost", b.Applied())
	}
	np := prim.start()
	var (
		ns    *pserver.Slot
		where string
	)
	waitFor(t, "slot 0 served again", func() bool {
		for _, ta := range []*testAgent{nb, np} {
			if s, ok := ta.served("restart", 0); ok {
				ns, where = s, ta.a.cfg.NodeID
				return true
			}
		}
		return false
	})
	if v := ns.Version(); v != ckpt {
		t.Fatalf("slot 0 served by %s at version %d after the restart, want the checkpoint's %d", where, v, ckpt)
	}
	r, err := schema.ParseRestore(meta.get(schema.RestoreKey("restart", 0)).GetValue())
	if err != nil || r.GetSource() == "promoted backup" || r.GetVersion() != ckpt {
		t.Fatalf("restore record after the restart: %v %v, want a restore of version %d", r, err, ckpt)
	}
}

// runOneSlot returns a store running job name: asyncReplicated with one
// slot, checkpointed every everySteps steps on one node.
func runOneSlot(name string, everySteps int64) *fakeMeta {
	meta := newFakeMeta()
	spec := asyncReplicated(name)
	spec.NumPservers = 1
	spec.Checkpoint = &pb.CheckpointPolicy{EverySteps: everySteps, Replicas: 1}
	meta.setJobs(running(spec))
	return meta
}
