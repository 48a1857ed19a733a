package checkpoint

import (
	"context"
	"fmt"
	"time"
)

// PruneOrphanAge is how old a manifest of a slot without any pointer must be
// before Prune deletes it (a first checkpoint may be in flight).
const PruneOrphanAge = time.Hour

// Prune is the backstop for the writers' best-effort deletion: it deletes
// this node's manifests that no pointer names any more — versions older
// than their slot's pointer and not in its kept versions (old replicas a
// writer no longer contacts, uncommitted attempts of crashed writers), and
// manifests of slots without a pointer older than PruneOrphanAge — then
// garbage-collects unreferenced blobs. Versions newer than the pointer are
// never touched (a checkpoint may be in flight). Run it now and then (e.g.
// hourly) on every node. It returns the number of manifests deleted.
func (m *Manager) Prune(ctx context.Context) (int, error) {
	keys, err := m.cfg.Store.ManifestKeys("")
	if err != nil {
		return 0, err
	}
	type slotKey struct {
		job  string
		slot int32
	}
	keepBySlot := map[slotKey][]int64{}
	jobsRead := map[string]bool{}
	deleted := 0
	for _, k := range keys {
		job, v, slot, ok := parseManifestKey(k)
		if !ok {
			continue
		}
		if !jobsRead[job] {
			ptrs, _, err := Pointers(ctx, m.cfg.Meta, job)
			if err != nil {
				return deleted, fmt.Errorf("prune: %w", err)
			}
			jobsRead[job] = true
			for s, p := range ptrs {
				keepBySlot[slotKey{job, s}] = append([]int64{p.GetVersion()}, p.GetKeptVersions()...)
			}
		}
		keep, hasPtr := keepBySlot[slotKey{job, slot}]
		if hasPtr {
			if v >= keep[0] || contains64(keep, v) {
				continue
			}
		} else {
			raw, err := m.cfg.Store.GetManifest(k)
			if err == nil {
				if man, err := DecodeManifest(raw); err == nil && time.Since(time.Unix(0, man.TimestampUnixNano)) < PruneOrphanAge {
					continue
				}
			}
		}
		if _, err := m.cfg.Store.deleteManifestKeys([]string{k}); err != nil {
			return deleted, err
		}
		deleted++
		m.logger.Info("pruned manifest no pointer names", "key", k)
	}
	if _, err := m.cfg.Store.GC(); err != nil {
		return deleted, err
	}
	return deleted, nil
}

func contains64(xs []int64, x int64) bool {
	for _, y := range xs {
		if y == x {
			return true
		}
	}
	return false
}
