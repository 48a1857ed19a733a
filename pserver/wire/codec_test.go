package wire

import (
	"testing"

	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/proto"

	pb "github.com/raftps/raftps/api/raftpspb"
)

// TestTensorCodecIsProtobuf: the tensor codec and the protobuf codec read
// each other's bytes.
func TestTensorCodecIsProtobuf(t *testing.T) {
	big := make([]byte, 3*inlineBytes)
	for i := range big {
		big[i] = byte(i)
	}
	msgs := []proto.Message{
		&pb.PullResponse{Version: 7, Incarnation: 99, Tensors: []*pb.Tensor{
			{Name: "w", Block: 3, Data: big}, {Name: "e", Rows: []int64{1, 300, 0}, Data: packed(1, 2, 3)}, {Name: "z"}}},
		&pb.PushRequest{Job: "j", Slot: 2, Trainer: "t", Version: 5, Step: 5, Examples: 32, Incarnation: 4, Epoch: 17, Grads: []*pb.Tensor{
			{Name: "w", Block: 1, Data: big}, {Name: "e", Rows: []int64{4}, Data: packed(1)}}},
		&pb.PushRequest{Slot: -1, Pull: true, PushId: 1 << 63},
		&pb.PushResponse{Version: 8, Incarnation: 2, Tensors: []*pb.Tensor{{Name: "w", Block: 3, Data: big}, {Name: "z"}}},
		&pb.PushResponse{Version: 1},
		&pb.PullRequest{Job: "j", Slot: 1, Epoch: 17, Tensors: []*pb.Tensor{{Name: "w", Block: 2}}},
		&pb.ReplicateRequest{Job: "j", Slot: 1, Epoch: 1 << 40, Seq: 9, Step: 8, Incarnation: 3, LrScale: 1.5,
			Grads:   []*pb.Tensor{{Name: "w", Block: 1, Data: big}, {Name: "e", Rows: []int64{4, 0}, Data: packed(1, 2)}, {Name: "z"}},
			PushIds: []*pb.PushID{{Trainer: "t0", PushId: 1 << 63}, {Trainer: "", PushId: 2}, {Trainer: "t2"}}},
		&pb.ReplicateRequest{Slot: -1, Seq: 1},
	}
	c := tensorCodec{}
	for _, m := range msgs {
		bs, err := c.Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		got := m.ProtoReflect().New().Interface()
		if err := proto.Unmarshal(bs.Materialize(), got); err != nil || !proto.Equal(got, m) {
			t.Fatalf("tensor->proto %T: %v\n%v\n%v", m, err, got, m)
		}
		wire, _ := proto.Marshal(m)
		// Split the wire bytes into small buffers, as gRPC frames would be.
		var slice mem.BufferSlice
		for i := 0; i < len(wire); i += 1000 {
			slice = append(slice, mem.SliceBuffer(wire[i:min(i+1000, len(wire))]))
		}
		got = m.ProtoReflect().New().Interface()
		if err := c.Unmarshal(slice, got); err != nil || !proto.Equal(got, m) {
			t.Fatalf("proto->tensor %T: %v", m, err)
		}
		// Truncations fail cleanly.
		for n := 1; n < len(wire); n += 97 {
			_ = c.Unmarshal(mem.BufferSlice{mem.SliceBuffer(wire[:n])}, m.ProtoReflect().New().Interface())
		}
	}
}
