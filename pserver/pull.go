package pserver

import (
	"context"
	"math"
	"slices"

	pb "github.com/raftps/raftps/api/raftpspb"
	"github.com/raftps/raftps/pserver/wire"
)

// Pull returns the values the request names (dense blocks by name and block,
// embedding rows by name and rows); an empty request returns every dense
// block of the slot, in (param, block) order. A row never pushed is not
// stored: its initial value (seeded by seed, name and row) is computed into
// the response, so pulls never grow the slot. Data is packed little-endian
// float32.
//
// The request is validated and its response sized before anything is
// allocated: an unknown param, a block or row out of range or in another
// slot, a block or row named twice, rows on a dense param, or a response
// above MaxPullBytes are ErrInvalid (InvalidArgument) naming the param.
// A request naming a replica epoch the slot does not serve under, or
// any epoch once the slot was deposed, is ErrEpoch (checkEpoch). Errors:
// ErrFenced, ErrEpoch, ErrInvalid.
func (s *Slot) Pull(ctx context.Context, req *pb.PullRequest) (*pb.PullResponse, error) {
	resp, _, err := s.pull(ctx, req)
	return resp, err
}

// pull is Pull, also returning the buffer every tensor of a whole-slot
// reply aliases (see pullAll; nil for a named pull).
func (s *Slot) pull(_ context.Context, req *pb.PullRequest) (*pb.PullResponse, []byte, error) {
	if err := s.checkFence(); err != nil {
		return nil, nil, err
	}
	if err := s.checkEpoch(req.GetEpoch()); err != nil {
		return nil, nil, err
	}
	if req.GetCheckpoint() {
		s.pullSnapshot()
	}
	resp, buf, err := s.read(req)
	if err = s.acked(err); err != nil {
		wire.PutDataBuf(buf)
		return nil, nil, err
	}
	return resp, buf, nil
}

// read is pull after its fence check.
func (s *Slot) read(req *pb.PullRequest) (*pb.PullResponse, []byte, error) {
	if len(req.GetTensors()) == 0 {
		resp, buf := s.pullAll(math.MaxInt)
		return resp, buf, nil
	}
	params, total, err := s.checkPull(req.GetTensors())
	if err != nil {
		return nil, nil, err
	}
	buf := make([]byte, total)
	var scratch []float32
	s.mu.RLock()
	defer s.mu.RUnlock()
	resp := &pb.PullResponse{Version: s.version, Incarnation: s.incarnation, Tensors: make([]*pb.Tensor, 0, len(params))}
	off := 0
	for i, t := range req.GetTensors() {
		p := params[i]
		out := &pb.Tensor{Name: t.GetName()}
		if p.Embedding {
			d := int(p.Dim)
			out.Rows = slices.Clone(t.GetRows())
			n := 4 * d * len(out.Rows)
			out.Data = buf[off : off+n : off+n]
			for j, r := range out.Rows {
				dst := out.Data[4*j*d : 4*(j+1)*d]
				if e := s.rows[key{int32(p.Index), r}]; e != nil {
					wire.PutFloat32s(dst, e.values)
					continue
				}
				if cap(scratch) < d {
					scratch = make([]float32, d)
				}
				initValues(scratch[:d], s.spec.GetSeed(), p, 'r', r)
				wire.PutFloat32s(dst, scratch[:d])
			}
		} else {
			out.Block = t.GetBlock()
			v := s.dense[key{int32(p.Index), t.GetBlock()}].values
			n := 4 * len(v)
			out.Data = buf[off : off+n : off+n]
			wire.PutFloat32s(out.Data, v)
		}
		off += len(out.Data)
		resp.Tensors = append(resp.Tensors, out)
	}
	return resp, nil, nil
}

