// Package wire is what a parameter server and its clients share, so that
// a trainer links the client (pserver/psclient) without the server
// (pserver): the sharding layout, the gRPC tensor codec, the error
// sentinels and their gRPC codes, the transport limits and the socket
// tuning. It imports nothing of ours but the generated API and leaves.
//
//   - Layout (layout.go): a job's parameters cut into V virtual shards
//     (VShardOfBlock, VShardOfRow) and vshard v served by slot
//     SlotOfVShard(v, n) = v mod n. NewLayout validates the spec
//     (ErrBadSpec).
//   - The tensor codec (codec.go, content-subtype TensorCodecName, the
//     protobuf wire format of api/pserver.proto): registered by importing
//     this package; calls ask for it with TensorCallOption, and a server
//     built with ServerOptions uses it for every call (Python's grpcio
//     cannot ask for a content-subtype). It moves tensor
//     data without the generic codec's copies, reads a pull's blocks
//     straight into a PullSink (the client's parameter arrays), and lends a
//     server's whole-slot reply buffer to gRPC (LendReply) until it is
//     written.
//   - Errors (errors.go): the sentinels every Slot, Server and Client error
//     wraps, the sentinel -> gRPC code table (Error.GRPCStatus, ToGRPC).
//   - Transport (options.go, socket.go): ServerOptions and DialOptions (64
//     MiB flow-control windows, 1 GiB messages, a non-zeroing buffer pool,
//     the server's forced tensor codec),
//     StreamChunkBytes, MaxPullBytes; Listen and Dial set SocketBufferBytes
//     kernel buffers where the host's caps allow it.
//
// Usage, on a server: lis, _ := wire.Listen(addr);
// grpc.NewServer(wire.ServerOptions()...). On a client:
// grpc.NewClient(addr, wire.DialOptions()...) and TensorCallOption on every
// call (psclient does both).
//
// Everything here is safe for concurrent use; Layout is immutable. The
// design notes (copies, buffer pools, socket buffer figures) are in
// pserver/DESIGN.md, "Transport".
package wire
