package jepsen

import (
	"context"
	"fmt"
	"time"
)

// RunSlotFault injects one replicated-slot fault (kind in SlotFaults) on
// a primary of job (read from the slots' replica records through sc),
// holds it for hold, heals it (a killed node is restarted, a paused one
// resumed, partitions removed) and returns its record (Err set if it
// could not be applied). The fault is aimed at the first slot whose
// record has an in-sync backup (for FaultPartitionPrimaryLead, whose
// primary is not the Raft leader, if there is one).
func RunSlotFault(ctx context.Context, kind string, job string, slots int32, hs *Hosts, conns ConnSet, sc *SlotClients, h *History, hold time.Duration) Fault {
	f := Fault{Type: kind}
	fail := func(err error) {
		if err != nil && f.Err == "" {
			f.Err = err.Error()
		}
	}
	leader := conns.Leader(ctx, time.Second)
	var (
		target  *Host
		owner   SlotOwner
		slot    int32 = -1
		backups []*Host
	)
	for s := int32(0); s < slots; s++ {
		o, err := sc.Resolve(ctx, job, s, true)
		if err != nil || o.Primary == "" || len(o.Backups) == 0 || hs.Host(o.Primary) == nil {
			continue
		}
		better := target == nil || (kind == FaultPartitionPrimaryLead && owner.Primary == leader && o.Primary != leader)
		if better {
			target, owner, slot = hs.Host(o.Primary), o, s
		}
	}
	f.Start = h.Now()
	if target == nil {
		f.Err = "no slot of the job has a primary with an in-sync backup"
		f.End = h.Now()
		return f
	}
	for _, b := range owner.Backups {
		if bh := hs.Host(b); bh != nil {
			backups = append(backups, bh)
		}
	}
	f.Target = target.Name
	f.Detail = fmt.Sprintf("slot %d of %s: primary %s, backups %v, epoch %d; Raft leader %s", slot, job, owner.Primary, owner.Backups, owner.Epoch, leader)
	var heal func()
	switch kind {
	case FaultKillPrimary:
		target.Kill()
		heal = func() { fail(target.Restart()) }
	case FaultPausePrimary:
		fail(target.Pause())
		heal = func() { fail(target.Resume()) }
	case FaultPartitionPrimaryISR:
		fail(hs.Partition([]*Host{target}, backups))
	case FaultPartitionPrimaryLead:
		lh := hs.Host(leader)
		if lh == nil || lh == target {
			// The primary leads (or no leader is known): cut it off from
			// every other node, the leader's view of the fault.
			var others []*Host
			for _, n := range hs.Nodes {
				if n != target {
					others = append(others, n)
				}
			}
			f.Detail += "; the primary is the leader: isolated from every node"
			fail(hs.Partition([]*Host{target}, others))
		} else {
			fail(hs.Partition([]*Host{target}, []*Host{lh}))
		}
	default:
		f.Err = "unknown fault kind"
	}
	h.Notef("nemesis: %s on %s started: %s", f.Type, f.Target, f.Detail)
	sleepCtx(context.Background(), hold) // a fault always gets healed
	if heal != nil {
		heal()
	}
	fail(hs.Heal())
	f.End = h.Now()
	h.Add(Record{Type: "fault", At: f.Start, Fault: &f})
	h.Notef("nemesis: %s on %s healed", f.Type, f.Target)
	return f
}
