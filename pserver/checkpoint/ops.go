package checkpoint

import (
	"context"
	"crypto/md5"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
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
		if vi.NumPservers > 0 {
			vi.Complete = true
			for s := int32(0); s < vi.NumPservers; s++ {
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

// WriteExport decodes blobs with dec and writes the export file to w.
func WriteExport(w io.Writer, h ExportHeader, blobs map[int32][]byte, dec Decoder) error {
	params := map[string][]float32{}
	shapes := map[string][]int64{}
	ids := make([]int32, 0, len(blobs))
	for id := range blobs {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	for _, id := range ids {
		blocks, err := dec.DecodeVShard(blobs[id])
		if err != nil {
			return fmt.Errorf("export: decode vshard %d: %w", id, err)
		}
		for _, b := range blocks {
			n := int64(1)
			for _, d := range b.Shape {
				n *= d
			}
			if sh, ok := shapes[b.Name]; ok && !slices.Equal(sh, b.Shape) {
				return fmt.Errorf("export: param %s: vshard %d says shape %v, another %v", b.Name, id, b.Shape, sh)
			}
			if _, ok := params[b.Name]; !ok {
				if n < 0 || n > 1<<34 {
					return fmt.Errorf("export: param %s: shape %v", b.Name, b.Shape)
				}
				params[b.Name] = make([]float32, n)
				shapes[b.Name] = slices.Clone(b.Shape)
			}
			if b.Offset < 0 || b.Offset+int64(len(b.Data)) > n {
				return fmt.Errorf("export: param %s: block [%d,%d) outside %d values", b.Name, b.Offset, b.Offset+int64(len(b.Data)), n)
			}
			copy(params[b.Name][b.Offset:], b.Data)
		}
	}
	names := make([]string, 0, len(params))
	for n := range params {
		names = append(names, n)
	}
	sort.Strings(names)
	sum := md5.New()
	var off int64
	buf := make([]byte, 0, 1<<16)
	for _, n := range names {
		vals := params[n]
		h.Params = append(h.Params, ExportParam{Name: n, Shape: shapes[n], Offset: off, Bytes: 4 * int64(len(vals))})
		off += 4 * int64(len(vals))
		buf = writeFloats(buf[:0], vals, sum.Write)
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
	for _, n := range names {
		write := func(p []byte) (int, error) { return w.Write(p) }
		if _, err := writeFloatsErr(buf[:0], params[n], write); err != nil {
			return err
		}
	}
	return nil
}

// writeFloats streams vals as little-endian float32 through fn in 64 KiB pieces.
func writeFloats(buf []byte, vals []float32, fn func([]byte) (int, error)) []byte {
	buf, _ = writeFloatsErr(buf, vals, fn)
	return buf
}

func writeFloatsErr(buf []byte, vals []float32, fn func([]byte) (int, error)) ([]byte, error) {
	for i, v := range vals {
		buf = binary.LittleEndian.AppendUint32(buf, math.Float32bits(v))
		if len(buf) >= 1<<16 || i == len(vals)-1 {
			if _, err := fn(buf); err != nil {
				return buf, err
			}
			buf = buf[:0]
		}
	}
	return buf, nil
}

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
	if f := binary.LittleEndian.Uint32(pre[8:]); f != ExportFormatVersion {
		return nil, fmt.Errorf("%w: export format %d, want %d", ErrCorrupt, f, ExportFormatVersion)
	}
	n := binary.LittleEndian.Uint32(pre[12:])
	if n > 1<<30 {
		return nil, fmt.Errorf("%w: export header of %d bytes", ErrCorrupt, n)
	}
	hdr := make([]byte, n)
	if _, err := io.ReadFull(r, hdr); err != nil {
		return nil, fmt.Errorf("%w: export header: %v", ErrCorrupt, err)
	}
	var h ExportHeader
	if err := json.Unmarshal(hdr, &h); err != nil {
		return nil, fmt.Errorf("%w: export header: %v", ErrCorrupt, err)
	}
	return &h, nil
}
