package checkpoint

import (
	"cmp"
	"context"
	"crypto/md5"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"slices"
	"sort"

	pb "github.com/raftps/raftps/api/raftpspb"
)

// VersionInfo describes one checkpoint version of a job across its slots.
type VersionInfo struct {
	Version     int64   `json:"version"`
	Step        int64   `json:"step"`
	NumPservers int32   `json:"num_pservers"`
	Slots       []int32 `json:"slots"`    // slots whose pointer names this version
	Complete    bool    `json:"complete"` // every slot 0..NumPservers-1 names it (restorable as a whole)
	Bytes       int64   `json:"bytes"`    // sum over the slots' manifests (0 if unknown)
	// TimestampUnixNano is the newest of the slots' manifest timestamps.
	TimestampUnixNano int64    `json:"timestamp_unix_nano"`
	Replicas          []string `json:"replicas"`         // union of the slots' replica node ids
	Metric            *float64 `json:"metric,omitempty"` // eval metric, from Metrics
}

// Metrics maps a checkpoint version to its eval metric (e.g. test accuracy).
type Metrics map[int64]float64

// List describes every version named by job's pointers, newest first, from
// the pointers alone: Step, Bytes, NumPservers and timestamps are filled for
// versions that are some slot's current one; kept versions carry Version,
// Slots and Complete only (Manager.List reads their manifests too).
func List(ctx context.Context, meta Meta, job string, metrics Metrics) ([]VersionInfo, error) {
	ptrs, _, err := Pointers(ctx, meta, job)
	if err != nil {
		return nil, err
	}
	return listFrom(ptrs, metrics, nil), nil
}

// List is the package List with details of kept versions read from their
// manifests (locally or from any replica).
func (m *Manager) List(ctx context.Context, job string, metrics Metrics) ([]VersionInfo, error) {
	ptrs, _, err := Pointers(ctx, m.cfg.Meta, job)
	if err != nil {
		return nil, err
	}
	return listFrom(ptrs, metrics, func(slot int32, v int64) *Manifest {
		lm, err := m.manifestOf(ctx, job, slot, ptrs[slot], v)
		if err != nil {
			return nil
		}
		return lm.m
	}), nil
}

func listFrom(ptrs map[int32]*pb.CheckpointPointer, metrics Metrics, manifest func(int32, int64) *Manifest) []VersionInfo {
	var out []VersionInfo
	for _, v := range candidateVersions(ptrs) {
		vi := VersionInfo{Version: v}
		reps := map[string]bool{}
		for s, p := range ptrs {
			if !holds(p, v) {
				continue
			}
			vi.Slots = append(vi.Slots, s)
			for _, r := range p.GetReplicas() {
				reps[r] = true
			}
			if p.GetVersion() == v {
				vi.Step, vi.NumPservers = p.GetStep(), p.GetNumPservers()
				vi.Bytes += p.GetBytes()
				vi.TimestampUnixNano = max(vi.TimestampUnixNano, p.GetTimestampUnixNano())
			} else if manifest != nil {
				if man := manifest(s, v); man != nil {
					vi.Step, vi.NumPservers = man.Step, man.NumPservers
					vi.Bytes += man.Bytes
					vi.TimestampUnixNano = max(vi.TimestampUnixNano, man.TimestampUnixNano)
				}
			}
		}
		if vi.NumPservers == 0 {
			// A kept version whose manifest was not read: assume the layout
			// of the slots naming it.
			for _, s := range vi.Slots {
				vi.NumPservers = max(vi.NumPservers, ptrs[s].GetNumPservers())
			}
		}
		slices.Sort(vi.Slots)
		for r := range reps {
			vi.Replicas = append(vi.Replicas, r)
		}
		sort.Strings(vi.Replicas)
		if vi.NumPservers > 0 && int(vi.NumPservers) <= len(ptrs) {
			vi.Complete = true
			for s := int32(0); vi.Complete && s < vi.NumPservers; s++ {
				if !holds(ptrs[s], v) {
					vi.Complete = false
				}
			}
		}
		if x, ok := metrics[v]; ok {
			vi.Metric = &x
		}
		out = append(out, vi)
	}
	return out
}

