package wire

import (
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/experimental"

	pb "github.com/raftps/raftps/api/raftpspb"
)

// Transport tuning shared by Server and Client: large flow-control windows
// so a 20-40 MB push is not throttled to 64 KiB round trips, large message
// limits, and 1 MiB socket buffers.
const (
	WindowSize     = 64 << 20
	MaxMessageSize = 1 << 30
	bufferSize     = 1 << 20
	// StreamChunkBytes bounds one PullResponse of PullStream (and one
	// PushRequest the Client sends on PushStream).
	StreamChunkBytes = 4 << 20
)

// ServerOptions returns gRPC server options tuned for parameter traffic;
// the node passes them to grpc.NewServer.
func ServerOptions() []grpc.ServerOption {
	return []grpc.ServerOption{
		grpc.InitialWindowSize(WindowSize),
		grpc.InitialConnWindowSize(WindowSize),
		grpc.MaxRecvMsgSize(MaxMessageSize),
		grpc.MaxSendMsgSize(MaxMessageSize),
		grpc.ReadBufferSize(bufferSize),
		grpc.WriteBufferSize(bufferSize),
		experimental.BufferPool(grpcBufs),
		// Every call uses the tensor codec, whatever content-subtype it
		// asked for: gRPC's C core (Python's grpcio) sends none, and the
		// protobuf codec cost the pserver 150-200 ms of CPU per 10M-param
		// push+pull of a Python trainer against 120 ms for the Go client's
		// (the codec speaks protobuf's wire format and passes other
		// messages to protobuf; replies keep the request's content-type).
		grpc.ForceServerCodecV2(tensorCodec{}),
	}
}

// DialOptions returns gRPC dial options tuned for parameter traffic
// (plaintext; append grpc.WithTransportCredentials to replace it).
func DialOptions() []grpc.DialOption {
	return []grpc.DialOption{
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		dialOption,
		grpc.WithInitialWindowSize(WindowSize),
		grpc.WithInitialConnWindowSize(WindowSize),
		grpc.WithReadBufferSize(bufferSize),
		grpc.WithWriteBufferSize(bufferSize),
		experimental.WithBufferPool(grpcBufs),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(MaxMessageSize), grpc.MaxCallSendMsgSize(MaxMessageSize)),
	}
}

// MaxPullBytes bounds the tensor data of one named pull (a PullRequest
// that lists tensors): the response is sized before anything is allocated
// and a larger one is refused with ErrInvalid (split the request). It is
// gRPC's message limit (MaxMessageSize); a bigger response could not be
// sent anyway.
const MaxPullBytes = MaxMessageSize

// ChunkTensors splits ts into runs of at most max data bytes (a tensor
// larger than max is a run of its own).
func ChunkTensors(ts []*pb.Tensor, max int) [][]*pb.Tensor {
	var out [][]*pb.Tensor
	start, size := 0, 0
	for i, t := range ts {
		if i > start && size+len(t.Data) > max {
			out = append(out, ts[start:i])
			start, size = i, 0
		}
		size += len(t.Data)
	}
	if start < len(ts) || len(out) == 0 {
		out = append(out, ts[start:])
	}
	return out
}
