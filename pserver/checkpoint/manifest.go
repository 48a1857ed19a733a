package checkpoint

import (
	"bytes"
	"crypto/md5"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"math"
	"runtime"
	"strconv"
	"strings"
	"sync"
)

// Key layout in the node's checkpoint Pebble:
//
//	blob/<md5hex>                              → blob bytes (content addressed)
//	manifest/<job>/<version %020d>/<slot>      → JSON Manifest
//	manifestsum/<job>/<version %020d>/<slot>   → MD5 hex of that manifest
const (
	blobPrefix        = "blob/"
	manifestPrefix    = "manifest/"
	manifestSumPrefix = "manifestsum/"
)

// VShardRef names one virtual shard's blob inside a Manifest.
type VShardRef struct {
	ID    int32  `json:"id"`
	MD5   string `json:"md5"`
	Bytes int64  `json:"bytes"`
}

// Manifest lists the blobs of one (job, version, slot) checkpoint. Its
// encoding (EncodeManifest, JSON) is hashed with MD5 and that hash is what
// the pointer /jobs/<job>/checkpoints/<slot> names.
type Manifest struct {
	// Format is the manifest's format version (ManifestFormat when
	// written by this build; 0, from before versions were written, reads
	// as 1). A node refuses a newer one with ErrNewerFormat.
	Format            int32       `json:"format,omitempty"`
	UUID              string      `json:"uuid"`
	Job               string      `json:"job"`
	Version           int64       `json:"version"`
	Slot              int32       `json:"slot"`
	NumPservers       int32       `json:"num_pservers"`
	Step              int64       `json:"step"`
	TimestampUnixNano int64       `json:"timestamp_unix_nano"`
	VShards           []VShardRef `json:"vshards"`
	Bytes             int64       `json:"bytes"`
}

// Key is the manifest's Pebble key (and GetManifest key).
func (m *Manifest) Key() string { return ManifestKey(m.Job, m.Version, m.Slot) }

// EncodeManifest returns the canonical bytes of m and their MD5 (hex).
func EncodeManifest(m *Manifest) (raw []byte, md5hex string, err error) {
	if m.Format == 0 {
		m.Format = ManifestFormat
	}
	raw, err = json.Marshal(m)
	if err != nil {
		return nil, "", fmt.Errorf("encode manifest %s: %w", m.Key(), err)
	}
	return raw, MD5Hex(raw), nil
}

// ManifestFormat is the manifest format version this build writes and the
// newest it reads.
const ManifestFormat = 1

// DecodeManifest parses raw and checks that it is self-consistent: a
// truncated or garbage manifest returns an error wrapping ErrCorrupt, one
// of a newer format (a newer raftps wrote it) ErrNewerFormat.
func DecodeManifest(raw []byte) (*Manifest, error) {
	// The format first, without the strict decoder: a newer format may
	// have fields this build does not know.
	var v struct {
		Format int32 `json:"format"`
	}
	if json.Unmarshal(raw, &v) == nil && v.Format > ManifestFormat {
		return nil, fmt.Errorf("%w: manifest format %d, this build reads formats up to %d; upgrade this node (`raftps version`)", ErrNewerFormat, v.Format, ManifestFormat)
	}
	var m Manifest
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&m); err != nil {
		return nil, fmt.Errorf("%w: manifest does not decode (%d bytes): %v", ErrCorrupt, len(raw), err)
	}
	if err := m.validate(); err != nil {
		return nil, err
	}
	return &m, nil
}

// Bounds a manifest must respect (it comes from disk or a peer).
const (
	// MaxManifestPservers bounds a manifest's num_pservers (the job spec's
	// own bound is lower): loops over the slots of a version never run
	// further.
	MaxManifestPservers = 1 << 16
	// MaxManifestVShards bounds the vshards one manifest lists.
	MaxManifestVShards = 1 << 16
)

