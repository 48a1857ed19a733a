package wire

import (
	"encoding/binary"
	"hash/fnv"

	pb "github.com/raftps/raftps/api/raftpspb"
	"github.com/raftps/raftps/internal/shape"
	"github.com/raftps/raftps/jobspec"
)

// Defaults for JobSpec fields left zero.
const (
	DefaultNumVirtualShards = 64
	DefaultDenseBlockSize   = 65536
)

// nameHash is the 32-bit FNV-1a hash of a parameter name.
func nameHash(name string) uint32 {
	h := fnv.New32a()
	h.Write([]byte(name))
	return h.Sum32()
}

// VShardOfBlock is the virtual shard of dense block `block` of parameter
// `name` among v virtual shards: (FNV-1a-32(name) + block) mod v. Consecutive
// blocks of one tensor go to consecutive vshards, so a large tensor spreads
// over all pservers.
func VShardOfBlock(name string, block int64, v int32) int32 {
	return int32((uint64(nameHash(name)) + uint64(block)) % uint64(v))
}

// VShardOfRow is the virtual shard of embedding row `row` of parameter `name`
// among v virtual shards: FNV-1a-64(name || row as 8 bytes little-endian) mod v.
func VShardOfRow(name string, row int64, v int32) int32 {
	h := fnv.New64a()
	h.Write([]byte(name))
	var b [8]byte
	binary.LittleEndian.PutUint64(b[:], uint64(row))
	h.Write(b[:])
	return int32(h.Sum64() % uint64(v))
}

// SlotOfVShard is the pserver slot serving virtual shard v: v mod numPservers.
func SlotOfVShard(v, numPservers int32) int32 { return v % numPservers }

// ParamLayout describes how one parameter is cut.
type ParamLayout struct {
	Spec      *pb.ParamSpec
	Index     int   // position in JobSpec.params
	Size      int64 // number of float32s (dense); buckets*dim (embedding)
	Embedding bool
	Blocks    int64 // dense: ceil(Size/BlockSize)
	Buckets   int64 // embedding: rows
	Dim       int64 // embedding: row width
	hash      uint32
}

// Layout is the sharding of a job's parameters: virtual shards, dense blocks
// and the vshard -> slot map for a given number of pservers. It is immutable.
type Layout struct {
	NumVShards  int32
	NumPservers int32
	BlockSize   int64
	Params      []*ParamLayout
	byName      map[string]*ParamLayout
}

// NewLayout validates spec and computes its layout over numPservers slots.
// Zero num_virtual_shards and dense_block_size take the defaults. Shapes
// are multiplied with overflow checks (internal/shape): a negative dim or
// more than shape.MaxElements elements is ErrBadSpec, never a wrapped size.
// A job whose parameters and optimizer state (jobspec.StateBytes) exceed
// jobspec.MaxJobBytes (64 GiB, the cap SubmitJob enforces) is ErrBadSpec too,
// so a job accepted under older, looser bounds is refused before a slot,
// a restore or a client allocates its shapes.
func NewLayout(spec *pb.JobSpec, numPservers int32) (*Layout, error) {
	if spec == nil {
		return nil, Errorf(ErrBadSpec, "nil spec")
	}
	l := &Layout{
		NumVShards:  spec.GetNumVirtualShards(),
		NumPservers: numPservers,
		BlockSize:   spec.GetDenseBlockSize(),
		byName:      make(map[string]*ParamLayout),
	}
	if l.NumVShards == 0 {
		l.NumVShards = DefaultNumVirtualShards
	}
	if l.BlockSize == 0 {
		l.BlockSize = DefaultDenseBlockSize
	}
	if l.NumVShards < 0 || l.BlockSize < 0 {
		return nil, Errorf(ErrBadSpec, "num_virtual_shards %d, dense_block_size %d", l.NumVShards, l.BlockSize)
	}
	if numPservers <= 0 {
		return nil, Errorf(ErrBadSpec, "num_pservers %d", numPservers)
	}
	for i, ps := range spec.GetParams() {
		if ps.GetName() == "" {
			return nil, Errorf(ErrBadSpec, "param %d has no name", i)
		}
		if _, dup := l.byName[ps.GetName()]; dup {
			return nil, Errorf(ErrBadSpec, "duplicate param %q", ps.GetName())
		}
		if _, ok := pb.Initializer_name[int32(ps.GetInit())]; !ok {
			return nil, Errorf(ErrBadSpec, "param %q: unknown initializer %d", ps.GetName(), ps.GetInit())
		}
		p := &ParamLayout{Spec: ps, Index: i, Embedding: ps.GetEmbedding(), hash: nameHash(ps.GetName())}
		size, err := shape.Elements(ps.GetShape())
		if err != nil {
			return nil, Errorf(ErrBadSpec, "param %q: %v", ps.GetName(), err)
		}
		p.Size = size
		if p.Embedding {
			if len(ps.GetShape()) != 2 || ps.GetShape()[1] == 0 {
				return nil, Errorf(ErrBadSpec, "embedding %q: shape %v, want [buckets, dim]", ps.GetName(), ps.GetShape())
			}
			p.Buckets, p.Dim = ps.GetShape()[0], ps.GetShape()[1]
		} else {
			p.Blocks = size / l.BlockSize
			if size%l.BlockSize != 0 {
				p.Blocks++
			}
		}
		l.Params = append(l.Params, p)
		l.byName[ps.GetName()] = p
	}
	b, err := jobspec.StateBytes(spec)
	if err != nil {
		return nil, Errorf(ErrBadSpec, "%v", err)
	}
	if b > jobspec.MaxJobBytes {
		return nil, Errorf(ErrBadSpec, "job %q needs %d bytes of parameters and %s optimizer state, more than the cluster's limit of %d (jobspec.MaxJobBytes); it cannot be served (delete it, or resubmit it smaller)",
			spec.GetName(), b, spec.GetOptimizer().GetName(), jobspec.MaxJobBytes)
	}
	return l, nil
}

// Param returns the layout of the named parameter.
func (l *Layout) Param(name string) (*ParamLayout, bool) {
	p, ok := l.byName[name]
	return p, ok
}

// BlockRange returns the half-open element range [lo, hi) of dense block b of p.
func (l *Layout) BlockRange(p *ParamLayout, b int64) (lo, hi int64) {
	lo = b * l.BlockSize
	hi = min(lo+l.BlockSize, p.Size)
	return lo, hi
}

// VShardOfBlock is VShardOfBlock for p under this layout.
func (l *Layout) VShardOfBlock(p *ParamLayout, b int64) int32 {
	return int32((uint64(p.hash) + uint64(b)) % uint64(l.NumVShards))
}

// VShardOfRow is VShardOfRow for p under this layout.
func (l *Layout) VShardOfRow(p *ParamLayout, row int64) int32 {
	return VShardOfRow(p.Spec.GetName(), row, l.NumVShards)
}

// SlotOfBlock is the slot serving dense block b of p.
func (l *Layout) SlotOfBlock(p *ParamLayout, b int64) int32 {
	return SlotOfVShard(l.VShardOfBlock(p, b), l.NumPservers)
}

// SlotOfRow is the slot serving embedding row r of p.
func (l *Layout) SlotOfRow(p *ParamLayout, r int64) int32 {
	return SlotOfVShard(l.VShardOfRow(p, r), l.NumPservers)
}
