package agent

import (
	"context"
	"log/slog"
	"sync"
	"testing"

	pb "github.com/raftps/raftps/api/raftpspb"
	"github.com/raftps/raftps/internal/testing/testutil"
	"github.com/raftps/raftps/pserver"
	"github.com/raftps/raftps/schema"
)

// TestConcurrentRestoresTakeDistinctEpochs: two slots of a sync job
// restored at once each publish a rollback, each having read the record
// before the other wrote. The second write must not overwrite the first
// at the same epoch: it takes the next epoch, on top of the first, so
// every slot (the first one too) follows the last record. Before the
// compare both wrote epoch 1; the earlier slot, already training on
// epoch 1, then followed the later record and rolled back alone (CI's
// TestBrowserDashboard: slots 0 and 2 at step 27, slot 1 at 20, stuck).
func TestConcurrentRestoresTakeDistinctEpochs(t *testing.T) {
	meta := newFakeMeta()
	spec := syncSpec("rb", 3, 2)
	ctx := context.Background()
	claim := func(slot int32) *hosted {
		inc := meta.put(schema.SlotKey("rb", slot), schema.SlotRecord{Node: "n1", Addr: "127.0.0.1:1"}.Marshal(), 0)
		return &hosted{key: slotKey{"rb", slot}, spec: spec, incarnation: inc}
	}
	h1, h2 := claim(1), claim(2)
	a := New(Config{NodeID: "n1", Addr: "127.0.0.1:1", Logger: testutil.LoggerLevel(t, slog.LevelInfo)}, meta, pserver.NewServer(), nil, members(1))
	var once sync.Once
	a.publishHook = func(h *hosted) {
		if h == h1 {
			// h1 has read the record (none); h2 publishes before h1 writes.
			once.Do(func() {
				if _, err := a.publishRecord(ctx, spec, h2, &pb.RestoreRecord{Slot: 2, Version: 20}, true); err != nil {
					t.Errorf("slot 2's publish: %v", err)
				}
			})
		}
	}
	if _, err := a.publishRecord(ctx, spec, h1, &pb.RestoreRecord{Slot: 1, Version: 20}, true); err != nil {
		t.Fatalf("slot 1's publish: %v", err)
	}
	rb, rev, ok := a.readRollback(ctx, "rb", true)
	if !ok || rb.Slot != 1 || rb.Epoch != 2 || h2.epoch != 1 || h1.epoch != 2 || h1.rollbackRev != rev {
		t.Fatalf("rollback record %+v (ok %v); slot 1 at epoch %d, slot 2 at epoch %d: want slot 2's epoch 1, then slot 1's epoch 2 on top of it",
			rb, ok, h1.epoch, h2.epoch)
	}
}
