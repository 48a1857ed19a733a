package checkpoint

import (
	"bytes"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cockroachdb/pebble"
	"github.com/cockroachdb/pebble/bloom"
	"github.com/cockroachdb/pebble/objstorage/objstorageprovider"
	"github.com/cockroachdb/pebble/sstable"
	"github.com/google/uuid"
	md5simd "github.com/minio/md5-simd"

	"github.com/raftps/raftps/schema"
)

// pinGrace is how long a blob written without (yet) a manifest that
// references it is protected from garbage collection. Blobs are unpinned as
// soon as a manifest naming them is stored.
const pinGrace = 10 * time.Minute

// Store is one node's local checkpoint storage: a Pebble database under the
// node's data dir. It is safe for concurrent use.
type Store struct {
	dir    string
	logger *slog.Logger

	mu     sync.Mutex // guards db (nil when closed) and pins; serializes GC with writes' pins
	db     *pebble.DB
	pins   map[string]time.Time
	gcLock sync.RWMutex // writers of blob+manifest hold R; GC holds W
	// manifestMu makes a manifest's conflict check and write one step.
	manifestMu sync.Mutex

	// ingestThreshold: checkpoints at least this big are ingested as an
	// sstable instead of written through the WAL.
	ingestThreshold int64
}

// DefaultIngestThreshold is the checkpoint size from which blobs are
// ingested as one sstable (written once) rather than through the WAL
// (written twice: WAL, then memtable flush).
const DefaultIngestThreshold = 8 << 20

// Open opens (creating if needed) the checkpoint store in dir.
func Open(dir string, logger *slog.Logger) (*Store, error) {
	if logger == nil {
		logger = slog.Default()
	}
	logger = logger.With("component", "checkpoint-store")
	opts := &pebble.Options{
		// Checkpoint blobs are large (MBs); a bigger memtable keeps large
		// values from forcing a flush per write.
		MemTableSize: 64 << 20,
		Logger:       pebbleLogger{logger},
		FS:           storeFS, // files 0600, directories 0700

	}
	// Bloom filters let a presence check of a missing blob skip reading the
	// (multi-MB) data block it would sit in.
	opts.Levels = make([]pebble.LevelOptions, 7)
	for i := range opts.Levels {
		opts.Levels[i].FilterPolicy = bloom.FilterPolicy(10)
		opts.Levels[i].Compression = pebble.NoCompression // parameters do not compress
	}
	db, err := pebble.Open(dir, opts)
	if err != nil {
		return nil, fmt.Errorf("open checkpoint store %q: %w", dir, err)
	}
	// sstables a crash left before they were ingested are garbage.
	if err := os.RemoveAll(filepath.Join(dir, "ingest")); err != nil {
		logger.Warn("cannot remove leftover ingest files", "err", err)
	}
	return &Store{dir: dir, logger: logger, db: db, pins: map[string]time.Time{}, ingestThreshold: DefaultIngestThreshold}, nil
}

// Dir is the directory the store was opened in.
func (s *Store) Dir() string { return s.dir }

// Close closes the Pebble database. Close is safe to call twice.
func (s *Store) Close() error {
	s.gcLock.Lock()
	defer s.gcLock.Unlock()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.db == nil {
		return nil
	}
	err := s.db.Close()
	s.db = nil
	return err
}

func (s *Store) getDB() (*pebble.DB, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.db == nil {
		return nil, ErrClosed
	}
	return s.db, nil
}

func (s *Store) pin(md5hex string) {
	s.mu.Lock()
	s.pins[md5hex] = time.Now()
	s.mu.Unlock()
}

func (s *Store) unpin(refs []VShardRef) {
	s.mu.Lock()
	for _, r := range refs {
		delete(s.pins, r.MD5)
	}
	s.mu.Unlock()
}

// PutBlob stores data under blob/<md5hex> after checking that MD5(data) ==
// md5hex (ErrCorrupt otherwise). The write is synced. A blob already present
// is not rewritten.
func (s *Store) PutBlob(md5hex string, data []byte) error {
	if int64(len(data)) >= s.ingestThreshold/2 {
		// Large: one single-key sstable, written once and ingested.
		if got := MD5Hex(data); got != md5hex {
			return fmt.Errorf("%w: blob %s: data hashes to %s", ErrCorrupt, md5hex, got)
		}
		return s.ingestBlobs([]VShardRef{{MD5: md5hex}}, map[int32][]byte{0: data})
	}
	return s.putBlob(md5hex, data, pebble.Sync)
}

