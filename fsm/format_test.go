package fsm

import (
	"errors"
	"testing"
)

// A snapshot of a newer format is refused as such (not as corrupt), and
// the state is left untouched.
func TestRestoreRefusesNewerFormat(t *testing.T) {
	f := newTestFSM(t)
	populate(t, f)
	b := mustSnapshot(t, f.FSM)
	b[len(snapMagic)-1]++
	g := newTestFSM(t)
	rev := g.Revision()
	err := restore(g.FSM, b)
	if !errors.Is(err, ErrNewerFormat) || errors.Is(err, ErrMalformed) {
		t.Fatalf("restore of format %d: %v, want ErrNewerFormat", b[len(snapMagic)-1], err)
	}
	if g.Revision() != rev {
		t.Fatalf("state changed by a refused restore: revision %d", g.Revision())
	}
}
