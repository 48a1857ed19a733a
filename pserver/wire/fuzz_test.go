package wire

import (
	"bytes"
	"slices"
	"testing"

	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/proto"

	pb "github.com/raftps/raftps/api/raftpspb"
)

// wireOf splits b into 7-byte buffers, as gRPC frames would split it.
func wireOf(b []byte) mem.BufferSlice {
	var s mem.BufferSlice
	for i := 0; i < len(b); i += 7 {
		s = append(s, mem.SliceBuffer(b[i:min(i+7, len(b))]))
	}
	return s
}

func sameTensors(a, b []*pb.Tensor) bool {
	return slices.EqualFunc(a, b, func(x, y *pb.Tensor) bool {
		return x.GetName() == y.GetName() && x.GetBlock() == y.GetBlock() && slices.Equal(x.GetRows(), y.GetRows()) && bytes.Equal(x.GetData(), y.GetData())
	})
}

// FuzzTensorCodec decodes arbitrary bytes as PushRequest, PullResponse and
// into a Client's pull sink. The codec must never panic; whatever it
// accepts, the protobuf codec reads the same way (when it accepts the bytes
// too), what it writes back is read by protobuf as the same message, and
// the sink never writes outside its slot's blocks or resizes an array.
func FuzzTensorCodec(f *testing.F) {
	c := tensorCodec{}
	for _, m := range []proto.Message{
		&pb.PushRequest{Job: "j", Slot: 1, Trainer: "t", Version: 5, Step: 5, Examples: 3, PushId: 9, Grads: []*pb.Tensor{
			{Name: "w", Block: 1, Data: packed(1, 2)}, {Name: "e", Rows: []int64{4, 1 << 40}, Data: packed(1, 2)}}},
		&pb.PullResponse{Version: 7, Incarnation: 2, Tensors: []*pb.Tensor{{Name: "w", Block: 0, Data: packed(1, 2, 3, 4)}, {Name: "w", Block: 2, Data: packed(1, 2)}}},
		&pb.ReplicateRequest{Job: "j", Slot: 1, Epoch: 12, Seq: 4, Step: 4, Incarnation: 2, LrScale: 2, PushIds: []*pb.PushID{{Trainer: "t", PushId: 3}},
			Grads: []*pb.Tensor{{Name: "w", Block: 1, Data: packed(1, 2)}, {Name: "e", Rows: []int64{4}, Data: packed(1, 2)}}},
	} {
		bs, err := c.Marshal(m)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(bs.Materialize())
	}
	spec := &pb.JobSpec{Name: "j", DenseBlockSize: 4, NumVirtualShards: 4, NumPservers: 2,
		Params: []*pb.ParamSpec{{Name: "w", Shape: []int64{10}}, {Name: "e", Shape: []int64{8, 2}, Embedding: true}}}
	l, err := NewLayout(spec, 2)
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		var push pb.PushRequest
		if err := c.Unmarshal(wireOf(b), &push); err == nil {
			var ref pb.PushRequest
			if proto.Unmarshal(b, &ref) == nil {
				if push.Job != ref.Job || push.Slot != ref.Slot || push.Trainer != ref.Trainer || push.Version != ref.Version ||
					push.Step != ref.Step || push.Examples != ref.Examples || push.PushId != ref.PushId || !sameTensors(push.Grads, ref.Grads) {
					t.Fatalf("push decoded differently:\ntensor codec %v\nprotobuf     %v", &push, &ref)
				}
			}
			out, err := c.Marshal(&push)
			if err != nil {
				t.Fatal(err)
			}
			var back pb.PushRequest
			if err := proto.Unmarshal(out.Materialize(), &back); err == nil && !proto.Equal(&back, &push) {
				t.Fatalf("push round trip:\n%v\n%v", &push, &back)
			}
			ReleaseTensors(push.Grads)
		}
		var rep pb.ReplicateRequest
		if err := c.Unmarshal(wireOf(b), &rep); err == nil {
			var ref pb.ReplicateRequest
			if proto.Unmarshal(b, &ref) == nil {
				if rep.Job != ref.Job || rep.Slot != ref.Slot || rep.Epoch != ref.Epoch || rep.Seq != ref.Seq || rep.Step != ref.Step ||
					rep.Incarnation != ref.Incarnation || rep.LrScale != ref.LrScale && rep.LrScale == rep.LrScale || !sameTensors(rep.Grads, ref.Grads) ||
					!slices.EqualFunc(rep.PushIds, ref.PushIds, func(x, y *pb.PushID) bool { return x.Trainer == y.Trainer && x.PushId == y.PushId }) {
					t.Fatalf("replicate decoded differently:\ntensor codec %v\nprotobuf     %v", &rep, &ref)
				}
			}
			out, err := c.Marshal(&rep)
			if err != nil {
				t.Fatal(err)
			}
			var back pb.ReplicateRequest
			if err := proto.Unmarshal(out.Materialize(), &back); err == nil && !proto.Equal(&back, &rep) {
				t.Fatalf("replicate round trip:\n%v\n%v", &rep, &back)
			}
			ReleaseTensors(rep.Grads)
		}
		var pull pb.PullResponse
		if err := c.Unmarshal(wireOf(b), &pull); err == nil {
			var ref pb.PullResponse
			if proto.Unmarshal(b, &ref) == nil && (pull.Version != ref.Version || pull.Incarnation != ref.Incarnation || !sameTensors(pull.Tensors, ref.Tensors)) {
				t.Fatalf("pull decoded differently:\ntensor codec %v\nprotobuf     %v", &pull, &ref)
			}
		}
		sink := &PullSink{Layout: l, Slot: 0, Dst: map[string][]float32{"w": make([]float32, 10)}}
		before := slices.Clone(sink.Dst["w"])
		_ = c.Unmarshal(wireOf(b), sink)
		w := sink.Dst["w"]
		if len(w) != 10 {
			t.Fatalf("sink resized w to %d", len(w))
		}
		p, _ := l.Param("w")
		for b := range p.Blocks {
			if l.SlotOfBlock(p, b) == 0 {
				continue
			}
			lo, hi := l.BlockRange(p, b)
			if !slices.Equal(w[lo:hi], before[lo:hi]) {
				t.Fatalf("sink of slot 0 wrote block %d of slot %d", b, l.SlotOfBlock(p, b))
			}
		}
	})
}

func packed(f ...float32) []byte {
	b := make([]byte, 4*len(f))
	PutFloat32s(b, f)
	return b
}
