package node

import (
	"context"
	"fmt"
	"net"
	"strings"

	"google.golang.org/grpc"
	"google.golang.org/grpc/tap"

	"github.com/raftps/raftps/api/errs"
	pb "github.com/raftps/raftps/api/raftpspb"
	"github.com/raftps/raftps/api/rpctypes"
	"github.com/raftps/raftps/pserver/wire"
	"github.com/raftps/raftps/raftstore/etcdapi"
	"github.com/raftps/raftps/security"
)

// A serviceClass is one gRPC server of the node with its own listener,
// message size, stream and concurrency limits (etcd serves clients and
// peers on separate listeners for the same reason): a limit fit for
// parameter traffic (1 GiB) must not let a KV client make the node
// receive 1 GiB, and a flood of client streams must not starve the
// pserver data path.
type serviceClass struct {
	name string
	// MaxRecvMsgSize bounds one received message: larger ones are refused
	// with ResourceExhausted by gRPC before they are read into memory.
	maxRecv int
	// maxSend bounds one sent message.
	maxSend int
	// maxStreams is the per-connection cap of concurrent streams (HTTP/2
	// MAX_CONCURRENT_STREAMS): further RPCs of that connection wait.
	maxStreams uint32
	// services are the gRPC services this class serves; a call to another
	// service is refused with Unimplemented naming the right port.
	services []string
	// notServed are methods of those services this class refuses (full
	// names, "/raftps.v1.CheckpointStore/DeleteVersions"), each with the
	// class that serves it: a method-level rule where a service is shared
	// between classes but one of its methods is not.
	notServed map[string]string
	// tuned: the pserver's transport tuning (64 MiB flow-control windows,
	// 1 MiB socket buffers, a non-zeroing buffer pool).
	tuned bool
	// connBuffer, if not 0, is the read and the write buffer of each
	// connection (gRPC's default is 32 KiB), and the flow-control windows
	// become static (1 MiB per stream, 8 MiB per connection: no BDP pings,
	// and less than the 16 MiB gRPC's estimator may grow to). Many small
	// calls on few connections (clients' puts, followers' forwarded
	// batches) then take fewer syscalls: with 256 KiB on the client port
	// and 1 MiB node to node (and on the forwarder's dial), puts on 3
	// processes over loopback against the gRPC defaults, 5 interleaved
	// pairs: servers' CPU per put -10% at 256 clients and -11% at 16,
	// throughput +10% and +9%.
	connBuffer int
}

// The node's three service classes (documented in doc.go).
var (
	clientClass = serviceClass{
		name:       "client API",
		maxRecv:    4 << 20,
		maxSend:    256 << 20,
		maxStreams: 1000,
		connBuffer: 256 << 10, // held per client connection
		services: append([]string{pb.KV_ServiceDesc.ServiceName, pb.Lease_ServiceDesc.ServiceName,
			pb.Watch_ServiceDesc.ServiceName, pb.Cluster_ServiceDesc.ServiceName,
			pb.Master_ServiceDesc.ServiceName, pb.CheckpointStore_ServiceDesc.ServiceName, pb.Keyring_ServiceDesc.ServiceName},
			etcdapi.ServiceNames...),
		// Replicas write and delete checkpoint blobs node to node (issue
		// 19 item 7); `raftps checkpoint` only reads, so a client may do
		// neither.
		notServed: map[string]string{
			pb.CheckpointStore_DeleteVersions_FullMethodName: "node-to-node",
			pb.CheckpointStore_PutBlob_FullMethodName:        "node-to-node",
		},
	}
	pserverClass = serviceClass{
		name:       "pserver data path",
		maxRecv:    wire.MaxMessageSize,
		maxSend:    wire.MaxMessageSize,
		maxStreams: 1000,
		services:   []string{pb.PServer_ServiceDesc.ServiceName, pb.Replica_ServiceDesc.ServiceName},
		tuned:      true,
	}
	peerClass = serviceClass{
		name:       "node-to-node",
		maxRecv:    64 << 20,
		maxSend:    64 << 20,
		maxStreams: 256,
		connBuffer: 1 << 20, // a few connections: one per peer
		services:   []string{pb.Internal_ServiceDesc.ServiceName, pb.CheckpointStore_ServiceDesc.ServiceName, pb.Keyring_ServiceDesc.ServiceName},
	}
)

// serves reports whether the class serves the gRPC method full
// ("/raftps.v1.KV/Put").
func (c serviceClass) serves(full string) bool {
	if _, ok := c.notServed[full]; ok {
		return false
	}
	svc, _, _ := strings.Cut(strings.TrimPrefix(full, "/"), "/")
	for _, s := range c.services {
		if s == svc {
			return true
		}
	}
	return false
}

// newServer returns the class's gRPC server. Calls to services of other
// classes are refused before their message is read (a tap handle), so a
// port's limits cannot be used for another class's traffic.
func (c serviceClass) newServer(others string, extra ...grpc.ServerOption) *grpc.Server {
	opts := []grpc.ServerOption{
		grpc.MaxRecvMsgSize(c.maxRecv),
		grpc.MaxSendMsgSize(c.maxSend),
		grpc.MaxConcurrentStreams(c.maxStreams),
		// A connection that does not finish its handshake within this is
		// closed (gRPC's default waits 120 s); TLS also caps handshakes in
		// flight per source (security.Material.ServerCredentials).
		grpc.ConnectionTimeout(security.HandshakeTimeout),
		grpc.InTapHandle(func(ctx context.Context, info *tap.Info) (context.Context, error) {
			if only, ok := c.notServed[info.FullMethodName]; ok {
				return nil, rpctypes.ToStatus(fmt.Errorf("%s: %w: it is served only on the %s port of a node, not on the %s port (%s)",
					info.FullMethodName, errs.ErrWrongPort, only, c.name, others))
			}
			if !c.serves(info.FullMethodName) {
				return nil, rpctypes.ToStatus(fmt.Errorf("%s: %w: the %s port of this node does not serve it (%s)",
					info.FullMethodName, errs.ErrWrongPort, c.name, others))
			}
			return ctx, nil
		}),
	}
	if c.connBuffer > 0 {
		opts = append(opts, grpc.ReadBufferSize(c.connBuffer), grpc.WriteBufferSize(c.connBuffer),
			grpc.InitialWindowSize(1<<20), grpc.InitialConnWindowSize(8<<20))
	}
	if c.tuned {
		// wire.ServerOptions sets the same message limits; ours come
		// first and its tuning follows.
		opts = append(opts, wire.ServerOptions()...)
	}
	opts = append(opts, grpcMetricsOptions()...) // gRPC server metrics (metrics_training.go)
	return grpc.NewServer(append(opts, extra...)...)
}

// grpcServers are the node's gRPC servers, one per service class.
type grpcServers struct {
	client, pserver, peer          *grpc.Server
	clientLis, pserverLis, peerLis net.Listener
}

// listenClass binds addr with listen (net.Listen over TCP, or
// wire.Listen), or, if addr is empty, an ephemeral port on the host of
// the client API address (peers learn it from gossip).
func listenClass(addr, clientAddr string, listen func(addr string) (net.Listener, error)) (net.Listener, error) {
	if addr == "" {
		host, _, err := net.SplitHostPort(clientAddr)
		if err != nil {
			return nil, fmt.Errorf("client address %q: %w", clientAddr, err)
		}
		addr = net.JoinHostPort(host, "0")
	}
	return listen(addr)
}

// listenTCP is net.Listen over TCP.
func listenTCP(addr string) (net.Listener, error) { return net.Listen("tcp", addr) }