// MetricOrder says which way an eval metric is better.
type MetricOrder int

const (
	HigherIsBetter MetricOrder = iota // accuracy, AUC
	LowerIsBetter                     // loss, error rate
)

// Best returns the complete version with the best metric (ties: the newer
// version); ok is false if no complete version has a metric. This is
// ElasticDL's "export the best model by eval metric".
func Best(versions []VersionInfo, order MetricOrder) (best VersionInfo, ok bool) {
	for _, v := range versions {
		if v.Metric == nil || !v.Complete || math.IsNaN(*v.Metric) {
			continue
		}
		better := !ok
		if ok {
			switch {
			case order == HigherIsBetter && *v.Metric > *best.Metric,
				order == LowerIsBetter && *v.Metric < *best.Metric:
				better = true
			case *v.Metric == *best.Metric && v.Version > best.Version:
				better = true
			}
		}
		if better {
			best, ok = v, true
		}
	}
	return best, ok
}

// Mismatch is one blob (or manifest) that failed verification on one node.
type Mismatch struct {
	Node    string `json:"node"`
	Slot    int32  `json:"slot"`
	VShard  int32  `json:"vshard"` // -1 for a manifest problem
	MD5     string `json:"md5"`    // expected (the blob's name, or the manifest key)
	Actual  string `json:"actual,omitempty"`
	Problem string `json:"problem"` // "corrupt", "missing", "manifest: ..."
}

// Verify re-hashes every blob of job's version on every node that should
// hold it (this node if it has the manifest, and each slot pointer's
// replicas) and returns every mismatch; an empty result means all copies are
// intact. err is for failures to read pointers or to find any manifest.
func (m *Manager) Verify(ctx context.Context, job string, version int64) ([]Mismatch, error) {
	ptrs, _, err := Pointers(ctx, m.cfg.Meta, job)
	if err != nil {
		return nil, err
	}
	var slots []int32
	for s, p := range ptrs {
		if holds(p, version) {
			slots = append(slots, s)
		}
	}
	if len(slots) == 0 {
		return nil, fmt.Errorf("%w: no pointer of job %s names version %d", ErrNotFound, job, version)
	}
	slices.Sort(slots)
	var out []Mismatch
	for _, s := range slots {
		lm, err := m.manifestOf(ctx, job, s, ptrs[s], version)
		if err != nil {
			out = append(out, Mismatch{Node: "*", Slot: s, VShard: -1, MD5: ManifestKey(job, version, s), Problem: "manifest: " + err.Error()})
			continue
		}
		key := lm.m.Key()
		// Nodes that should hold it: the pointer's replicas, plus us if we do.
		nodes := map[string]source{}
		for _, src := range lm.sources {
			if slices.Contains(ptrs[s].GetReplicas(), src.id) {
				nodes[src.id] = src
			} else if src.local {
				if _, err := m.cfg.Store.GetManifest(key); err == nil {
					nodes[src.id] = src
				}
			}
		}
		for _, id := range ptrs[s].GetReplicas() {
			if _, ok := nodes[id]; !ok {
				out = append(out, Mismatch{Node: id, Slot: s, VShard: -1, MD5: key, Problem: "manifest: replica node unknown or not reachable"})
			}
		}
		ids := make([]string, 0, len(nodes))
		for id := range nodes {
			ids = append(ids, id)
		}
		sort.Strings(ids)
		for _, id := range ids {
			src := nodes[id]
			raw, err := m.readManifest(ctx, src, key)
			if err != nil {
				out = append(out, Mismatch{Node: id, Slot: s, VShard: -1, MD5: key, Problem: "manifest: " + shortErr(err)})
				continue
			}
			if h := MD5Hex(raw); h != lm.md5 {
				out = append(out, Mismatch{Node: id, Slot: s, VShard: -1, MD5: key, Actual: h, Problem: "manifest: differs"})
			}
			for _, r := range lm.m.VShards {
				var present, ok bool
				var actual string
				if src.local {
					present, ok, actual, err = m.cfg.Store.VerifyBlob(r.MD5)
				} else {
					var resp *pb.VerifyBlobResponse
					vctx, cancel := context.WithTimeout(ctx, blobTimeout(r.Bytes))
					resp, err = m.client.VerifyBlob(vctx, src.addr, r.MD5)
					cancel()
					if err == nil {
						present, ok, actual = resp.GetPresent(), resp.GetOk(), resp.GetActualMd5()
					}
				}
				switch {
				case err != nil:
					out = append(out, Mismatch{Node: id, Slot: s, VShard: r.ID, MD5: r.MD5, Problem: "unreachable: " + err.Error()})
				case !present:
					out = append(out, Mismatch{Node: id, Slot: s, VShard: r.ID, MD5: r.MD5, Problem: "missing"})
				case !ok:
					out = append(out, Mismatch{Node: id, Slot: s, VShard: r.ID, MD5: r.MD5, Actual: actual, Problem: "corrupt"})
				}
			}
		}
	}
	return out, nil
}

