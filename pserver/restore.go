package pserver

import (
	"fmt"
	"slices"

	pb "github.com/raftps/raftps/api/raftpspb"
	"github.com/raftps/raftps/pserver/vshard"
	"github.com/raftps/raftps/pserver/wire"
)

// EncodeVShard encodes vshard v of snap in the vshard blob format (see above).
func EncodeVShard(snap *SlotSnapshot, v int32) ([]byte, error) {
	vs, ok := snap.VShards[v]
	if !ok {
		return nil, fmt.Errorf("pserver: encode: vshard %d not in snapshot of slot %d", v, snap.Slot)
	}
	return vs.Encode(), nil
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
		vs, err := vshard.Decode(blob)
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

func (s *Slot) restoreVShard(v int32, vs *vshard.Snapshot) error {
	l := s.layout
	if vs.VShard != v || vs.NumVShards != l.NumVShards || vs.BlockSize != l.BlockSize {
		return fmt.Errorf("%w: blob is vshard %d/%d block size %d, want %d/%d block size %d",
			wire.ErrIncompatible, vs.VShard, vs.NumVShards, vs.BlockSize, v, l.NumVShards, l.BlockSize)
	}
	if vs.Optimizer != s.opt.Name() || !slices.Equal(vs.StateSlots, s.opt.StateSlots()) {
		return fmt.Errorf("%w: blob optimizer %q %v, spec wants %q", wire.ErrIncompatible, vs.Optimizer, vs.StateSlots, s.opt.Name())
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
		if err := s.opt.CheckState(es.Values, es.State, es.T); err != nil {
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
