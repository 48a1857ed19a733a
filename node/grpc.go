package node

import (
	"google.golang.org/grpc"

	"github.com/raftps/raftps/pserver"
)

// newGRPCServer is the node's one gRPC server: the pserver's transport
// tuning (window sizes, socket buffers, a non-zeroing buffer pool) serves
// every service.
func newGRPCServer() *grpc.Server {
	return grpc.NewServer(append(pserver.ServerOptions(), grpcMetricsOptions()...)...) // + gRPC server metrics (metrics_training.go)
}
