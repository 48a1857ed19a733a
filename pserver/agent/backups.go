package agent

import (
	pb "github.com/raftps/raftps/api/raftpspb"
	"github.com/raftps/raftps/pserver"
	"github.com/raftps/raftps/pserver/replica"
	"github.com/raftps/raftps/schema"
)

// The backups a node holds, and what a restart does to them.
//
// A backup's state lives in its node's memory only. A node that restarts
// comes back with none, while the records written before the restart
// still name it in their in-sync sets. Building that backup from the
// initializer (as a backup named by a primary that itself starts from the
// initializer does) made it look in sync with none of the primary's
// updates: after every node of a cluster was SIGKILLed and restarted, the
// old primary found it neither served nor backed up its slot and promoted
// the restarted backup (handOffLostSlot), which served the initializer's
// parameters; the checkpoint at version 360 was never restored, the job
// went on from version 0 and ended at 72% test accuracy
// (integration's TestTrainingUnderFaults, in CI).
//
// So the records name processes, not only nodes: each member carries the
// Instance its node announced in gossip when the record was written
// (Config.Instance, random at each start of `raftps node`), and a node
// builds a backup from the initializer only where the record names its
// running instance. An entry of another instance is stale; it is left in
// the record (a record changed by anyone but its primary deposes a live
// primary: its backups learn the new epoch). A live primary drops the
// backup (it answers ErrWrongSlot until backupReadyWait has passed) and
// re-replication builds a new one by state transfer; a promotion to it
// finds no backup here (claimPromoted fails), and the next round hands
// the slot on (handOffLostSlot: another live backup, else the record is
// deleted and the slot restored from its checkpoint). An entry written
// with an old gossip view of a node that had just restarted is stale in
// the same way: the backup is rebuilt, never served wrong.

// reconcileBackups makes the backups this node holds of job's slots
// follow the records: a record naming this node as a backup gets one
// (built from the initializer, at the record's epoch) if it names this
// process's instance (above), a held one learns the record's
// epoch, and one whose record no longer names this node (or is gone) is
// removed. A record naming this node as primary keeps its backup for
// claimPromoted.
func (a *Agent) reconcileBackups(spec *pb.JobSpec, recs map[int32]schema.ReplicaRecord) {
	if a.cfg.Replicas == nil {
		return
	}
	job := spec.Name
	a.mu.Lock()
	defer a.mu.Unlock()
	a.specs[job] = spec // for installBackup
	for k, hb := range a.backups {
		if k.job != job {
			continue
		}
		r, ok := recs[k.slot]
		switch {
		case ok && r.Primary.Node == a.cfg.NodeID && (!hb.heldOver || r.Epoch == hb.b.Epoch()):
			hb.b.SetEpoch(r.Epoch) // promoted (or held over at this epoch): claimPromoted serves it
		case ok && isBackup(r, a.cfg.NodeID):
			hb.learnerOf = "" // joined
			hb.b.SetEpoch(r.Epoch)
		case keepLearner(hb, r, ok): // being built by r's primary
		default:
			a.cfg.Replicas.Remove(job, k.slot)
			hb.b.Slot().Close()
			delete(a.backups, k)
			a.log.Info("backup released: the record no longer names this node", "job", job, "slot", k.slot)
		}
	}
	for k, epoch := range a.stale {
		if r, ok := recs[k.slot]; k.job == job && (!ok || r.Epoch != epoch) {
			delete(a.stale, k)
		}
	}
	for i, r := range recs {
		k := slotKey{job, i}
		if !isBackup(r, a.cfg.NodeID) || a.backups[k] != nil || a.hosted[k] != nil {
			continue
		}
		if m := backupEntry(r, a.cfg.NodeID); m.Instance != a.cfg.Instance {
			if _, logged := a.stale[k]; !logged {
				a.stale[k] = r.Epoch
				a.log.Warn("the record names this node as a backup in another process (before a restart): that state is gone, not built",
					"job", job, "slot", i, "epoch", r.Epoch, "primary", r.Primary.Node, "named", m.Instance, "instance", a.cfg.Instance)
			}
			continue
		}
		need := SlotBytes(spec)
		if b := a.cfg.MemoryBudget; b > 0 && uint64(a.inUseLocked()+need) > b {
			a.log.Warn("backup not built: over the memory budget (the primary drops it)", "job", job, "slot", i, "need", need)
			continue
		}
		s, err := pserver.NewSlot(spec, i, spec.NumPservers)
		if err != nil {
			a.log.Error("backup not built", "job", job, "slot", i, "err", err)
			continue
		}
		s.SetIncarnation(r.Incarnation)
		b := replica.NewBackup(job, s, r.Epoch)
		a.backups[k] = &heldBackup{spec: spec, b: b}
		a.cfg.Replicas.Add(job, b)
		a.log.Info("backup serving", "job", job, "slot", i, "epoch", r.Epoch, "primary", r.Primary.Node)
	}
}

// dropEndedBackupsLocked removes the backups of jobs not running (a.mu
// held).
func (a *Agent) dropEndedBackupsLocked(running map[string]*pb.JobStatus) {
	for job := range a.specs {
		if running[job] == nil {
			delete(a.specs, job)
		}
	}
	for k, hb := range a.backups {
		if running[k.job] == nil {
			if a.cfg.Replicas != nil {
				a.cfg.Replicas.Remove(k.job, k.slot)
			}
			hb.b.Slot().Close()
			delete(a.backups, k)
		}
	}
	for k := range a.stale {
		if running[k.job] == nil {
			delete(a.stale, k)
		}
	}
}

func isBackup(r schema.ReplicaRecord, node string) bool {
	_, ok := findBackup(r, node)
	return ok
}

// backupEntry returns r's backup entry of node (the zero member if none).
func backupEntry(r schema.ReplicaRecord, node string) schema.ReplicaMember {
	m, _ := findBackup(r, node)
	return m
}

func findBackup(r schema.ReplicaRecord, node string) (schema.ReplicaMember, bool) {
	for _, m := range r.Backups {
		if m.Node == node {
			return m, true
		}
	}
	return schema.ReplicaMember{}, false
}
