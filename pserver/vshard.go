package pserver

import (
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"slices"

	pb "github.com/raftps/raftps/api/raftpspb"
	"github.com/raftps/raftps/pserver/wire"
)

// Vshard blob format, version 1. All integers little-endian.
//
//	magic       [4]byte  "RPVS"
//	format      uint16   1
//	flags       uint16   0
//	vshard      int32
//	num_vshards int32
//	block_size  int64
//	version     int64
//	step        int64
//	job         str      (str = uint32 length + UTF-8 bytes)
//	optimizer   str
//	nslots      uint32, then nslots × str   (optimizer state names, e.g. "m", "v")
//	nparams     uint32, then per param:
//	              name str, embedding uint8, rank uint32, rank × int64 shape
//	nentries    uint32, then per entry:
//	              param uint32 (index into params), index int64 (block or row),
//	              t int64 (updates applied), n uint32 (float32 count)
//	data        per entry in order: n float32 values, then nslots × n float32 state
//	crc         uint32   CRC-32C (Castagnoli) of every preceding byte
//
// Entries are sorted by (param, index); a param's embedding flag says
// whether index is a dense block or an embedding row.
const (
	vshardMagic  = "RPVS"
	vshardFormat = 1
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// EncodeVShard encodes vshard v of snap in the vshard blob format (see above).
func EncodeVShard(snap *SlotSnapshot, v int32) ([]byte, error) {
	vs, ok := snap.VShards[v]
	if !ok {
		return nil, fmt.Errorf("pserver: encode: vshard %d not in snapshot of slot %d", v, snap.Slot)
	}
	return vs.Encode(), nil
}

// Encode encodes the vshard in the vshard blob format.
func (vs *VShardSnapshot) Encode() []byte {
	size := 64 + len(vs.Job) + len(vs.Optimizer)
	for _, n := range vs.StateSlots {
		size += 4 + len(n)
	}
	for _, p := range vs.Params {
		size += 9 + len(p.Name) + 8*len(p.Shape)
	}
	for _, e := range vs.Entries {
		size += 24 + 4*len(e.Values)*(1+len(vs.StateSlots))
	}
	b := make([]byte, 0, size)
	le := binary.LittleEndian
	str := func(s string) []byte { b = le.AppendUint32(b, uint32(len(s))); return append(b, s...) }
	b = append(b, vshardMagic...)
	b = le.AppendUint16(b, vshardFormat)
	b = le.AppendUint16(b, 0)
	b = le.AppendUint32(b, uint32(vs.VShard))
	b = le.AppendUint32(b, uint32(vs.NumVShards))
	b = le.AppendUint64(b, uint64(vs.BlockSize))
	b = le.AppendUint64(b, uint64(vs.Version))
	b = le.AppendUint64(b, uint64(vs.Step))
	b = str(vs.Job)
	b = str(vs.Optimizer)
	b = le.AppendUint32(b, uint32(len(vs.StateSlots)))
	for _, n := range vs.StateSlots {
		b = str(n)
	}
	b = le.AppendUint32(b, uint32(len(vs.Params)))
	for _, p := range vs.Params {
		b = str(p.Name)
		emb := byte(0)
		if p.Embedding {
			emb = 1
		}
		b = append(b, emb)
		b = le.AppendUint32(b, uint32(len(p.Shape)))
		for _, d := range p.Shape {
			b = le.AppendUint64(b, uint64(d))
		}
	}
	b = le.AppendUint32(b, uint32(len(vs.Entries)))
	for _, e := range vs.Entries {
		b = le.AppendUint32(b, uint32(e.Param))
		b = le.AppendUint64(b, uint64(e.Index))
		b = le.AppendUint64(b, uint64(e.T))
		b = le.AppendUint32(b, uint32(len(e.Values)))
	}
	for _, e := range vs.Entries {
		b = appendFloats(b, e.Values)
		for _, st := range e.State {
			b = appendFloats(b, st)
		}
	}
	return le.AppendUint32(b, crc32.Checksum(b, castagnoli))
}

func appendFloats(b []byte, f []float32) []byte {
	n := len(b)
	b = slices.Grow(b, 4*len(f))[:n+4*len(f)]
	wire.PutFloat32s(b[n:], f)
	return b
}

// reader decodes with bounds checks; the first failure sticks.
type reader struct {
	b   []byte
	err error
}

func (r *reader) take(n int, what string) []byte {
	if r.err != nil {
		return nil
	}
	if n < 0 || n > len(r.b) {
		r.err = fmt.Errorf("%w: truncated reading %s (need %d bytes, have %d)", wire.ErrCorrupt, what, n, len(r.b))
		return nil
	}
	out := r.b[:n]
	r.b = r.b[n:]
	return out
}
func (r *reader) u8(what string) uint8 {
	if b := r.take(1, what); b != nil {
		return b[0]
	}
	return 0
}
func (r *reader) u16(what string) uint16 {
	if b := r.take(2, what); b != nil {
		return binary.LittleEndian.Uint16(b)
	}
	return 0
}
func (r *reader) u32(what string) uint32 {
	if b := r.take(4, what); b != nil {
		return binary.LittleEndian.Uint32(b)
	}
	return 0
}
func (r *reader) u64(what string) uint64 {
	if b := r.take(8, what); b != nil {
		return binary.LittleEndian.Uint64(b)
	}
	return 0
}
func (r *reader) str(what string) string {
	n := r.u32(what)
	return string(r.take(int(n), what))
}

// count reads a uint32 count of items of at least minSize bytes each,
// refusing counts the remaining bytes cannot hold (no huge allocations from
// corrupt input).
func (r *reader) count(minSize int, what string) int {
	n := int(r.u32(what))
	if r.err == nil && n*minSize > len(r.b) {
		r.err = fmt.Errorf("%w: %s count %d exceeds remaining %d bytes", wire.ErrCorrupt, what, n, len(r.b))
		return 0
	}
	return n
}

// DecodeVShard decodes a vshard blob (format above), checking magic, format
// version, CRC-32C and every length. Errors wrap ErrCorrupt, or
// ErrNewerFormat for a format version above this build's; it never panics
// on bad input.
func DecodeVShard(blob []byte) (*VShardSnapshot, error) {
	if len(blob) < 8+4 {
		return nil, fmt.Errorf("%w: %d bytes is too short", wire.ErrCorrupt, len(blob))
	}
	if string(blob[:4]) != vshardMagic {
		return nil, fmt.Errorf("%w: bad magic %q", wire.ErrCorrupt, blob[:4])
	}
	// The envelope (magic, format, CRC-32C trailer) is every format's: the
	// CRC first, so that a damaged format field reads as damage, not as a
	// newer raftps.
	body, sum := blob[:len(blob)-4], binary.LittleEndian.Uint32(blob[len(blob)-4:])
	if got := crc32.Checksum(body, castagnoli); got != sum {
		return nil, fmt.Errorf("%w: CRC-32C %08x, want %08x (truncated or damaged)", wire.ErrCorrupt, got, sum)
	}
	if f := binary.LittleEndian.Uint16(blob[4:]); f > vshardFormat {
		return nil, fmt.Errorf("%w: format %d, this build reads formats up to %d; upgrade this node (`raftps version`)", wire.ErrNewerFormat, f, vshardFormat)
	} else if f != vshardFormat {
		return nil, fmt.Errorf("%w: unknown format version %d", wire.ErrCorrupt, f)
	}
	r := &reader{b: body[8:]}
	vs := &VShardSnapshot{}
	vs.VShard = int32(r.u32("vshard"))
	vs.NumVShards = int32(r.u32("num_vshards"))
	vs.BlockSize = int64(r.u64("block_size"))
	vs.Version = int64(r.u64("version"))
	vs.Step = int64(r.u64("step"))
	vs.Job = r.str("job")
	vs.Optimizer = r.str("optimizer")
	ns := r.count(4, "state slots")
	for range ns {
		vs.StateSlots = append(vs.StateSlots, r.str("state slot name"))
	}
	np := r.count(9, "params")
	for range np {
		p := ParamInfo{Name: r.str("param name"), Embedding: r.u8("embedding") == 1}
		rank := r.count(8, "rank")
		for range rank {
			p.Shape = append(p.Shape, int64(r.u64("shape")))
		}
		vs.Params = append(vs.Params, p)
	}
	ne := r.count(24, "entries")
	ns1 := len(vs.StateSlots) + 1
	vs.Entries = make([]EntrySnapshot, ne)
	var total int
	for i := range vs.Entries {
		e := &vs.Entries[i]
		e.Param = int32(r.u32("entry param"))
		e.Index = int64(r.u64("entry index"))
		e.T = int64(r.u64("entry t"))
		n := int(r.u32("entry length"))
		if r.err == nil && (e.Param < 0 || int(e.Param) >= len(vs.Params)) {
			r.err = fmt.Errorf("%w: entry %d names param %d of %d", wire.ErrCorrupt, i, e.Param, len(vs.Params))
		}
		total += n * ns1 * 4
		if r.err == nil && total > len(r.b) {
			r.err = fmt.Errorf("%w: entries need more data than the blob holds", wire.ErrCorrupt)
		}
		if r.err != nil {
			return nil, r.err
		}
		e.Values = make([]float32, n)
	}
	if r.err != nil {
		return nil, r.err
	}
	if total != len(r.b) {
		return nil, fmt.Errorf("%w: %d data bytes, entries describe %d", wire.ErrCorrupt, len(r.b), total)
	}
	for i := range vs.Entries {
		e := &vs.Entries[i]
		n := len(e.Values)
		wire.GetFloat32s(e.Values, r.take(4*n, "values"))
		e.State = make([][]float32, len(vs.StateSlots))
		for j := range e.State {
			e.State[j] = make([]float32, n)
			wire.GetFloat32s(e.State[j], r.take(4*n, "state"))
		}
	}
	return vs, r.err
}

// RestoreSlot builds slot `slot` of numPservers for spec from vshard blobs
// (keyed by vshard; extra vshards are ignored). Every vshard the slot owns
// (v mod numPservers == slot) must be present, whatever number of pservers
// wrote it: repartitioning is a different choice of blobs. Values,
// optimizer state and per-entry update counts are restored exactly; the
// slot's version and step are the largest among its vshards.
//
// Restored state is not trusted: values and optimizer state must be
// finite, second-moment state (Adam's v, Adagrad's accumulator) >= 0 and
// update counts in [0, MaxUpdates] (Adam with t = -1 divides by zero), or
// the blob is ErrCorrupt; a block or row present twice is ErrIncompatible.
//
// Errors wrap ErrCorrupt (bad blob), ErrIncompatible (blob does not fit
// spec: number of vshards, block size, optimizer, param kind/shape, missing,
// misplaced or repeated blocks and rows) or ErrMissingVShard.
func RestoreSlot(spec *pb.JobSpec, slot, numPservers int32, blobs map[int32][]byte) (*Slot, error) {
	s, err := newEmptySlot(spec, slot, numPservers)
	if err != nil {
		return nil, err
	}
	l := s.layout
	for v := int32(0); v < l.NumVShards; v++ {
		if !s.owned[v] {
			continue
		}
		blob, ok := blobs[v]
		if !ok {
			return nil, fmt.Errorf("%w: vshard %d of slot %d", wire.ErrMissingVShard, v, slot)
		}
		vs, err := DecodeVShard(blob)
		if err != nil {
			return nil, fmt.Errorf("vshard %d: %w", v, err)
		}
		if err := s.restoreVShard(v, vs); err != nil {
			return nil, fmt.Errorf("vshard %d: %w", v, err)
		}
		s.version = max(s.version, vs.Version)
		s.step = max(s.step, vs.Step)
	}
	// Every dense block must have been restored.
	for _, p := range l.Params {
		if p.Embedding {
			continue
		}
		for b := int64(0); b < p.Blocks; b++ {
			if s.owned[l.VShardOfBlock(p, b)] && s.dense[key{int32(p.Index), b}] == nil {
				return nil, fmt.Errorf("%w: param %q block %d missing from vshard %d", wire.ErrIncompatible, p.Spec.GetName(), b, l.VShardOfBlock(p, b))
			}
		}
	}
	s.sortKeys()
	return s, nil
}

func (s *Slot) restoreVShard(v int32, vs *VShardSnapshot) error {
	l := s.layout
	if vs.VShard != v || vs.NumVShards != l.NumVShards || vs.BlockSize != l.BlockSize {
		return fmt.Errorf("%w: blob is vshard %d/%d block size %d, want %d/%d block size %d",
			wire.ErrIncompatible, vs.VShard, vs.NumVShards, vs.BlockSize, v, l.NumVShards, l.BlockSize)
	}
	if vs.Optimizer != s.opt.opt.name() || !slices.Equal(vs.StateSlots, s.opt.opt.stateSlots()) {
		return fmt.Errorf("%w: blob optimizer %q %v, spec wants %q", wire.ErrIncompatible, vs.Optimizer, vs.StateSlots, s.opt.opt.name())
	}
	// Map blob params to spec params by name, checking kind and shape.
	pm := make([]*wire.ParamLayout, len(vs.Params))
	for i, pi := range vs.Params {
		p, ok := l.Param(pi.Name)
		if !ok {
			continue // a param dropped from the spec: its entries are ignored
		}
		if p.Embedding != pi.Embedding || !slices.Equal(p.Spec.GetShape(), pi.Shape) {
			return fmt.Errorf("%w: param %q is embedding=%v shape %v in blob, embedding=%v shape %v in spec",
				wire.ErrIncompatible, pi.Name, pi.Embedding, pi.Shape, p.Embedding, p.Spec.GetShape())
		}
		pm[i] = p
	}
	for _, es := range vs.Entries {
		p := pm[es.Param]
		if p == nil {
			continue
		}
		if err := s.opt.checkEntry(es); err != nil {
			return fmt.Errorf("%w: param %q index %d: %v", wire.ErrCorrupt, p.Spec.GetName(), es.Index, err)
		}
		e := &entry{values: es.Values, state: es.State, t: es.T}
		k := key{int32(p.Index), es.Index}
		if p.Embedding {
			if es.Index < 0 || es.Index >= p.Buckets || l.VShardOfRow(p, es.Index) != v || int64(len(es.Values)) != p.Dim {
				return fmt.Errorf("%w: param %q row %d (len %d) does not belong in vshard %d", wire.ErrIncompatible, p.Spec.GetName(), es.Index, len(es.Values), v)
			}
			if s.rows[k] != nil {
				return fmt.Errorf("%w: param %q row %d twice", wire.ErrIncompatible, p.Spec.GetName(), es.Index)
			}
			s.rows[k] = e
			continue
		}
		if es.Index < 0 || es.Index >= p.Blocks || l.VShardOfBlock(p, es.Index) != v {
			return fmt.Errorf("%w: param %q block %d does not belong in vshard %d", wire.ErrIncompatible, p.Spec.GetName(), es.Index, v)
		}
		lo, hi := l.BlockRange(p, es.Index)
		if int64(len(es.Values)) != hi-lo {
			return fmt.Errorf("%w: param %q block %d has %d values, want %d", wire.ErrIncompatible, p.Spec.GetName(), es.Index, len(es.Values), hi-lo)
		}
		if s.dense[k] != nil {
			return fmt.Errorf("%w: param %q block %d twice", wire.ErrIncompatible, p.Spec.GetName(), es.Index)
		}
		s.addDense(k, e)
	}
	return nil
}

// ValueRun is a run of one parameter's values from a vshard blob: a dense
// block or an embedding row, without optimizer state. It has the fields of
// checkpoint.Block, so cmd can adapt DecodeVShardValues to
// checkpoint.Decoder (export and inspection of checkpoints).
type ValueRun struct {
	Name string
	// Shape is the whole parameter's shape.
	Shape []int64
	// Offset is the index of Data[0] in the parameter flattened row-major
	// (block·block_size for a dense block, row·dim for an embedding row).
	Offset int64
	Data   []float32
}

// DecodeVShardValues decodes a vshard blob into value runs, in
// (param, block|row) order. Errors wrap ErrCorrupt.
func DecodeVShardValues(blob []byte) ([]ValueRun, error) {
	vs, err := DecodeVShard(blob)
	if err != nil {
		return nil, err
	}
	runs := make([]ValueRun, 0, len(vs.Entries))
	for _, e := range vs.Entries {
		p := vs.Params[e.Param]
		off := e.Index * vs.BlockSize
		if p.Embedding {
			if len(p.Shape) != 2 {
				return nil, fmt.Errorf("%w: embedding %q has shape %v", wire.ErrCorrupt, p.Name, p.Shape)
			}
			off = e.Index * p.Shape[1]
		}
		runs = append(runs, ValueRun{Name: p.Name, Shape: p.Shape, Offset: off, Data: e.Values})
	}
	return runs, nil
}
