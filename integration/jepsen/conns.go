package jepsen

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/resolver"
	"google.golang.org/grpc/resolver/manual"

	pb "github.com/raftps/raftps/api/raftpspb"
)

// NodeConn is a gRPC connection to one node with its API clients.
type NodeConn struct {
	Name    string
	Addr    string
	Conn    *grpc.ClientConn
	KV      pb.KVClient
	Lease   pb.LeaseClient
	Watch   pb.WatchClient
	Cluster pb.ClusterClient
	Master  pb.MasterClient
}

// ConnSet holds one NodeConn per node and implements Conns.
type ConnSet []*NodeConn

// Dial connects to every node (no I/O until first use) with opts (the
// credentials: Hosts.DialOptions; plaintext without). Reconnects back off
// for at most 1 s so that a restarted node is used again quickly.
func Dial(names, addrs []string, opts ...grpc.DialOption) (ConnSet, error) {
	var cs ConnSet
	for i, addr := range addrs {
		conn, err := grpc.NewClient(addr, append([]grpc.DialOption{
			grpc.WithTransportCredentials(insecure.NewCredentials()),
			grpc.WithConnectParams(grpc.ConnectParams{
				Backoff:           backoff.Config{BaseDelay: 100 * time.Millisecond, Multiplier: 1.6, Jitter: 0.2, MaxDelay: time.Second},
				MinConnectTimeout: time.Second,
			})}, opts...)...)
		if err != nil {
			cs.Close()
			return nil, fmt.Errorf("jepsen: dial %s: %w", addr, err)
		}
		cs = append(cs, &NodeConn{
			Name: names[i], Addr: addr, Conn: conn,
			KV: pb.NewKVClient(conn), Lease: pb.NewLeaseClient(conn), Watch: pb.NewWatchClient(conn),
			Cluster: pb.NewClusterClient(conn), Master: pb.NewMasterClient(conn),
		})
	}
	return cs, nil
}

// Random returns a random node's connection.
func (cs ConnSet) Random(r *rand.Rand) (string, *NodeConn) {
	c := cs[r.IntN(len(cs))]
	return c.Name, c
}

// All returns every connection.
func (cs ConnSet) All() []*NodeConn { return cs }

// Close closes every connection.
func (cs ConnSet) Close() {
	for _, c := range cs {
		_ = c.Conn.Close()
	}
}

// Leader asks every node's Cluster.Status (timeout each) and returns the
// leader id most of them name, or "" if none answers with one.
func (cs ConnSet) Leader(ctx context.Context, timeout time.Duration) string {
	votes := map[string]int{}
	type ans struct{ leader string }
	ch := make(chan ans, len(cs))
	for _, c := range cs {
		go func(c *NodeConn) {
			octx, cancel := context.WithTimeout(ctx, timeout)
			defer cancel()
			st, err := c.Cluster.Status(octx, &pb.StatusRequest{})
			if err != nil {
				ch <- ans{}
				return
			}
			ch <- ans{st.GetLeader()}
		}(c)
	}
	best, n := "", 0
	for range cs {
		a := <-ch
		if a.leader == "" {
			continue
		}
		votes[a.leader]++
		if votes[a.leader] > n {
			best, n = a.leader, votes[a.leader]
		}
	}
	return best
}

// WaitLeader polls Leader until one is named or ctx ends.
func (cs ConnSet) WaitLeader(ctx context.Context) (string, error) {
	for {
		if l := cs.Leader(ctx, time.Second); l != "" {
			return l, nil
		}
		select {
		case <-ctx.Done():
			return "", fmt.Errorf("jepsen: no leader: %w", ctx.Err())
		case <-time.After(300 * time.Millisecond):
		}
	}
}

// LinearizableRevision does a linearizable read through any node and returns
// the store's revision (retrying until ctx ends).
func (cs ConnSet) LinearizableRevision(ctx context.Context, key string) (int64, error) {
	var last error
	for {
		for _, c := range cs {
			octx, cancel := context.WithTimeout(ctx, 2*time.Second)
			resp, err := c.KV.Range(octx, &pb.RangeRequest{Key: []byte(key)})
			cancel()
			if err == nil {
				return resp.GetHeader().GetRevision(), nil
			}
			last = err
		}
		select {
		case <-ctx.Done():
			return 0, fmt.Errorf("jepsen: linearizable read: %w (last: %v)", ctx.Err(), last)
		case <-time.After(300 * time.Millisecond):
		}
	}
}

// PutFence writes key=value through any node until one acknowledges it and
// returns the put's revision.
func (cs ConnSet) PutFence(ctx context.Context, key, value string) (int64, error) {
	var last error
	for {
		for _, c := range cs {
			octx, cancel := context.WithTimeout(ctx, 2*time.Second)
			resp, err := c.KV.Put(octx, &pb.PutRequest{Key: []byte(key), Value: []byte(value)})
			cancel()
			if err == nil {
				return resp.GetHeader().GetRevision(), nil
			}
			last = err
		}
		select {
		case <-ctx.Done():
			return 0, fmt.Errorf("jepsen: fence put: %w (last: %v)", ctx.Err(), last)
		case <-time.After(300 * time.Millisecond):
		}
	}
}

// DialBalanced returns one connection over every address, round-robin, that
// leaves out nodes it cannot reach: a client of the whole cluster (for the
// training workload's Master and Watch calls), with opts as Dial's.
func DialBalanced(addrs []string, opts ...grpc.DialOption) (*grpc.ClientConn, error) {
	r := manual.NewBuilderWithScheme("jepsen")
	var state resolver.State
	for _, a := range addrs {
		// ServerName: the host TLS checks the node's certificate against
		// (the connection's authority is "cluster").
		host, _, err := net.SplitHostPort(a)
		if err != nil {
			host = a
		}
		state.Addresses = append(state.Addresses, resolver.Address{Addr: a, ServerName: host})
	}
	r.InitialState(state)
	return grpc.NewClient(r.Scheme()+":///cluster", append([]grpc.DialOption{
		grpc.WithResolvers(r),
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultServiceConfig(`{"loadBalancingConfig": [{"round_robin":{}}]}`),
		grpc.WithConnectParams(grpc.ConnectParams{
			Backoff:           backoff.Config{BaseDelay: 100 * time.Millisecond, Multiplier: 1.6, Jitter: 0.2, MaxDelay: time.Second},
			MinConnectTimeout: time.Second,
		})}, opts...)...)
}

// FinalState reads every key under prefix with a linearizable Range through
// any node (retrying until ctx ends) and returns them as puts at their
// mod_revisions: the committed state the watchers must agree with.
func (cs ConnSet) FinalState(ctx context.Context, prefix string) ([]AckedPut, error) {
	var last error
	for {
		for _, c := range cs {
			octx, cancel := context.WithTimeout(ctx, 2*time.Second)
			resp, err := c.KV.Range(octx, &pb.RangeRequest{Key: []byte(prefix), RangeEnd: prefixEnd(prefix)})
			cancel()
			if err == nil {
				out := make([]AckedPut, 0, len(resp.Kvs))
				for _, kv := range resp.Kvs {
					out = append(out, AckedPut{Key: string(kv.Key), Value: string(kv.Value), Revision: kv.ModRevision})
				}
				return out, nil
			}
			last = err
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("jepsen: final range: %w (last: %v)", ctx.Err(), last)
		case <-time.After(300 * time.Millisecond):
		}
	}
}
