package wire

import (
	"encoding/binary"
	"math"

	pb "github.com/raftps/raftps/api/raftpspb"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/protowire"
)

// The ReplicateRequest part of tensorCodec (codec.go): a primary's update
// to a backup, its gradients moved as a push's are.

// marshalReplicate writes a ReplicateRequest (a primary's update to a
// backup), its gradients referenced in place as a push's are.
func marshalReplicate(m *pb.ReplicateRequest) mem.BufferSlice {
	w := &sliceWriter{}
	w.stringField(1, m.Job)
	w.varintField(2, uint64(int64(m.Slot)))
	w.varintField(3, uint64(m.Epoch))
	w.varintField(4, uint64(m.Seq))
	w.varintField(5, uint64(m.Step))
	w.varintField(6, uint64(m.Incarnation))
	if m.LrScale != 0 {
		w.hdr = protowire.AppendTag(w.hdr, 8, protowire.Fixed64Type)
		w.hdr = protowire.AppendFixed64(w.hdr, math.Float64bits(m.LrScale))
	}
	for _, id := range m.PushIds {
		size := 0
		if id.Trainer != "" {
			size += protowire.SizeTag(1) + protowire.SizeBytes(len(id.Trainer))
		}
		if id.PushId != 0 {
			size += protowire.SizeTag(2) + protowire.SizeVarint(id.PushId)
		}
		w.hdr = protowire.AppendTag(w.hdr, 9, protowire.BytesType)
		w.hdr = protowire.AppendVarint(w.hdr, uint64(size))
		w.stringField(1, id.Trainer)
		w.varintField(2, id.PushId)
	}
	for _, t := range m.Grads {
		w.tensor(7, t)
	}
	return w.finish()
}

// replicateRequest decodes a ReplicateRequest, its gradients read from
// the received frames into data-pool buffers (r.pooled), which the
// backup's service returns once the update is applied.
func (r *wireReader) replicateRequest(m *pb.ReplicateRequest) error {
	for r.rem > 0 {
		num, typ, err := r.tag()
		if err != nil {
			return err
		}
		switch {
		case typ == protowire.VarintType:
			v, err := r.uvarint()
			if err != nil {
				return err
			}
			switch num {
			case 2:
				m.Slot = int32(v)
			case 3:
				m.Epoch = int64(v)
			case 4:
				m.Seq = int64(v)
			case 5:
				m.Step = int64(v)
			case 6:
				m.Incarnation = int64(v)
			}
		case num == 8 && typ == protowire.Fixed64Type:
			var b [8]byte
			if err := r.full(b[:]); err != nil {
				return err
			}
			m.LrScale = math.Float64frombits(binary.LittleEndian.Uint64(b[:]))
		case num == 1 && typ == protowire.BytesType:
			if m.Job, err = r.str(); err != nil {
				return err
			}
		case (num == 7 || num == 9) && typ == protowire.BytesType:
			n, err := r.length()
			if err != nil {
				return err
			}
			if num == 7 {
				t := &pb.Tensor{}
				err = r.sub(n, func() error { return r.tensor(t, nil) })
				m.Grads = append(m.Grads, t)
			} else {
				id := &pb.PushID{}
				err = r.sub(n, func() error { return r.pushID(id) })
				m.PushIds = append(m.PushIds, id)
			}
			if err != nil {
				return err
			}
		default:
			if err := r.skip(typ); err != nil {
				return err
			}
		}
	}
	return nil
}

// pushID decodes one PushID.
func (r *wireReader) pushID(id *pb.PushID) error {
	for r.rem > 0 {
		num, typ, err := r.tag()
		if err != nil {
			return err
		}
		switch {
		case num == 1 && typ == protowire.BytesType:
			if id.Trainer, err = r.str(); err != nil {
				return err
			}
		case num == 2 && typ == protowire.VarintType:
			if id.PushId, err = r.uvarint(); err != nil {
				return err
			}
		default:
			if err := r.skip(typ); err != nil {
				return err
			}
		}
	}
	return nil
}