// checkPull validates a named pull and returns each tensor's param and the
// response's data bytes. It allocates in proportion to the request only.
// No lock is needed: the layout and ownership are immutable.
func (s *Slot) checkPull(ts []*pb.Tensor) ([]*wire.ParamLayout, int, error) {
	params := make([]*wire.ParamLayout, len(ts))
	seen := make(map[key]struct{}, len(ts))
	var total int64
	for i, t := range ts {
		p, ok := s.layout.Param(t.GetName())
		if !ok {
			return nil, 0, wire.Errorf(wire.ErrInvalid, "pull: unknown param %q", t.GetName())
		}
		params[i] = p
		var n int64 // float32s this tensor adds to the response
		if p.Embedding {
			for _, r := range t.GetRows() {
				if err := s.checkRow(p, r); err != nil {
					return nil, 0, err
				}
				k := key{int32(p.Index), r}
				if _, dup := seen[k]; dup {
					return nil, 0, wire.Errorf(wire.ErrInvalid, "pull: param %q row %d named twice", p.Spec.GetName(), r)
				}
				seen[k] = struct{}{}
			}
			// Rows are distinct and in range, so len(rows) <= buckets and
			// the product stays below shape.MaxElements.
			n = int64(len(t.GetRows())) * p.Dim
		} else {
			if len(t.GetRows()) != 0 {
				return nil, 0, wire.Errorf(wire.ErrInvalid, "pull: param %q is dense; rows given", p.Spec.GetName())
			}
			b := t.GetBlock()
			if err := s.checkBlock(p, b); err != nil {
				return nil, 0, err
			}
			k := key{int32(p.Index), b}
			if _, dup := seen[k]; dup {
				return nil, 0, wire.Errorf(wire.ErrInvalid, "pull: param %q block %d named twice", p.Spec.GetName(), b)
			}
			seen[k] = struct{}{}
			lo, hi := s.layout.BlockRange(p, b)
			n = hi - lo
		}
		if total += 4 * n; total > wire.MaxPullBytes {
			return nil, 0, wire.Errorf(wire.ErrInvalid, "pull: param %q: response would exceed %d bytes; split the request", p.Spec.GetName(), int64(wire.MaxPullBytes))
		}
	}
	return params, int(total), nil
}

// pullAll copies every dense block of the slot into one buffer (from the
// data pool, see getDataBuf) and returns a response whose tensors alias
// it, and the buffer, which nothing else references: the Server lends it
// to the tensor codec, which returns it to the pool once the reply is on
// the wire (lendReply). Nil if the data would be more than limit bytes.
func (s *Slot) pullAll(limit int) (*pb.PullResponse, []byte) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	total := 0
	for _, k := range s.denseKeys {
		total += len(s.dense[k].values)
	}
	if 4*total > limit {
		return nil, nil
	}
	buf := wire.GetDataBuf(4 * total) // every byte is written below
	resp := &pb.PullResponse{Version: s.version, Incarnation: s.incarnation, Tensors: make([]*pb.Tensor, 0, len(s.denseKeys))}
	off := 0
	for _, k := range s.denseKeys {
		v := s.dense[k].values
		b := buf[off : off+4*len(v) : off+4*len(v)]
		wire.PutFloat32s(b, v)
		off += len(b)
		resp.Tensors = append(resp.Tensors, &pb.Tensor{Name: s.layout.Params[k.p].Spec.GetName(), Block: k.i, Data: b})
	}
	return resp, buf
}

// newRow returns embedding row r of p at its initial value with zero
// optimizer state, not stored (only a committed push stores rows).
func (s *Slot) newRow(p *wire.ParamLayout, r int64) *entry {
	e := newEntry(int(p.Dim), len(s.opt.StateSlots()))
	initValues(e.values, s.spec.GetSeed(), p, 'r', r)
	return e
}

func (s *Slot) checkRow(p *wire.ParamLayout, r int64) error {
	if r < 0 || r >= p.Buckets {
		return wire.Errorf(wire.ErrInvalid, "param %q: row %d out of range [0, %d)", p.Spec.GetName(), r, p.Buckets)
	}
	if v := s.layout.VShardOfRow(p, r); !s.owned[v] {
		return wire.Errorf(wire.ErrInvalid, "param %q: row %d is in vshard %d, not served by slot %d", p.Spec.GetName(), r, v, s.slot)
	}
	return nil
}

func (s *Slot) checkBlock(p *wire.ParamLayout, b int64) error {
	if b < 0 || b >= p.Blocks {
		return wire.Errorf(wire.ErrInvalid, "param %q: block %d out of range [0, %d)", p.Spec.GetName(), b, p.Blocks)
	}
	if v := s.layout.VShardOfBlock(p, b); !s.owned[v] {
		return wire.Errorf(wire.ErrInvalid, "param %q: block %d is in vshard %d, not served by slot %d", p.Spec.GetName(), b, v, s.slot)
	}
	return nil
}

// Bounds on what a push may carry. They keep every finite gradient from
// poisoning the parameters through overflow: with |g| <= MaxGradient, g² and
// Adam's v stay far inside float32, and Σ examples·g of a sync step is
// accumulated in float64 from at most MaxExamples per push.
const (
	// MaxGradient bounds |g| of every gradient element; a larger, NaN or
	// Inf element is ErrInvalid.
	MaxGradient = 1e12
	// MaxTrainerIDLen bounds the trainer id of a push or LeaveStep (slots
	// remember ids: push ids, trainers away); a longer one is ErrInvalid.
	MaxTrainerIDLen = 256
	// MaxExamples bounds PushRequest.examples (the weight of a push in the
	// sync average); a larger or negative value is ErrInvalid.
	MaxExamples = 1 << 32
)
