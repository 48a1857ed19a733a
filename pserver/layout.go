package pserver

import (
	"encoding/binary"
	"fmt"
	"hash/fnv"
	"math"
	"math/rand/v2"

	pb "github.com/raftps/raftps/api/raftpspb"
	"github.com/raftps/raftps/internal/shape"
	"github.com/raftps/raftps/jobspec"
)

// Defaults for JobSpec fields left zero.
const (
	DefaultNumVirtualShards = 64
	DefaultDenseBlockSize   = 65536
	// DefaultInitScale is the uniform bound / normal stddev when ParamSpec.scale is 0.
	DefaultInitScale = 0.01
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
		return nil, errorf(ErrBadSpec, "nil spec")
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
		return nil, errorf(ErrBadSpec, "num_virtual_shards %d, dense_block_size %d", l.NumVShards, l.BlockSize)
	}
	if numPservers <= 0 {
		return nil, errorf(ErrBadSpec, "num_pservers %d", numPservers)
	}
	for i, ps := range spec.GetParams() {
		if ps.GetName() == "" {
			return nil, errorf(ErrBadSpec, "param %d has no name", i)
		}
		if _, dup := l.byName[ps.GetName()]; dup {
			return nil, errorf(ErrBadSpec, "duplicate param %q", ps.GetName())
		}
		if _, ok := pb.Initializer_name[int32(ps.GetInit())]; !ok {
			return nil, errorf(ErrBadSpec, "param %q: unknown initializer %d", ps.GetName(), ps.GetInit())
		}
		p := &ParamLayout{Spec: ps, Index: i, Embedding: ps.GetEmbedding(), hash: nameHash(ps.GetName())}
		size, err := shape.Elements(ps.GetShape())
		if err != nil {
			return nil, errorf(ErrBadSpec, "param %q: %v", ps.GetName(), err)
		}
		p.Size = size
		if p.Embedding {
			if len(ps.GetShape()) != 2 || ps.GetShape()[1] == 0 {
				return nil, errorf(ErrBadSpec, "embedding %q: shape %v, want [buckets, dim]", ps.GetName(), ps.GetShape())
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
		return nil, errorf(ErrBadSpec, "%v", err)
	}
	if b > jobspec.MaxJobBytes {
		return nil, errorf(ErrBadSpec, "job %q needs %d bytes of parameters and %s optimizer state, more than the cluster's limit of %d (jobspec.MaxJobBytes); it cannot be served (delete it, or resubmit it smaller)",
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

// initRNG seeds a generator from (job seed, param name, kind, index): the
// initial value of an element never depends on the number of pservers.
func initRNG(seed int64, name string, kind byte, index int64) *rand.Rand {
	h := fnv.New64a()
	var b [8]byte
	binary.LittleEndian.PutUint64(b[:], uint64(seed))
	h.Write(b[:])
	h.Write([]byte(name))
	h.Write([]byte{0, kind})
	binary.LittleEndian.PutUint64(b[:], uint64(index))
	h.Write(b[:])
	s := h.Sum64()
	return rand.New(rand.NewPCG(s, s^0x9e3779b97f4a7c15))
}

// fans returns Glorot's fan_in and fan_out for a shape: [n] -> (n, n);
// [in, out] -> (in, out); higher ranks follow Keras: the leading dims are the
// receptive field, the last two are (in, out) channels.
func fans(shape []int64) (in, out float64) {
	switch len(shape) {
	case 0:
		return 1, 1
	case 1:
		return float64(shape[0]), float64(shape[0])
	case 2:
		return float64(shape[0]), float64(shape[1])
	}
	r := 1.0
	for _, d := range shape[:len(shape)-2] {
		r *= float64(d)
	}
	return float64(shape[len(shape)-2]) * r, float64(shape[len(shape)-1]) * r
}

// initValues fills dst with the initializer of p for the given kind ('b'
// dense block, 'r' embedding row) and index, seeded by the job seed.
//
//   - INIT_ZEROS: 0.
//   - INIT_UNIFORM: U(-scale, scale).
//   - INIT_NORMAL: N(0, scale²).
//   - INIT_GLOROT: U(-a, a), a = sqrt(6 / (fan_in + fan_out)) (Glorot & Bengio 2010, eq. 16).
//
// scale 0 means DefaultInitScale.
func initValues(dst []float32, seed int64, p *ParamLayout, kind byte, index int64) {
	ps := p.Spec
	scale := ps.GetScale()
	if scale == 0 {
		scale = DefaultInitScale
	}
	switch ps.GetInit() {
	case pb.Initializer_INIT_ZEROS:
		clear(dst)
		return
	case pb.Initializer_INIT_GLOROT:
		in, out := fans(ps.GetShape())
		scale = math.Sqrt(6 / math.Max(in+out, 1))
		fallthrough
	case pb.Initializer_INIT_UNIFORM:
		r := initRNG(seed, ps.GetName(), kind, index)
		for i := range dst {
			dst[i] = float32((2*r.Float64() - 1) * scale)
		}
	case pb.Initializer_INIT_NORMAL:
		r := initRNG(seed, ps.GetName(), kind, index)
		for i := range dst {
			dst[i] = float32(r.NormFloat64() * scale)
		}
	default:
		panic(fmt.Sprintf("pserver: unknown initializer %v", ps.GetInit()))
	}
}
