package pserver

import (
	"encoding/binary"
	"fmt"
	"hash/fnv"
	"math"
	"math/rand/v2"

	pb "github.com/raftps/raftps/api/raftpspb"
	"github.com/raftps/raftps/pserver/wire"
)

// DefaultInitScale is the uniform bound / normal stddev when ParamSpec.scale is 0.
const DefaultInitScale = 0.01

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
func initValues(dst []float32, seed int64, p *wire.ParamLayout, kind byte, index int64) {
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
