package pserver

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/raftps/raftps/pserver/psclient"
	"github.com/raftps/raftps/pserver/wire"
)

// TestSyncSlotsStayInStep: trainer membership reaches a sync job's two
// slots at different times (slot 0 knows trainer a alone, slot 1 nobody,
// when a pushes its first step; both learn a and b afterwards), so slot 0
// releases step 0 with a alone while slot 1's step 0 expects b too. Every
// push a trainer gets back without error must leave every slot at the
// same step (the Client's Versions equal: one model, not step N of one
// slot and N+1 of the other), and after both trainers pushed 5 steps
// each and left, the slots end at the same step.
func TestSyncSlotsStayInStep(t *testing.T) {
	spec := syncSpec()
	spec.NumPservers = 2
	addrs, _, slots := startServers(t, spec, 2)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	client := func(id string) *psclient.Client {
		c, err := psclient.NewClient(spec, id, resolverOf(addrs))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c
	}
	a, b := client("a"), client("b")
	grads := &psclient.Grads{Dense: map[string][]float32{"w": ones(10, 0.01)}, Examples: 1}
	// train pushes n steps that every slot accepted, re-pulling after a
	// push refused as stale, and checks the versions of each.
	train := func(c *psclient.Client, name string, n int) error {
		params := c.NewParams()
		if err := c.Pull(ctx, params); err != nil {
			return fmt.Errorf("%s: pull: %w", name, err)
		}
		for done := 0; done < n; {
			err := c.PushPull(ctx, grads, params)
			if errors.Is(err, wire.ErrStale) {
				if err := c.Pull(ctx, params); err != nil {
					return fmt.Errorf("%s: pull: %w", name, err)
				}
				continue
			}
			if err != nil {
				return fmt.Errorf("%s: push: %w", name, err)
			}
			if v := c.Versions(); v[0] != v[1] {
				return fmt.Errorf("%s: a push returned with the slots at versions %v: one model mixes two steps", name, v)
			}
			done++
		}
		return c.LeaveStep(ctx)
	}

	slots[0].SetTrainers([]string{"a"})
	errs := make(chan error, 2)
	go func() { errs <- train(a, "a", 5) }()
	// a's first push released step 0 on slot 0 (a alone); on slot 1 it
	// waits for a to be a member.
	deadline := time.Now().Add(10 * time.Second)
	for slots[0].Step() != 1 {
		if time.Now().After(deadline) {
			t.Fatalf("slot 0 at step %d, want 1", slots[0].Step())
		}
		time.Sleep(time.Millisecond)
	}
	slots[1].SetTrainers([]string{"a", "b"})
	waitPushed(t, slots[1], "a")
	slots[0].SetTrainers([]string{"a", "b"})
	go func() { errs <- train(b, "b", 5) }()
	for range 2 {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	if s0, s1 := slots[0].Step(), slots[1].Step(); s0 != s1 {
		t.Fatalf("final steps: slot 0 at %d, slot 1 at %d", s0, s1)
	}
}