func (m *Manifest) validate() error {
	if err := validJob(m.Job); err != nil {
		return fmt.Errorf("%w: manifest: %v", ErrCorrupt, err)
	}
	if m.Version <= 0 || m.Slot < 0 || m.NumPservers <= 0 || m.NumPservers > MaxManifestPservers || m.Slot >= m.NumPservers {
		return fmt.Errorf("%w: manifest %s: version %d slot %d num_pservers %d out of range",
			ErrCorrupt, m.Key(), m.Version, m.Slot, m.NumPservers)
	}
	if len(m.VShards) > MaxManifestVShards {
		return fmt.Errorf("%w: manifest %s: %d vshards (at most %d)", ErrCorrupt, m.Key(), len(m.VShards), MaxManifestVShards)
	}
	var total int64
	seen := make(map[int32]bool, len(m.VShards))
	for _, v := range m.VShards {
		if seen[v.ID] || v.ID < 0 || v.Bytes < 0 || v.Bytes > MaxBlobSize || !isMD5Hex(v.MD5) {
			return fmt.Errorf("%w: manifest %s: bad vshard entry %+v", ErrCorrupt, m.Key(), v)
		}
		if v.ID%m.NumPservers != m.Slot {
			return fmt.Errorf("%w: manifest %s: vshard %d does not belong to slot %d of %d",
				ErrCorrupt, m.Key(), v.ID, m.Slot, m.NumPservers)
		}
		seen[v.ID] = true
		// Each term is at most MaxBlobSize and there are at most
		// MaxManifestVShards of them (2^48 in all), so the sum cannot
		// overflow; the check says so explicitly.
		if total > math.MaxInt64-v.Bytes {
			return fmt.Errorf("%w: manifest %s: vshard sizes overflow", ErrCorrupt, m.Key())
		}
		total += v.Bytes
	}
	if total != m.Bytes {
		return fmt.Errorf("%w: manifest %s: bytes %d != sum of vshards %d", ErrCorrupt, m.Key(), m.Bytes, total)
	}
	return nil
}

// ManifestKey is "manifest/<job>/<version %020d>/<slot>".
func ManifestKey(job string, version int64, slot int32) string {
	return fmt.Sprintf("%s%s/%020d/%d", manifestPrefix, job, version, slot)
}

// parseManifestKey is the inverse of ManifestKey.
func parseManifestKey(k string) (job string, version int64, slot int32, ok bool) {
	rest, found := strings.CutPrefix(k, manifestPrefix)
	if !found {
		return "", 0, 0, false
	}
	parts := strings.Split(rest, "/")
	if len(parts) != 3 {
		return "", 0, 0, false
	}
	v, err1 := strconv.ParseInt(parts[1], 10, 64)
	s, err2 := strconv.ParseInt(parts[2], 10, 32)
	if err1 != nil || err2 != nil {
		return "", 0, 0, false
	}
	return parts[0], v, int32(s), true
}

// MD5Hex is the lower-case hex MD5 of b.
func MD5Hex(b []byte) string {
	s := md5.Sum(b)
	return hex.EncodeToString(s[:])
}

func isMD5Hex(s string) bool {
	if len(s) != 32 {
		return false
	}
	_, err := hex.DecodeString(s)
	return err == nil && strings.ToLower(s) == s
}

func validJob(job string) error {
	if job == "" || strings.ContainsAny(job, "/\x00") {
		return fmt.Errorf("%w: job name %q (empty or contains '/')", ErrInvalid, job)
	}
	return nil
}

// manifestSumKey is "manifestsum/<job>/<version>/<slot>": the MD5 of the
// manifest stored under key (outside the "manifest/" prefix).
func manifestSumKey(key string) string {
	return manifestSumPrefix + strings.TrimPrefix(key, manifestPrefix)
}

// hashAll fills refs[i].MD5, hashing on every CPU (MD5 of hundreds of MB is
// a large part of a checkpoint's cost).
func hashAll(refs []VShardRef, blobs map[int32][]byte) {
	workers := min(runtime.GOMAXPROCS(0), len(refs))
	var wg sync.WaitGroup
	next := make(chan int)
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				refs[i].MD5 = MD5Hex(blobs[refs[i].ID])
			}
		}()
	}
	for i := range refs {
		next <- i
	}
	close(next)
	wg.Wait()
}
