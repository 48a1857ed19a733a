package gossip

import (
	"context"
	"reflect"
	"sync"
	"time"
	"unsafe"

	"github.com/hashicorp/memberlist"
)

// memberlist v0.6.0 marks a member suspect (suspectNode) without telling
// any delegate, and Memberlist.Members, which lists suspect members, hands
// out &nodeState.Node, whose State field memberlist never sets (see
// stateOffset). So suspicion is read by polling: suspectLoop takes
// Members, then, under memberlist's own node lock (read), each member's
// nodeState.State through nodeStateOf. The lock is the unexported
// Memberlist.nodeLock, found by reflection at start-up like stateOffset:
// if a future memberlist changes it, nodeLockOK is false, no suspicion is
// reported, Open logs it and TestSuspectEvent fails.
var nodeLockOffset, nodeLockOK = memberlistLockOffset()

func memberlistLockOffset() (uintptr, bool) {
	f, ok := reflect.TypeFor[memberlist.Memberlist]().FieldByName("nodeLock")
	if !ok || len(f.Index) != 1 || f.Type != reflect.TypeFor[sync.RWMutex]() {
		return 0, false
	}
	return f.Offset, true
}

// suspects returns the members of ml (not self) that memberlist holds
// suspect now, converted by g.toMember under memberlist's node lock (the
// lock memberlist writes a node's state and metadata under).
func (g *Gossip) suspects() map[string]Member {
	nodes := g.ml.Members() // takes and releases the node lock itself
	mu := (*sync.RWMutex)(unsafe.Add(unsafe.Pointer(g.ml), nodeLockOffset))
	out := map[string]Member{}
	mu.RLock()
	defer mu.RUnlock()
	for _, n := range nodes {
		if n.Name != g.cfg.Meta.ID && nodeStateOf(n) == memberlist.StateSuspect {
			out[n.Name] = g.toMember(n, StatusSuspect)
		}
	}
	return out
}

// suspectLoop publishes an EventSuspect (Status StatusSuspect) each time
// a member becomes suspect in memberlist's view, read every
// Config.SuspectPoll: once per suspicion (a member that refuted it, or
// was declared dead, and is suspected again is published again). The
// member table is not changed: a suspect member stays alive in Members
// until it is declared dead (EventFail), so suspicion is only a hint to
// act on with a check of one's own (the master probes a suspect slot
// primary before it fails it over).
func (g *Gossip) suspectLoop(ctx context.Context) {
	t := time.NewTicker(g.cfg.SuspectPoll)
	defer t.Stop()
	published := map[string]bool{}
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		now := g.suspects()
		for id := range published {
			if _, ok := now[id]; !ok {
				delete(published, id) // refuted, or dead: a new suspicion is a new event
			}
		}
		for id, m := range now {
			if published[id] {
				continue
			}
			published[id] = true
			g.mu.Lock()
			g.publishLocked(Event{Type: EventSuspect, Member: cloneMember(m)})
			g.mu.Unlock()
			g.log.Info("gossip member suspect", "member", id, "addr", m.GossipAddr)
		}
	}
}