func (s *Store) putBlob(md5hex string, data []byte, wo *pebble.WriteOptions) error {
	if got := MD5Hex(data); got != md5hex {
		return fmt.Errorf("%w: blob %s: data hashes to %s", ErrCorrupt, md5hex, got)
	}
	s.gcLock.RLock()
	defer s.gcLock.RUnlock()
	db, err := s.getDB()
	if err != nil {
		return err
	}
	s.pin(md5hex)
	if ok, _, _ := s.verify(db, md5hex); ok {
		return nil // content addressed: the same bytes are already here
	}
	if err := db.Set([]byte(blobPrefix+md5hex), data, wo); err != nil {
		return fmt.Errorf("put blob %s: %w", md5hex, err)
	}
	return nil
}

// putBlobs writes every blob durably: on return every blob is synced. The
// returned refs are sorted by vshard id. Checkpoints of at least
// ingestThreshold bytes are hashed and written in one pipeline, an
// external sstable per blob, fsynced and ingested (data written once, like
// a plain file; see hashAndIngest); smaller ones go through the WAL with
// one sync at the end.
func (s *Store) putBlobs(blobs map[int32][]byte) ([]VShardRef, int64, error) {
	refs := make([]VShardRef, 0, len(blobs))
	var total int64
	for id, b := range blobs {
		refs = append(refs, VShardRef{ID: id, Bytes: int64(len(b))})
		total += int64(len(b))
	}
	sort.Slice(refs, func(i, j int) bool { return refs[i].ID < refs[j].ID })
	if total >= s.ingestThreshold {
		if err := s.hashAndIngest(refs, blobs); err != nil {
			return nil, 0, err
		}
		return refs, total, nil
	}
	t0 := time.Now()
	hashAll(refs, blobs)
	s.logger.Debug("hashed blobs", "bytes", total, "took", time.Since(t0))
	for _, r := range refs {
		if err := s.putBlob(r.MD5, blobs[r.ID], pebble.NoSync); err != nil {
			return nil, 0, fmt.Errorf("vshard %d: %w", r.ID, err)
		}
	}
	db, err := s.getDB()
	if err != nil {
		return nil, 0, err
	}
	// One synced (empty) WAL record makes every earlier NoSync write durable.
	if err := db.LogData(nil, pebble.Sync); err != nil {
		return nil, 0, fmt.Errorf("sync blobs: %w", err)
	}
	return refs, total, nil
}

// hashAndIngest hashes refs' blobs on every core and, as each MD5 becomes
// known, writes that blob as an sstable of its own (one key,
// blob/<md5>; no compression) and fsyncs it, so that hashing and writing
// overlap instead of following each other (an sstable's keys are sorted,
// so one sstable of every blob could only start once every MD5 is known).
// Then all of them are ingested at once: one-key sstables of distinct
// MD5s never overlap. Blobs already stored (content addressing) or
// repeated in refs are written once. It fills refs[i].MD5.
func (s *Store) hashAndIngest(refs []VShardRef, blobs map[int32][]byte) error {
	s.gcLock.RLock()
	defer s.gcLock.RUnlock()
	db, err := s.getDB()
	if err != nil {
		return err
	}
	tmpDir := filepath.Join(s.dir, "ingest")
	if err := os.MkdirAll(tmpDir, 0o700); err != nil {
		return fmt.Errorf("ingest dir: %w", err)
	}
	t0 := time.Now()
	hashed := make(chan int, len(refs))
	stop := hashBlobs(refs, blobs, hashed)
	defer stop()
	var paths []string
	defer func() {
		for _, p := range paths {
			os.Remove(p)
		}
	}()
	seen := map[string]bool{}
	var written int64
	for range refs {
		k := <-hashed
		h := refs[k].MD5
		s.pin(h)
		if seen[h] {
			continue
		}
		seen[h] = true
		if ok, _, _ := s.verify(db, h); ok {
			continue // content addressed: already here
		}
		path := filepath.Join(tmpDir, uuid.NewString()+".sst")
		paths = append(paths, path)
		if err := writeSSTable(db, path, []byte(blobPrefix+h), blobs[refs[k].ID]); err != nil {
			return err // the hashers finish into the buffered channel
		}
		written += int64(len(blobs[refs[k].ID]))
	}
	t1 := time.Now()
	if len(paths) == 0 {
		return nil
	}
	if err := db.Ingest(paths); err != nil {
		return fmt.Errorf("ingest blobs: %w", err)
	}
	s.logger.Debug("hashed and ingested blobs", "blobs", len(paths), "bytes", written, "hash+write+fsync", t1.Sub(t0), "ingest", time.Since(t1))
	return nil
}

