package client

import (
	"context"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc/balancer"
	"google.golang.org/grpc/balancer/base"

	pb "github.com/raftps/raftps/api/raftpspb"
)

// Writes go to the leader. Any node serves a write (a follower forwards
// it to the leader), but the forward costs two more hops and a
// follower's CPU: the bench's puts through every endpoint ran well below
// puts to the leader's alone (raftstore/DESIGN.md, "Measured"). So the client learns the leader (Cluster.Status for its id,
// Cluster.Members for its gRPC address) and its balancer picks the
// leader's connection for the methods in writeMethods when that address
// is one of the client's endpoints and its connection is ready; every
// other call, and every write while the leader is unknown, elsewhere or
// unreachable, is balanced round-robin as before. The route is a hint
// only: a write that reaches a node which is no longer the leader is
// forwarded, and the hint is refreshed at most once per leaderRefresh,
// in the background, while writes are being made (a client that only
// reads never asks).

// leaderBalancer is the name of the client's balancer (round-robin, or
// the leader's connection for a call whose context carries routeKey).
const leaderBalancer = "raftps_leader"

func init() {
	balancer.Register(base.NewBalancerBuilder(leaderBalancer, leaderPickerBuilder{}, base.Config{}))
}

// leaderRefresh is the least time between two lookups of the leader.
var leaderRefresh = time.Second

// leaderLookupTimeout bounds one lookup. It is not leaderRefresh: on a
// loaded machine a lookup can take longer than the refresh interval, and
// it runs in the background (one at a time), so waiting longer costs no
// call anything.
var leaderLookupTimeout = 5 * time.Second

// writeMethods are the unary methods that go through the Raft log (a
// follower forwards them to the leader).
var writeMethods = map[string]bool{
	pb.KV_Put_FullMethodName:              true,
	pb.KV_DeleteRange_FullMethodName:      true,
	pb.KV_Txn_FullMethodName:              true,
	pb.Lease_LeaseGrant_FullMethodName:    true,
	pb.Lease_LeaseRevoke_FullMethodName:   true,
	pb.Master_SubmitJob_FullMethodName:    true,
	pb.Master_CancelJob_FullMethodName:    true,
	pb.Master_DeleteJob_FullMethodName:    true,
	pb.Master_GetTask_FullMethodName:      true,
	pb.Master_TaskFinished_FullMethodName: true,
	pb.Master_TaskFailed_FullMethodName:   true,
}

// routeKey is the context key of the endpoint a call should go to.
type routeKey struct{}

type leaderPickerBuilder struct{}

func (leaderPickerBuilder) Build(info base.PickerBuildInfo) balancer.Picker {
	if len(info.ReadySCs) == 0 {
		return base.NewErrPicker(balancer.ErrNoSubConnAvailable)
	}
	p := &leaderPicker{byAddr: make(map[string]balancer.SubConn, len(info.ReadySCs))}
	for sc, sci := range info.ReadySCs {
		p.scs = append(p.scs, sc)
		p.byAddr[sci.Address.Addr] = sc
	}
	p.next.Store(rand.Uint32())
	return p
}

// leaderPicker picks the ready connection to the endpoint the call's
// context names (routeKey), else the next ready one round-robin.
type leaderPicker struct {
	scs    []balancer.SubConn
	byAddr map[string]balancer.SubConn
	next   atomic.Uint32
}

func (p *leaderPicker) Pick(info balancer.PickInfo) (balancer.PickResult, error) {
	if addr, ok := info.Ctx.Value(routeKey{}).(string); ok {
		if sc, ok := p.byAddr[addr]; ok {
			return balancer.PickResult{SubConn: sc}, nil
		}
	}
	n := p.next.Add(1)
	return balancer.PickResult{SubConn: p.scs[n%uint32(len(p.scs))]}, nil
}

// leaderRoute is a client's view of where the leader is.
type leaderRoute struct {
	addr    atomic.Pointer[string] // the leader's endpoint; nil or "": unknown
	checked atomic.Int64           // unix ns of the last lookup's start
	running atomic.Bool            // a lookup is in flight
	ctx     context.Context        // ends at Close
	cancel  context.CancelFunc
	mu      sync.Mutex // orders closed and wg.Add against close's Wait
	closed  bool
	wg      sync.WaitGroup
}

func newLeaderRoute() *leaderRoute {
	ctx, cancel := context.WithCancel(context.Background())
	return &leaderRoute{ctx: ctx, cancel: cancel}
}

// close stops a lookup in flight and waits for it.
func (r *leaderRoute) close() {
	r.mu.Lock()
	r.closed = true
	r.mu.Unlock()
	r.cancel()
	r.wg.Wait()
}

// lookup runs fn in a goroutine close waits for, unless closed.
func (r *leaderRoute) lookup(fn func()) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		r.running.Store(false)
		return
	}
	r.wg.Add(1)
	go func() {
		defer r.wg.Done()
		defer r.running.Store(false)
		fn()
	}()
}

// forget drops the route after a routed write failed in a way a dead,
// cut-off or deposed leader causes (Retryable): writes are balanced again
// and the next one looks the leader up at once.
func (r *leaderRoute) forget() {
	var none string
	r.addr.Store(&none)
	r.checked.Store(0)
}

// leader returns the leader's endpoint, "" if unknown.
func (r *leaderRoute) leader() string {
	if a := r.addr.Load(); a != nil {
		return *a
	}
	return ""
}

// route returns ctx naming the leader's endpoint if method is a write and
// the leader is known (routed), and starts a lookup if the last one is
// older than leaderRefresh.
func (c *Client) route(ctx context.Context, method string) (_ context.Context, routed bool) {
	r := c.leaderRoute
	if r == nil || !writeMethods[method] {
		return ctx, false
	}
	if now := time.Now().UnixNano(); now-r.checked.Load() >= int64(leaderRefresh) && r.running.CompareAndSwap(false, true) {
		r.checked.Store(now)
		r.lookup(func() {
			// A lookup that failed (a slow or unreachable node) keeps the
			// route: a route that no longer works is dropped by the write
			// that fails on it (forget).
			if addr, ok := c.lookupLeader(r.ctx); ok {
				r.addr.Store(&addr)
			}
		})
	}
	if a := r.leader(); a != "" {
		return context.WithValue(ctx, routeKey{}, a), true
	}
	return ctx, false
}

// lookupLeader asks any node for the leader's id and gRPC address; ok is
// false if a call failed. addr is "" if no leader is known or the address
// is not one of the client's endpoints (a node may advertise an address
// this client does not use, e.g. behind a proxy).
func (c *Client) lookupLeader(ctx context.Context) (addr string, ok bool) {
	ctx, cancel := context.WithTimeout(ctx, leaderLookupTimeout)
	defer cancel()
	st, err := c.Cluster.Status(ctx, &pb.StatusRequest{})
	if err != nil {
		return "", false
	}
	if st.GetLeader() == "" {
		return "", true
	}
	ms, err := c.Cluster.Members(ctx, &pb.MembersRequest{})
	if err != nil {
		return "", false
	}
	for _, m := range ms.GetMembers() {
		if m.GetId() == st.GetLeader() && slices.Contains(c.Endpoints, m.GetGrpcAddr()) {
			return m.GetGrpcAddr(), true
		}
	}
	return "", true
}
