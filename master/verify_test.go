package master

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/raftps/raftps/gossip"
	"github.com/raftps/raftps/schema"
)

// verifyStore answers VerifyPeer with fn and counts the calls.
type verifyStore struct {
	Store
	calls atomic.Int32
	fn    func(ctx context.Context, id string) error
}

func (s *verifyStore) VerifyPeer(ctx context.Context, id, _ string) error {
	s.calls.Add(1)
	return s.fn(ctx, id)
}

// TestVerifiedBoundsReconcile: a peer that proves its identity is
// verified at once; one that fails is not, and is not asked again before
// verifyRetry; peers that never answer cost reconcile at most verifyWait
// each and at most maxVerifying checks in flight, and the next round does
// not wait for them.
func TestVerifiedBoundsReconcile(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	errRogue := errors.New("no certificate")
	st := &verifyStore{fn: func(ctx context.Context, id string) error {
		switch id {
		case "good":
			return nil
		case "rogue":
			return errRogue
		}
		<-ctx.Done() // a peer that never answers
		return ctx.Err()
	}}
	m := New(Config{}, st, nil)
	if !m.verified(ctx, "good", "a:1") || !m.verified(ctx, "good", "a:1") {
		t.Fatal("a peer that proved its identity is not verified")
	}
	if m.verified(ctx, "rogue", "b:1") || m.verified(ctx, "rogue", "b:1") {
		t.Fatal("a peer that failed is verified")
	}
	if n := st.calls.Load(); n != 2 {
		t.Fatalf("%d checks, want 2 (one per peer: results are kept)", n)
	}
	start := time.Now()
	for i := range 2 * maxVerifying {
		if m.verified(ctx, "silent"+string(rune('a'+i)), "c:1") {
			t.Fatal("a silent peer is verified")
		}
	}
	if took := time.Since(start); took > time.Duration(maxVerifying)*verifyWait+2*time.Second {
		t.Fatalf("%d silent peers held reconcile %v", 2*maxVerifying, took)
	}
	start = time.Now()
	for i := range 2 * maxVerifying {
		m.verified(ctx, "silent"+string(rune('a'+i)), "c:1")
	}
	if took := time.Since(start); took > verifyWait {
		t.Fatalf("the next round waited %v for checks under way", took)
	}
	if n := st.calls.Load(); n != 2+maxVerifying {
		t.Fatalf("%d checks, want %d (at most %d in flight)", n, 2+maxVerifying, maxVerifying)
	}
}

// TestNodeRecordsOnlyForProvenMembers (issue 32, hole 3): reconcile
// writes /nodes/<id> only for members that proved their identity
// (Master.verified) or are Raft members at gossip's Raft address: a
// process gossip reports that failed the check, or a dead one never
// checked, gets no record; a member that passed gets one.
func TestNodeRecordsOnlyForProvenMembers(t *testing.T) {
	s := openStore(t)
	st := &verifyStore{Store: s, fn: func(_ context.Context, id string) error {
		if id == "n4" {
			return nil
		}
		return errors.New("no node certificate")
	}}
	mem := &fakeMembers{members: []gossip.Member{
		member("n1", gossip.StatusAlive, s.Addr(), gossip.RoleServer),
		member("n4", gossip.StatusAlive, "127.0.0.1:1", gossip.RoleTrainer),
		member("rogue", gossip.StatusAlive, "127.0.0.1:2", gossip.RoleTrainer),
		member("ghost", gossip.StatusDead, "127.0.0.1:3", gossip.RoleTrainer),
	}}
	m := New(Config{Logger: slogDiscard()}, st, mem)
	ctx := ctxT(t, 10*time.Second)
	m.reconcile(ctx)
	m.reconcile(ctx)
	for id, want := range map[string]bool{"n1": true, "n4": true, "rogue": false, "ghost": false} {
		if got := exists(t, s, schema.NodeKey(id)); got != want {
			t.Errorf("/nodes/%s written: %v, want %v", id, got, want)
		}
	}
}
