package psclient

import (
	"testing"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	pb "github.com/raftps/raftps/api/raftpspb"
)

// TestStreamHeaderCarriesEveryField: the first message of a PushStream
// carries every field of the push but its gradients (the server reads them
// from that message alone), so a field added to PushRequest cannot be
// dropped from streamed pushes as the incarnation once was.
func TestStreamHeaderCarriesEveryField(t *testing.T) {
	req := &pb.PushRequest{}
	m := req.ProtoReflect()
	fields := m.Descriptor().Fields()
	for i := 0; i < fields.Len(); i++ {
		f := fields.Get(i)
		if f.IsList() || f.IsMap() || f.Message() != nil {
			continue // grads: the chunk's own
		}
		var v protoreflect.Value
		switch f.Kind() {
		case protoreflect.StringKind:
			v = protoreflect.ValueOfString("x" + string(f.Name()))
		case protoreflect.BoolKind:
			v = protoreflect.ValueOfBool(true)
		case protoreflect.Int32Kind, protoreflect.Sint32Kind, protoreflect.Sfixed32Kind:
			v = protoreflect.ValueOfInt32(int32(f.Number()) + 100)
		case protoreflect.Int64Kind, protoreflect.Sint64Kind, protoreflect.Sfixed64Kind:
			v = protoreflect.ValueOfInt64(int64(f.Number()) + 1000)
		case protoreflect.Uint32Kind, protoreflect.Fixed32Kind:
			v = protoreflect.ValueOfUint32(uint32(f.Number()) + 100)
		case protoreflect.Uint64Kind, protoreflect.Fixed64Kind:
			v = protoreflect.ValueOfUint64(uint64(f.Number()) + 1000)
		default:
			t.Fatalf("PushRequest field %s of kind %v: teach this test (and streamHeader) about it", f.Name(), f.Kind())
		}
		m.Set(f, v)
	}
	chunk := []*pb.Tensor{{Name: "w", Block: 1, Data: []byte{1, 2, 3, 4}}}
	req.Grads = []*pb.Tensor{{Name: "w", Block: 0, Data: []byte{5, 6, 7, 8}}, chunk[0]}
	got := streamHeader(req, chunk)
	want := proto.Clone(req).(*pb.PushRequest)
	want.Grads = chunk
	if !proto.Equal(got, want) {
		t.Fatalf("stream header\n%v\nwant every field of the push with the chunk's grads\n%v", got, want)
	}
}
