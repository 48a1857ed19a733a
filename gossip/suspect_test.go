package gossip

import (
	"syscall"
	"testing"
	"time"
)

// TestSuspectEvent (issue 34, gossip suspicion reported): a member in
// another process that is SIGSTOPped misses its probes, and the others
// publish an EventSuspect for it (Status StatusSuspect) before any
// EventFail, while Members still lists it alive (suspicion is a hint). It
// is resumed at once: the suspicion ends (refuted) or turns into a
// failure, and either way a new suspicion of the same member is
// published again (the second SIGSTOP).
func TestSuspectEvent(t *testing.T) {
	gs := mustCluster(t, 2, nil)
	const id = "stopped"
	cmd := startChild(t, id, gs)
	t.Cleanup(func() { _ = cmd.Process.Signal(syscall.SIGCONT) })
	for round := 1; round <= 2; round++ {
		ch, cancel := gs[0].Subscribe()
		start := time.Now()
		if err := cmd.Process.Signal(syscall.SIGSTOP); err != nil {
			t.Fatal(err)
		}
		var ev Event
		for ev.Type != EventSuspect && ev.Type != EventFail {
			select {
			case ev = <-ch:
				if ev.Member.Meta.ID != id {
					ev = Event{}
				}
			case <-time.After(10 * time.Second):
				t.Fatalf("round %d: no suspect or fail event for the stopped member within 10 s", round)
			}
		}
		took := time.Since(start)
		if ev.Type != EventSuspect || ev.Member.Status != StatusSuspect {
			t.Fatalf("round %d: first event for the stopped member: %v (status %v), want suspect", round, ev.Type, ev.Member.Status)
		}
		if m, ok := gs[0].Member(id); !ok || m.Status == StatusSuspect {
			t.Fatalf("round %d: Members shows %+v (present %v); a suspect member stays alive there until it is declared dead", round, m, ok)
		}
		t.Logf("round %d: SIGSTOPped member suspected after %v", round, took.Round(time.Millisecond))
		if err := cmd.Process.Signal(syscall.SIGCONT); err != nil {
			t.Fatal(err)
		}
		cancel()
		// Alive again before the next round (refuted, or back after dead).
		waitFor(t, 15*time.Second, id+" alive again", func() bool {
			m, ok := gs[0].Member(id)
			return ok && m.Status == StatusAlive && len(gs[0].suspects()) == 0
		})
	}
}