// md5Lanes is how many blobs are hashed at once: the lanes of the SIMD
// MD5 (16 with AVX-512, 8 with AVX2; without either, one per core).
const md5Lanes = 16

// hashBlobs fills refs[k].MD5 for every k, sending k on hashed (which
// must hold len(refs)) as each is done. Many blobs are hashed at once in
// the lanes of minio/md5-simd: MD5 itself is sequential, and one lane per
// core would leave most of each core's vector width idle. stop waits for
// the hashers.
func hashBlobs(refs []VShardRef, blobs map[int32][]byte, hashed chan<- int) (stop func()) {
	srv := md5simd.NewServer()
	var next atomic.Int64
	var wg sync.WaitGroup
	for range min(md5Lanes, len(refs)) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			h := srv.NewHash()
			defer h.Close()
			for k := int(next.Add(1) - 1); k < len(refs); k = int(next.Add(1) - 1) {
				h.Reset()
				if _, err := h.Write(blobs[refs[k].ID]); err != nil { // only if closed
					refs[k].MD5 = MD5Hex(blobs[refs[k].ID])
				} else {
					refs[k].MD5 = hex.EncodeToString(h.Sum(nil))
				}
				hashed <- k
			}
		}()
	}
	return func() { wg.Wait(); srv.Close() }
}

// blockChecksum is the block checksum of the sstables blobs are ingested
// in: xxhash64 costs less CPU per byte than crc32c, and a blob's block is
// checksummed when written and again when Pebble loads the table to ingest
// it. (Every blob is also MD5-verified on read.) Pebble reads the checksum
// type from each table's footer, so tables of either type coexist.
const blockChecksum = sstable.ChecksumTypeXXHash64

// writeSSTable writes one key into a new sstable at path, uncompressed,
// and fsyncs it.
func writeSSTable(db *pebble.DB, path string, key, value []byte) error {
	f, err := storeFS.Create(path)
	if err != nil {
		return fmt.Errorf("create %s: %w", path, err)
	}
	w := sstable.NewWriter(objstorageprovider.NewFileWritable(f), sstable.WriterOptions{
		TableFormat:  db.FormatMajorVersion().MaxTableFormat(),
		Compression:  sstable.NoCompression,
		Checksum:     blockChecksum,
		FilterPolicy: bloom.FilterPolicy(10),
		FilterType:   sstable.TableFilter,
	})
	if err := w.Set(key, value); err != nil {
		w.Close()
		return fmt.Errorf("write sstable %s: %w", path, err)
	}
	if err := w.Close(); err != nil { // finishes and fsyncs the file
		return fmt.Errorf("finish sstable %s: %w", path, err)
	}
	return nil
}

// ingestBlobs writes the blobs not yet stored into one sstable (no
// compression: parameters do not compress), fsyncs it and ingests it.
func (s *Store) ingestBlobs(refs []VShardRef, blobs map[int32][]byte) error {
	s.gcLock.RLock()
	defer s.gcLock.RUnlock()
	db, err := s.getDB()
	if err != nil {
		return err
	}
	byMD5 := map[string][]byte{}
	for _, r := range refs {
		s.pin(r.MD5)
		if _, ok := byMD5[r.MD5]; ok {
			continue
		}
		if ok, _, _ := s.verify(db, r.MD5); ok {
			continue // content addressed: already here
		}
		byMD5[r.MD5] = blobs[r.ID]
	}
	if len(byMD5) == 0 {
		return nil
	}
	keys := make([]string, 0, len(byMD5))
	for h := range byMD5 {
		keys = append(keys, h)
	}
	sort.Strings(keys)
	t0 := time.Now()
	tmpDir := filepath.Join(s.dir, "ingest")
	if err := os.MkdirAll(tmpDir, 0o700); err != nil {
		return fmt.Errorf("ingest dir: %w", err)
	}
	path := filepath.Join(tmpDir, uuid.NewString()+".sst")
	defer os.Remove(path)
	f, err := storeFS.Create(path)
	if err != nil {
		return fmt.Errorf("create %s: %w", path, err)
	}
	w := sstable.NewWriter(objstorageprovider.NewFileWritable(f), sstable.WriterOptions{
		TableFormat:  db.FormatMajorVersion().MaxTableFormat(),
		Compression:  sstable.NoCompression,
		Checksum:     blockChecksum,
		FilterPolicy: bloom.FilterPolicy(10),
		FilterType:   sstable.TableFilter,
	})
	for _, h := range keys {
		if err := w.Set([]byte(blobPrefix+h), byMD5[h]); err != nil {
			w.Close()
			return fmt.Errorf("write sstable %s: %w", path, err)
		}
	}
	if err := w.Close(); err != nil { // finishes and fsyncs the file
		return fmt.Errorf("finish sstable %s: %w", path, err)
	}
	t1 := time.Now()
	if err := db.Ingest([]string{path}); err != nil {
		return fmt.Errorf("ingest blobs: %w", err)
	}
	s.logger.Debug("ingested blobs", "blobs", len(keys), "write+fsync", t1.Sub(t0), "ingest", time.Since(t1))
	return nil
}

