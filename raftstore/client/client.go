// Package client is the Go client of raftps' gRPC API: one connection over
// a list of endpoints that fails over between them, and the generated
// service clients on top of it.
//
//	c, err := client.New([]string{"127.0.0.1:7000", "127.0.0.1:7010"})
//	defer c.Close()
//	_, err = c.KV.Put(ctx, &pb.PutRequest{Key: []byte("k"), Value: []byte("v")})
//
// Any node serves the whole API (followers forward to the leader), so the
// client only needs one reachable endpoint. Calls are balanced round-robin
// over the endpoints that are up (a manual resolver) and wait for one to be
// ready, so a dead endpoint costs nothing; bound every call with a
// deadline. Retry re-runs an idempotent call on Unavailable.
//
// Every error a call returns has crossed rpctypes.FromStatus: it keeps its
// gRPC status (status.Code works) and wraps raftps' sentinel, so
//
//	errors.Is(err, errs.ErrLeaseNotFound) // fsm/errs; api/rpctypes for the store's
//
// works as it does in process. Leases adapts the Lease service to
// concurrency.LeaseAPI, so a concurrency.Session runs over a client.
package client

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/resolver"
	"google.golang.org/grpc/resolver/manual"
	"google.golang.org/grpc/status"

	pb "github.com/raftps/raftps/api/raftpspb"
	"github.com/raftps/raftps/api/rpctypes"
	"github.com/raftps/raftps/schema"
)

// ErrNoEndpoints: New was given no endpoint.
var ErrNoEndpoints = errors.New("client: no endpoints")

var schemeSeq atomic.Int64

// Client holds one gRPC connection to a raftps cluster.
type Client struct {
	Endpoints []string
	conn      *grpc.ClientConn

	KV      pb.KVClient
	Lease   pb.LeaseClient
	Watch   pb.WatchClient
	Cluster pb.ClusterClient
	Master  pb.MasterClient
}

// New connects lazily to endpoints (host:port of nodes' gRPC addresses).
func New(endpoints []string) (*Client, error) {
	var eps []string
	for _, e := range endpoints {
		for _, p := range strings.Split(e, ",") {
			if p = strings.TrimSpace(p); p != "" {
				eps = append(eps, p)
			}
		}
	}
	if len(eps) == 0 {
		return nil, ErrNoEndpoints
	}
	r := manual.NewBuilderWithScheme(fmt.Sprintf("raftps%d", schemeSeq.Add(1)))
	addrs := make([]resolver.Address, len(eps))
	for i, e := range eps {
		addrs[i] = resolver.Address{Addr: e}
	}
	r.InitialState(resolver.State{Addresses: addrs})
	conn, err := grpc.NewClient(r.Scheme()+":///raftps",
		grpc.WithResolvers(r),
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultServiceConfig(`{"loadBalancingConfig":[{"round_robin":{}}]}`),
		// Wait for any endpoint to be ready rather than failing on the first
		// dead one the balancer tried; callers bound every call with a
		// deadline (the CLI's --timeout).
		grpc.WithDefaultCallOptions(grpc.WaitForReady(true), grpc.MaxCallRecvMsgSize(256<<20), grpc.MaxCallSendMsgSize(256<<20)),
		grpc.WithChainUnaryInterceptor(unaryFromStatus),
		grpc.WithChainStreamInterceptor(streamFromStatus),
	)
	if err != nil {
		return nil, fmt.Errorf("client: dial %v: %w", eps, err)
	}
	return &Client{Endpoints: eps, conn: conn,
		KV: pb.NewKVClient(conn), Lease: pb.NewLeaseClient(conn), Watch: pb.NewWatchClient(conn),
		Cluster: pb.NewClusterClient(conn), Master: pb.NewMasterClient(conn)}, nil
}

// Conn returns the underlying connection.
func (c *Client) Conn() *grpc.ClientConn { return c.conn }

// Close closes the connection.
func (c *Client) Close() error { return c.conn.Close() }

// Retryable reports whether err is worth retrying on another attempt: the
// node was unreachable or had no leader.
func Retryable(err error) bool {
	switch status.Code(err) {
	case codes.Unavailable, codes.DeadlineExceeded, codes.Aborted:
		return true
	}
	return false
}

// Retry runs fn until it succeeds, fails with a non-retryable error, or ctx
// ends; it waits 50ms, doubling to 1s, between attempts. Use it only for
// idempotent calls.
func Retry(ctx context.Context, fn func(ctx context.Context) error) error {
	wait := 50 * time.Millisecond
	for {
		err := fn(ctx)
		if err == nil || !Retryable(err) {
			return err
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w (last error: %v)", ctx.Err(), err)
		case <-time.After(wait):
		}
		if wait *= 2; wait > time.Second {
			wait = time.Second
		}
	}
}

// PrefixEnd returns the range end that covers every key with prefix p.
//
// Deprecated: use schema.PrefixEnd, the keyspace's one copy.
func PrefixEnd(p []byte) []byte { return schema.PrefixEnd(p) }

// unaryFromStatus maps every unary call's error back to our sentinels.
func unaryFromStatus(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
	return rpctypes.FromStatus(invoker(ctx, method, req, reply, cc, opts...))
}

// streamFromStatus maps a stream's errors (at open, send and receive; io.EOF
// stays io.EOF) back to our sentinels.
func streamFromStatus(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
	cs, err := streamer(ctx, desc, cc, method, opts...)
	if err != nil {
		return nil, rpctypes.FromStatus(err)
	}
	return mappedStream{cs}, nil
}

type mappedStream struct{ grpc.ClientStream }

func (s mappedStream) SendMsg(m any) error { return rpctypes.FromStatus(s.ClientStream.SendMsg(m)) }
func (s mappedStream) RecvMsg(m any) error { return rpctypes.FromStatus(s.ClientStream.RecvMsg(m)) }
