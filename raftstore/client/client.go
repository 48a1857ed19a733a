package client

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
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
	id        string // client id of its requests (rpctypes.RequestID)

	mu       sync.Mutex
	seq      uint64              // last sequence number handed out
	inflight map[uint64]struct{} // seqs whose answer is not settled

	leaderRoute *leaderRoute // where writes go (nil with one endpoint; see route.go)

	KV      pb.KVClient
	Lease   pb.LeaseClient
	Watch   pb.WatchClient
	Cluster pb.ClusterClient
	Master  pb.MasterClient
}

// New connects lazily to endpoints (host:port of nodes' gRPC addresses).
// opts are added to the client's own dial options (tests add interceptors:
// they run inside the client's, per attempt).
func New(endpoints []string, opts ...grpc.DialOption) (*Client, error) {
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
		// ServerName: the host a TLS handshake checks the node's
		// certificate against (the connection's authority is "raftps").
		host, _, err := net.SplitHostPort(e)
		if err != nil {
			host = e
		}
		addrs[i] = resolver.Address{Addr: e, ServerName: host}
	}
	r.InitialState(resolver.State{Addresses: addrs})
	id, err := newClientID()
	if err != nil {
		return nil, err
	}
	c := &Client{Endpoints: eps, id: id, inflight: map[uint64]struct{}{}}
	conn, err := grpc.NewClient(r.Scheme()+":///raftps", append([]grpc.DialOption{
		grpc.WithResolvers(r),
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		// Round-robin, with writes to the leader (route.go).
		grpc.WithDefaultServiceConfig(`{"loadBalancingConfig":[{"` + leaderBalancer + `":{}}]}`),
		// Wait for any endpoint to be ready rather than failing on the first
		// dead one the balancer tried; callers bound every call with a
		// deadline (the CLI's --timeout).
		grpc.WithDefaultCallOptions(grpc.WaitForReady(true), grpc.MaxCallRecvMsgSize(256<<20), grpc.MaxCallSendMsgSize(256<<20)),
		grpc.WithChainUnaryInterceptor(c.unary),
		grpc.WithChainStreamInterceptor(streamFromStatus),
	}, opts...)...)
	if err != nil {
		return nil, fmt.Errorf("client: dial %v: %w", eps, err)
	}
	c.conn = conn
	if len(eps) > 1 {
		c.leaderRoute = newLeaderRoute()
	}
	c.KV, c.Lease, c.Watch = pb.NewKVClient(conn), pb.NewLeaseClient(conn), pb.NewWatchClient(conn)
	c.Cluster, c.Master = pb.NewClusterClient(conn), pb.NewMasterClient(conn)
	return c, nil
}

// ID is the client id its requests carry (rpctypes.RequestID.Client).
func (c *Client) ID() string { return c.id }

func newClientID() (string, error) {
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", fmt.Errorf("client: id: %w", err)
	}
	return hex.EncodeToString(b[:]), nil
}

// Conn returns the underlying connection.
func (c *Client) Conn() *grpc.ClientConn { return c.conn }

// Close closes the connection (and stops a leader lookup in flight).
func (c *Client) Close() error {
	if c.leaderRoute != nil {
		c.leaderRoute.close()
	}
	return c.conn.Close()
}

// Retryable reports whether err is worth retrying on another attempt: the
// node was unreachable or had no leader, or the outcome is unknown.
func Retryable(err error) bool {
	switch status.Code(err) {
	case codes.Unavailable, codes.DeadlineExceeded, codes.Aborted:
		return true
	}
	return false
}

// Retry runs fn until it succeeds, fails with a non-retryable error, or ctx
// ends; it waits 50ms, doubling to 1s, between attempts.
//
// Writes retried this way are exactly-once: every attempt sends the k-th
// call of a method with the same request id (client id and sequence
// number, rpctypes.RequestID), so a write whose first attempt was applied
// but whose answer was lost (a leader change, a timeout) is not applied
// again; the retry gets the first answer (fsm/session.go). fn must make
// the same calls in the same order on every attempt.
func Retry(ctx context.Context, fn func(ctx context.Context) error) error {
	tok := &retryToken{seqs: map[string][]uint64{}}
	defer tok.settle()
	ctx = context.WithValue(ctx, retryKey{}, tok)
	wait := 50 * time.Millisecond
	for {
		tok.newAttempt()
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

// unary stamps every unary call with a request id (writes are applied
// exactly once; reads ignore it), routes writes to the leader (route.go)
// and maps its error back to our sentinels.
func (c *Client) unary(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
	seq, settle := c.begin(ctx, method)
	defer settle()
	ctx, routed := c.route(ctx, method)
	ctx = rpctypes.AppendRequestID(ctx, rpctypes.RequestID{Client: c.id, Seq: seq, Acked: c.acked()})
	err := invoker(ctx, method, req, reply, cc, opts...)
	if routed && Retryable(err) {
		c.leaderRoute.forget()
	}
	return rpctypes.FromStatus(err)
}

// begin returns the sequence number of a call and what settles it: a
// fresh one settled when the call returns, or, inside Retry, the one this
// call had on the first attempt, settled when Retry returns.
func (c *Client) begin(ctx context.Context, method string) (uint64, func()) {
	tok, _ := ctx.Value(retryKey{}).(*retryToken)
	if tok == nil {
		seq := c.reserve()
		return seq, func() { c.settle(seq) }
	}
	tok.mu.Lock()
	defer tok.mu.Unlock()
	key := c.id + "\x00" + method
	k := tok.calls[key]
	tok.calls[key] = k + 1
	if k < len(tok.seqs[key]) {
		return tok.seqs[key][k], func() {}
	}
	seq := c.reserve()
	tok.seqs[key] = append(tok.seqs[key], seq)
	tok.settles = append(tok.settles, func() { c.settle(seq) })
	return seq, func() {}
}

func (c *Client) reserve() uint64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.seq++
	c.inflight[c.seq] = struct{}{}
	return c.seq
}

func (c *Client) settle(seq uint64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.inflight, seq)
}

// acked is the lowest sequence number whose answer is not settled: the
// cluster may forget the answers below it.
func (c *Client) acked() uint64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	low := c.seq + 1
	for s := range c.inflight {
		low = min(low, s)
	}
	return low
}

type retryKey struct{}

// retryToken keeps the sequence numbers of one Retry's calls, by client
// and method, in call order, so every attempt reuses them.
type retryToken struct {
	mu      sync.Mutex
	seqs    map[string][]uint64
	calls   map[string]int // calls per key in the current attempt
	settles []func()
}

func (t *retryToken) newAttempt() {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.calls = map[string]int{}
}

func (t *retryToken) settle() {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, f := range t.settles {
		f()
	}
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