// GetBlob returns a copy of blob md5hex after re-hashing it: a stored blob
// whose bytes changed returns an error wrapping ErrCorrupt that names md5hex;
// a missing one wraps ErrNotFound.
func (s *Store) GetBlob(md5hex string) ([]byte, error) {
	db, err := s.getDB()
	if err != nil {
		return nil, err
	}
	v, closer, err := db.Get([]byte(blobPrefix + md5hex))
	if errors.Is(err, pebble.ErrNotFound) {
		return nil, fmt.Errorf("%w: blob %s", ErrNotFound, md5hex)
	}
	if err != nil {
		return nil, fmt.Errorf("get blob %s: %w", md5hex, err)
	}
	out := bytes.Clone(v)
	closer.Close()
	if got := MD5Hex(out); got != md5hex {
		return nil, fmt.Errorf("%w: blob %s hashes to %s", ErrCorrupt, md5hex, got)
	}
	return out, nil
}

// VerifyBlob re-hashes blob md5hex: present reports whether it is stored, ok
// whether it hashes to its name, actual is the hash of the stored bytes.
func (s *Store) VerifyBlob(md5hex string) (present, ok bool, actual string, err error) {
	db, err := s.getDB()
	if err != nil {
		return false, false, "", err
	}
	ok, present, actual = s.verify(db, md5hex)
	return present, ok, actual, nil
}

func (s *Store) verify(db *pebble.DB, md5hex string) (ok, present bool, actual string) {
	v, closer, err := db.Get([]byte(blobPrefix + md5hex))
	if err != nil {
		return false, false, ""
	}
	defer closer.Close()
	actual = MD5Hex(v)
	return actual == md5hex, true, actual
}

// PutManifest stores m (synced) after checking that every blob it names is
// present. It returns the manifest's encoding and MD5.
func (s *Store) PutManifest(m *Manifest) (raw []byte, md5hex string, err error) {
	raw, md5hex, err = EncodeManifest(m)
	if err != nil {
		return nil, "", err
	}
	if err := s.PutManifestRaw(m.Key(), raw); err != nil {
		return nil, "", err
	}
	return raw, md5hex, nil
}

// putLocalManifest is PutManifest for blobs this process just wrote.
func (s *Store) putLocalManifest(m *Manifest) (raw []byte, md5hex string, err error) {
	raw, md5hex, err = EncodeManifest(m)
	if err != nil {
		return nil, "", err
	}
	// The local writer checked that the slot's pointer is older than this
	// version: a manifest already here is an uncommitted attempt.
	if err := s.putManifestRaw(m.Key(), raw, false, true); err != nil {
		return nil, "", err
	}
	return raw, md5hex, nil
}

// PutManifestRaw decodes raw, checks that key is its key and that its blobs
// are all present, and stores it synced. A manifest already stored under
// key is never replaced by different bytes (ErrConflict; the same bytes
// again are a no-op).
func (s *Store) PutManifestRaw(key string, raw []byte) error {
	return s.putManifestRaw(key, raw, true, false)
}

// replaceManifestRaw is PutManifestRaw that replaces a different manifest
// stored under key: for a caller that checked the old one is an attempt no
// committed pointer names.
func (s *Store) replaceManifestRaw(key string, raw []byte) error {
	return s.putManifestRaw(key, raw, true, true)
}

