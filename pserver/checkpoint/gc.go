package checkpoint

import (
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/cockroachdb/pebble"
)

// DeleteVersions deletes the manifests of (job, slot) whose version is not in
// keep and older than the newest kept one, then deletes the blobs they named
// that no other manifest references (GCBlobs). It returns the deleted
// manifest versions.
func (s *Store) DeleteVersions(job string, slot int32, keep []int64) ([]int64, error) {
	deleted, named, err := s.deleteManifests(job, slot, keep)
	if err != nil {
		return deleted, err
	}
	_, err = s.GCBlobs(named)
	return deleted, err
}

// deleteManifests deletes the manifests of (job, slot) that DeleteVersions
// names, synced; it returns the deleted versions and the md5s of the blobs
// those manifests named (candidates for GCBlobs).
func (s *Store) deleteManifests(job string, slot int32, keep []int64) ([]int64, []string, error) {
	if err := validJob(job); err != nil {
		return nil, nil, err
	}
	keepSet := make(map[int64]bool, len(keep))
	var newest int64
	for _, v := range keep {
		keepSet[v] = true
		newest = max(newest, v)
	}
	keys, err := s.ManifestKeys(job)
	if err != nil {
		return nil, nil, err
	}
	var victims []string
	var deleted []int64
	for _, k := range keys {
		_, v, sl, ok := parseManifestKey(k)
		// Versions newer than every kept one are never deleted: they may be
		// a newer owner's checkpoint in flight (not yet pointed to).
		if !ok || sl != slot || keepSet[v] || v > newest {
			continue
		}
		victims = append(victims, k)
		deleted = append(deleted, v)
	}
	if len(deleted) == 0 {
		return nil, nil, nil
	}
	named, err := s.deleteManifestKeys(victims)
	if err != nil {
		return nil, nil, fmt.Errorf("delete manifests of %s slot %d: %w", job, slot, err)
	}
	s.logger.Info("deleted checkpoint manifests", "job", job, "slot", slot, "versions", deleted, "keep", keep)
	return deleted, named, nil
}

// deleteVersionList deletes the manifests of (job, slot) at the given
// versions that are stored (others are skipped), synced; it returns the
// versions deleted and the md5s of the blobs they named (for GCBlobs).
func (s *Store) deleteVersionList(job string, slot int32, versions []int64) ([]int64, []string, error) {
	if err := validJob(job); err != nil {
		return nil, nil, err
	}
	db, err := s.getDB()
	if err != nil {
		return nil, nil, err
	}
	var keys []string
	var deleted []int64
	for _, v := range versions {
		k := ManifestKey(job, v, slot)
		_, closer, err := db.Get([]byte(k))
		if errors.Is(err, pebble.ErrNotFound) || slices.Contains(deleted, v) {
			continue
		}
		if err != nil {
			return nil, nil, fmt.Errorf("delete manifest %s: %w", k, err)
		}
		closer.Close()
		keys = append(keys, k)
		deleted = append(deleted, v)
	}
	if len(keys) == 0 {
		return nil, nil, nil
	}
	named, err := s.deleteManifestKeys(keys)
	if err != nil {
		return nil, nil, err
	}
	s.logger.Info("deleted checkpoint manifests", "job", job, "slot", slot, "versions", deleted)
	return deleted, named, nil
}

// deleteManifestKeys deletes the named manifests (and their sums) in one
// synced batch. It returns the md5s of the blobs the deleted manifests
// named (an undecodable manifest names none: GC's full scan is left to
// find its blobs).
func (s *Store) deleteManifestKeys(keys []string) ([]string, error) {
	db, err := s.getDB()
	if err != nil {
		return nil, err
	}
	var named []string
	b := db.NewBatch()
	defer b.Close()
	for _, k := range keys {
		if raw, closer, err := db.Get([]byte(k)); err == nil {
			m, derr := DecodeManifest(raw)
			closer.Close()
			if derr == nil {
				for _, r := range m.VShards {
					named = append(named, r.MD5)
				}
			}
		}
		if err := b.Delete([]byte(k), nil); err != nil {
			return nil, err
		}
		if err := b.Delete([]byte(manifestSumKey(k)), nil); err != nil {
			return nil, err
		}
	}
	if err := b.Commit(pebble.Sync); err != nil {
		return nil, fmt.Errorf("delete manifests: %w", err)
	}
	return named, nil
}

// GC deletes every blob that no manifest references and that was not written
// in the last pinGrace without its manifest yet (an in-flight checkpoint).
// Reference counting is by a full scan of the manifests; the blobs are
// listed by a scan of their keys, which reads every blob's data block back
// (Pebble has no key-only scan of a block): Prune's backstop, not the
// writer's path (GCBlobs).
func (s *Store) GC() (int, error) {
	return s.gc(nil)
}

// GCBlobs is GC restricted to the blobs md5s: each is deleted unless a
// manifest references it or it is pinned. The writer passes the blobs of
// the manifests it just deleted, so a checkpoint's garbage collection reads
// only manifests, never the (hundreds of MB of) blobs; an absent md5 costs
// a tombstone.
func (s *Store) GCBlobs(md5s []string) (int, error) {
	if len(md5s) == 0 {
		return 0, nil
	}
	return s.gc(md5s)
}

// gc deletes the unreferenced, unpinned blobs among candidates (all stored
// blobs when candidates is nil).
func (s *Store) gc(candidates []string) (int, error) {
	s.gcLock.Lock()
	defer s.gcLock.Unlock()
	referenced := map[string]bool{}
	err := s.scan(manifestPrefix, func(k, v []byte) error {
		m, err := DecodeManifest(v)
		if err != nil {
			// A corrupt manifest references nothing we can name; keep going.
			s.logger.Warn("gc: skipping undecodable manifest", "key", string(k), "err", err)
			return nil
		}
		for _, r := range m.VShards {
			referenced[r.MD5] = true
		}
		return nil
	}, false)
	if err != nil {
		return 0, err
	}
	blobs := candidates
	if blobs == nil {
		if blobs, err = s.BlobMD5s(); err != nil {
			return 0, err
		}
	}
	db, err := s.getDB()
	if err != nil {
		return 0, err
	}
	s.mu.Lock()
	now := time.Now()
	var victims []string
	seen := make(map[string]bool, len(blobs))
	for _, h := range blobs {
		if referenced[h] || seen[h] {
			continue
		}
		seen[h] = true
		if t, ok := s.pins[h]; ok && now.Sub(t) < pinGrace {
			continue
		}
		delete(s.pins, h)
		victims = append(victims, h)
	}
	s.mu.Unlock()
	if len(victims) == 0 {
		return 0, nil
	}
	b := db.NewBatch()
	defer b.Close()
	for _, h := range victims {
		if err := b.Delete([]byte(blobPrefix+h), nil); err != nil {
			return 0, err
		}
	}
	if err := b.Commit(pebble.Sync); err != nil {
		return 0, fmt.Errorf("gc blobs: %w", err)
	}
	s.logger.Info("gc deleted unreferenced blobs", "count", len(victims))
	return len(victims), nil
}
