package pserver

import (
	"cmp"
	"slices"
	"time"
)

// pushIDs is the per-trainer memory of applied push ids (guarded by Slot.mu).
type pushIDs struct {
	by    map[string]*pushIDRing
	clock int64
}

type pushIDRing struct {
	ids      [pushIDWindow]uint64
	versions [pushIDWindow]int64
	next     int
	used     int64 // clock of the last record
}

// lookup returns the version an applied push id produced (id 0: never).
func (p *pushIDs) lookup(trainer string, id uint64) (int64, bool) {
	r := p.by[trainer]
	if id == 0 || r == nil {
		return 0, false
	}
	for i, x := range r.ids {
		if x == id {
			return r.versions[i], true
		}
	}
	return 0, false
}

// record remembers that push id of trainer produced version.
func (p *pushIDs) record(trainer string, id uint64, version int64) {
	if id == 0 {
		return
	}
	if p.by == nil {
		p.by = map[string]*pushIDRing{}
	}
	r := p.by[trainer]
	if r == nil {
		if len(p.by) >= maxPushIDTrainers {
			// Forget the least recently pushing half at once (amortized
			// O(log n) per new trainer, not a scan per push).
			ts := make([]string, 0, len(p.by))
			for t := range p.by {
				ts = append(ts, t)
			}
			slices.SortFunc(ts, func(a, b string) int { return cmp.Compare(p.by[a].used, p.by[b].used) })
			for _, t := range ts[:len(ts)/2] {
				delete(p.by, t)
			}
		}
		r = &pushIDRing{}
		p.by[trainer] = r
	}
	p.clock++
	r.ids[r.next], r.versions[r.next], r.used = id, version, p.clock
	r.next = (r.next + 1) % pushIDWindow
}

// MemberWait bounds how long a sync push from a trainer that is not (yet)
// in the slot's trainer set waits for SetTrainers to add it, holding its
// decoded gradients; then it fails with ErrStale (the trainer re-pulls and
// pushes again).
var MemberWait = 30 * time.Second