// putManifestRaw with checkBlobs=false is for the local writer, which has
// just written (and pinned) the blobs: checking presence would read every
// multi-MB data block back. replace allows replacing different bytes.
func (s *Store) putManifestRaw(key string, raw []byte, checkBlobs, replace bool) error {
	m, err := DecodeManifest(raw)
	if err != nil {
		return err
	}
	if m.Key() != key {
		return fmt.Errorf("%w: manifest key %q does not match its content %q", ErrInvalid, key, m.Key())
	}
	s.gcLock.RLock()
	defer s.gcLock.RUnlock()
	db, err := s.getDB()
	if err != nil {
		return err
	}
	// Blobs were hashed when they were put; here only their presence is
	// checked (a second MD5 pass over hundreds of MB would halve throughput).
	for _, r := range m.VShards {
		if !checkBlobs {
			break
		}
		_, closer, err := db.Get([]byte(blobPrefix + r.MD5))
		if err != nil {
			return fmt.Errorf("manifest %s: vshard %d: %w: blob %s (%v)", key, r.ID, ErrNotFound, r.MD5, err)
		}
		closer.Close()
	}
	s.manifestMu.Lock() // the check below and the write are one step
	defer s.manifestMu.Unlock()
	if old, closer, err := db.Get([]byte(key)); err == nil {
		same := bytes.Equal(old, raw)
		closer.Close()
		if same {
			s.unpin(m.VShards)
			return nil
		}
		if !replace {
			return fmt.Errorf("%w: %s (a stored manifest is never replaced by other bytes)", ErrConflict, key)
		}
	} else if !errors.Is(err, pebble.ErrNotFound) {
		return fmt.Errorf("put manifest %s: %w", key, err)
	}
	// The manifest and its MD5 in one synced batch: a manifest whose bytes
	// change at rest is caught on read even for kept versions, which no
	// pointer md5 anchors.
	b := db.NewBatch()
	defer b.Close()
	if err := b.Set([]byte(key), raw, nil); err != nil {
		return err
	}
	if err := b.Set([]byte(manifestSumKey(key)), []byte(MD5Hex(raw)), nil); err != nil {
		return err
	}
	if err := b.Commit(pebble.Sync); err != nil {
		return fmt.Errorf("put manifest %s: %w", key, err)
	}
	s.unpin(m.VShards)
	return nil
}

// GetManifest returns the raw manifest stored under key (ErrNotFound if none).
func (s *Store) GetManifest(key string) ([]byte, error) {
	db, err := s.getDB()
	if err != nil {
		return nil, err
	}
	v, closer, err := db.Get([]byte(key))
	if errors.Is(err, pebble.ErrNotFound) {
		return nil, fmt.Errorf("%w: manifest %s", ErrNotFound, key)
	}
	if err != nil {
		return nil, fmt.Errorf("get manifest %s: %w", key, err)
	}
	raw := bytes.Clone(v)
	closer.Close()
	sum, closer, err := db.Get([]byte(manifestSumKey(key)))
	if err == nil {
		want := string(sum)
		closer.Close()
		if got := MD5Hex(raw); got != want {
			return nil, fmt.Errorf("%w: manifest %s hashes to %s, stored sum %s", ErrCorrupt, key, got, want)
		}
	}
	return raw, nil
}

// ManifestKeys lists the manifest keys stored for job (all jobs if job is
// ""), in key order (by job, then version, then slot).
func (s *Store) ManifestKeys(job string) ([]string, error) {
	prefix := manifestPrefix
	if job != "" {
		prefix += job + "/"
	}
	var keys []string
	err := s.scan(prefix, func(k, _ []byte) error {
		keys = append(keys, string(k))
		return nil
	}, true)
	return keys, err
}

// BlobMD5s lists the md5 of every stored blob.
func (s *Store) BlobMD5s() ([]string, error) {
	var out []string
	err := s.scan(blobPrefix, func(k, _ []byte) error {
		out = append(out, strings.TrimPrefix(string(k), blobPrefix))
		return nil
	}, true)
	return out, err
}

func (s *Store) scan(prefix string, fn func(k, v []byte) error, keysOnly bool) error {
	db, err := s.getDB()
	if err != nil {
		return err
	}
	it, err := db.NewIter(&pebble.IterOptions{LowerBound: []byte(prefix), UpperBound: schema.PrefixEnd([]byte(prefix))})
	if err != nil {
		return err
	}
	defer it.Close()
	for it.First(); it.Valid(); it.Next() {
		var v []byte
		if !keysOnly {
			v = it.Value()
		}
		if err := fn(it.Key(), v); err != nil {
			return err
		}
	}
	return it.Error()
}

// setRaw overwrites a key directly (tests use it to corrupt blobs/manifests).
func (s *Store) setRaw(key string, val []byte) error {
	db, err := s.getDB()
	if err != nil {
		return err
	}
	return db.Set([]byte(key), val, pebble.Sync)
}

// pebbleLogger adapts slog to Pebble's Logger.
type pebbleLogger struct{ l *slog.Logger }

func (p pebbleLogger) Infof(format string, args ...any) {
	p.l.Debug(fmt.Sprintf(format, args...))
}
func (p pebbleLogger) Errorf(format string, args ...any) {
	p.l.Error(fmt.Sprintf(format, args...))
}
func (p pebbleLogger) Fatalf(format string, args ...any) {
	p.l.Error(fmt.Sprintf(format, args...))
	panic(fmt.Sprintf(format, args...))
}
