package vshard

import (
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"slices"

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
	// Magic opens every vshard blob.
	Magic = "RPVS"
	// Format is the blob format version this build writes and the highest
	// it reads.
	Format = 1
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// Snapshot is one virtual shard: the unit of checkpoint and
// repartitioning.
type Snapshot struct {
	Job        string
	VShard     int32
	NumVShards int32
	BlockSize  int64
	Version    int64
	Step       int64
	Optimizer  string
	StateSlots []string
	// Params lists the job's parameters (name, embedding, shape), so that a
	// blob can be read without the spec.
	Params  []ParamInfo
	Entries []Entry // sorted by (param, index)
}

// ParamInfo describes one parameter in a vshard blob.
type ParamInfo struct {
	Name      string
	Embedding bool
	Shape     []int64
}

// Entry is one dense block (Index = block) or embedding row
// (Index = row) of parameter Params[Param].
type Entry struct {
	Param  int32
	Index  int64
	T      int64       // updates applied
	Values []float32   // block or row values
	State  [][]float32 // one per StateSlots entry, len(Values) each
}

// Encode encodes the vshard in the vshard blob format.
func (vs *Snapshot) Encode() []byte {
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
	b = append(b, Magic...)
	b = le.AppendUint16(b, Format)
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

// Decode decodes a vshard blob (format above), checking magic, format
// version, CRC-32C and every length. Errors wrap ErrCorrupt, or
// ErrNewerFormat for a format version above this build's; it never panics
// on bad input.
func Decode(blob []byte) (*Snapshot, error) {
	if len(blob) < 8+4 {
		return nil, fmt.Errorf("%w: %d bytes is too short", wire.ErrCorrupt, len(blob))
	}
	if string(blob[:4]) != Magic {
		return nil, fmt.Errorf("%w: bad magic %q", wire.ErrCorrupt, blob[:4])
	}
	// The envelope (magic, format, CRC-32C trailer) is every format's: the
	// CRC first, so that a damaged format field reads as damage, not as a
	// newer raftps.
	body, sum := blob[:len(blob)-4], binary.LittleEndian.Uint32(blob[len(blob)-4:])
	if got := crc32.Checksum(body, castagnoli); got != sum {
		return nil, fmt.Errorf("%w: CRC-32C %08x, want %08x (truncated or damaged)", wire.ErrCorrupt, got, sum)
	}
	if f := binary.LittleEndian.Uint16(blob[4:]); f > Format {
		return nil, fmt.Errorf("%w: format %d, this build reads formats up to %d; upgrade this node (`raftps version`)", wire.ErrNewerFormat, f, Format)
	} else if f != Format {
		return nil, fmt.Errorf("%w: unknown format version %d", wire.ErrCorrupt, f)
	}
	r := &reader{b: body[8:]}
	vs := &Snapshot{}
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
	vs.Entries = make([]Entry, ne)
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

// ValueRun is a run of one parameter's values from a vshard blob: a dense
// block or an embedding row, without optimizer state. It has the fields of
// checkpoint.Block, so cmd can adapt DecodeValues to
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

// DecodeValues decodes a vshard blob into value runs, in
// (param, block|row) order. Errors wrap ErrCorrupt.
func DecodeValues(blob []byte) ([]ValueRun, error) {
	vs, err := Decode(blob)
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