// ReadVersion returns every vshard blob of job's version (all old slots),
// MD5 verified, from any node. The version must be complete.
func (m *Manager) ReadVersion(ctx context.Context, job string, version int64) (map[int32][]byte, error) {
	ptrs, _, err := Pointers(ctx, m.cfg.Meta, job)
	if err != nil {
		return nil, err
	}
	blobs, _, _, err := m.restoreVersion(ctx, RestoreRequest{Job: job, Slot: 0, NumPservers: 1}, ptrs, version)
	if err != nil {
		return nil, fmt.Errorf("read %s version %d: %w", job, version, err)
	}
	return blobs, nil
}

// Block is a run of one parameter's values decoded from a vshard blob.
type Block struct {
	Name string
	// Shape is the whole parameter's shape (e.g. [784,128]; embedding
	// tables [buckets, dim]); every block of a parameter must agree.
	Shape []int64
	// Offset is the index of Data[0] in the parameter flattened row-major.
	Offset int64
	Data   []float32
}

// Decoder decodes one vshard blob into its parameter blocks (values only,
// no optimizer state). The pserver package implements it; checkpoint does
// not import pserver.
type Decoder interface {
	DecodeVShard(blob []byte) ([]Block, error)
}

// DecoderFunc adapts a function to Decoder.
type DecoderFunc func(blob []byte) ([]Block, error)

// DecodeVShard calls f.
func (f DecoderFunc) DecodeVShard(b []byte) ([]Block, error) { return f(b) }

// ExportMagic opens an exported file; see FORMAT.md.
const ExportMagic = "RAFTPSCK"

// ExportFormatVersion is the format version written after the magic.
const ExportFormatVersion = 1

// ErrNewerFormat: an export or a manifest was written by a newer raftps in
// a format this build does not know.
var ErrNewerFormat = errors.New("checkpoint: written by a newer raftps")

// ExportHeader is the JSON header of an exported file (FORMAT.md).
type ExportHeader struct {
	Format  int           `json:"format"`
	Job     string        `json:"job"`
	Version int64         `json:"version"`
	Step    int64         `json:"step"`
	Params  []ExportParam `json:"params"`
	DataMD5 string        `json:"data_md5"`
}

// ExportParam locates one parameter in the data section.
type ExportParam struct {
	Name   string  `json:"name"`
	Shape  []int64 `json:"shape"`
	Offset int64   `json:"offset"` // bytes from the start of the data section
	Bytes  int64   `json:"bytes"`  // 4 x product(shape)
}

// Export writes every parameter of job's version to w as one portable file
// (FORMAT.md): magic, format version, JSON header, then little-endian
// float32 values, parameters sorted by name. Values not covered by any block
// are zero. The blobs are read and MD5 verified as by Restore.
func (m *Manager) Export(ctx context.Context, job string, version int64, dec Decoder, w io.Writer) error {
	blobs, err := m.ReadVersion(ctx, job, version)
	if err != nil {
		return err
	}
	var step int64
	if vs, err := m.List(ctx, job, nil); err == nil {
		for _, v := range vs {
			if v.Version == version {
				step = v.Step
			}
		}
	}
	return WriteExport(w, ExportHeader{Job: job, Version: version, Step: step}, blobs, dec)
}

// MaxExportValues bounds the values of one exported parameter (the product
// of its shape): 2^32 float32, 16 GiB. A blob naming a bigger shape is
// refused; what is allocated never depends on the shape, only on the
// decoded blocks (values not covered by any block are written as zeros).
const MaxExportValues = int64(1) << 32

// exportParam is one parameter being exported: its shape, value count and
// the decoded runs of values, sorted by offset before writing.
type exportParam struct {
	shape []int64
	n     int64
	runs  []Block
}

// shapeValues is the product of shape (1 for rank 0), overflow-checked and
// bounded by MaxExportValues; negative dimensions are refused.
func shapeValues(shape []int64) (int64, error) {
	n := int64(1)
	for _, d := range shape {
		if d < 0 || (d > 0 && n > MaxExportValues/d) {
			return 0, fmt.Errorf("%w: shape %v has a negative dimension or more than %d values", ErrCorrupt, shape, MaxExportValues)
		}
		n *= d
	}
	return n, nil
}

// WriteExport decodes blobs with dec and writes the export file to w. Each
// block's shape product and offset are overflow-checked against the
// parameter (ErrCorrupt for a block outside its parameter, overlapping
// another, or of a shape other blocks disagree with); memory stays bounded
// by the decoded blocks, whatever shapes the blobs name.
func WriteExport(w io.Writer, h ExportHeader, blobs map[int32][]byte, dec Decoder) error {
	params := map[string]*exportParam{}
	ids := make([]int32, 0, len(blobs))
	for id := range blobs {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	for _, id := range ids {
		blocks, err := decodeSafe(dec, blobs[id])
		if err != nil {
			return fmt.Errorf("export: decode vshard %d: %w", id, err)
		}
		for _, b := range blocks {
			p, ok := params[b.Name]
			if !ok {
				n, err := shapeValues(b.Shape)
				if err != nil {
					return fmt.Errorf("export: param %s (vshard %d): %w", b.Name, id, err)
				}
				p = &exportParam{shape: slices.Clone(b.Shape), n: n}
				params[b.Name] = p
			} else if !slices.Equal(p.shape, b.Shape) {
				return fmt.Errorf("%w: export: param %s: vshard %d says shape %v, another %v", ErrCorrupt, b.Name, id, b.Shape, p.shape)
			}
			if b.Offset < 0 || b.Offset > p.n || int64(len(b.Data)) > p.n-b.Offset {
				return fmt.Errorf("%w: export: param %s: block of %d values at %d outside its %d values", ErrCorrupt, b.Name, len(b.Data), b.Offset, p.n)
			}
			p.runs = append(p.runs, b)
		}
	}
	names := make([]string, 0, len(params))
	for n, p := range params {
		names = append(names, n)
		slices.SortFunc(p.runs, func(a, b Block) int { return cmp.Compare(a.Offset, b.Offset) })
		for i := 1; i < len(p.runs); i++ {
			if prev := p.runs[i-1]; prev.Offset+int64(len(prev.Data)) > p.runs[i].Offset {
				return fmt.Errorf("%w: export: param %s: blocks at %d and %d overlap", ErrCorrupt, n, prev.Offset, p.runs[i].Offset)
			}
		}
	}
	sort.Strings(names)
	var off int64
	for _, n := range names {
		p := params[n]
		if off > math.MaxInt64-4*p.n {
			return fmt.Errorf("%w: export: data section overflows", ErrCorrupt)
		}
		h.Params = append(h.Params, ExportParam{Name: n, Shape: p.shape, Offset: off, Bytes: 4 * p.n})
		off += 4 * p.n
	}
	buf := make([]byte, 0, 1<<16)
	sum := md5.New()
	if err := writeParams(buf, names, params, func(b []byte) error { _, err := sum.Write(b); return err }); err != nil {
		return err
	}
	h.Format = ExportFormatVersion
	h.DataMD5 = hex.EncodeToString(sum.Sum(nil))
	hdr, err := json.Marshal(h)
	if err != nil {
		return err
	}
	pre := make([]byte, 0, 16)
	pre = append(pre, ExportMagic...)
	pre = binary.LittleEndian.AppendUint32(pre, ExportFormatVersion)
	pre = binary.LittleEndian.AppendUint32(pre, uint32(len(hdr)))
	if _, err := w.Write(pre); err != nil {
		return err
	}
	if _, err := w.Write(hdr); err != nil {
		return err
	}
	return writeParams(buf, names, params, func(b []byte) error { _, err := w.Write(b); return err })
}

// decodeSafe runs dec on a blob, turning a panic of the decoder (a crafted
// blob reaching a bug, e.g. a rank-0 embedding's Shape[len-1]) into an
// ErrCorrupt error.
func decodeSafe(dec Decoder, blob []byte) (blocks []Block, err error) {
	defer func() {
		if r := recover(); r != nil {
			blocks, err = nil, fmt.Errorf("%w: decoder panicked: %v", ErrCorrupt, r)
		}
	}()
	return dec.DecodeVShard(blob)
}

// writeParams streams the data section through fn in 64 KiB pieces:
// every parameter's values in order, zeros where no block covers them.
func writeParams(buf []byte, names []string, params map[string]*exportParam, fn func([]byte) error) error {
	buf = buf[:0]
	flush := func() error {
		if len(buf) == 0 {
			return nil
		}
		err := fn(buf)
		buf = buf[:0]
		return err
	}
	put := func(v float32) error {
		buf = binary.LittleEndian.AppendUint32(buf, math.Float32bits(v))
		if len(buf) >= 1<<16 {
			return flush()
		}
		return nil
	}
	zeros := func(k int64) error {
		for ; k > 0; k-- {
			if err := put(0); err != nil {
				return err
			}
		}
		return nil
	}
	for _, n := range names {
		p := params[n]
		var at int64
		for _, r := range p.runs {
			if err := zeros(r.Offset - at); err != nil {
				return err
			}
			for _, v := range r.Data {
				if err := put(v); err != nil {
					return err
				}
			}
			at = r.Offset + int64(len(r.Data))
		}
		if err := zeros(p.n - at); err != nil {
			return err
		}
	}
	return flush()
}

// MaxExportHeader bounds an export file's JSON header (64 MiB: about a
// million parameters).
const MaxExportHeader = 64 << 20

// ReadExportHeader reads the magic, format version and header of an exported
// file from r, leaving r at the start of the data section.
func ReadExportHeader(r io.Reader) (*ExportHeader, error) {
	pre := make([]byte, 16)
	if _, err := io.ReadFull(r, pre); err != nil {
		return nil, fmt.Errorf("%w: export preamble: %v", ErrCorrupt, err)
	}
	if string(pre[:8]) != ExportMagic {
		return nil, fmt.Errorf("%w: not a raftps export (magic %q)", ErrCorrupt, pre[:8])
	}
	if f := binary.LittleEndian.Uint32(pre[8:]); f > ExportFormatVersion {
		return nil, fmt.Errorf("%w: export format %d, this build reads formats up to %d; import it with a newer raftps (`raftps version`)", ErrNewerFormat, f, ExportFormatVersion)
	} else if f != ExportFormatVersion {
		return nil, fmt.Errorf("%w: export format %d, want %d", ErrCorrupt, f, ExportFormatVersion)
	}
	n := binary.LittleEndian.Uint32(pre[12:])
	if n > MaxExportHeader {
		return nil, fmt.Errorf("%w: export header of %d bytes (at most %d)", ErrCorrupt, n, MaxExportHeader)
	}
	// Read as the bytes arrive: a preamble announcing a big header costs
	// nothing until the header is really there.
	hdr, err := io.ReadAll(io.LimitReader(r, int64(n)))
	if err != nil || len(hdr) != int(n) {
		return nil, fmt.Errorf("%w: export header: %d of %d bytes (%v)", ErrCorrupt, len(hdr), n, err)
	}
	var h ExportHeader
	if err := json.Unmarshal(hdr, &h); err != nil {
		return nil, fmt.Errorf("%w: export header: %v", ErrCorrupt, err)
	}
	return &h, nil
}
