package client

import (
	"context"
	"net"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	pb "github.com/raftps/raftps/api/raftpspb"
)

// fakeNode serves KV (counting Puts and Ranges) and Cluster (Status names
// the shared leader, Members lists every fake with its gRPC address).
type fakeNode struct {
	pb.UnimplementedKVServer
	pb.UnimplementedClusterServer
	id     string
	addr   string
	c      *fakeCluster
	puts   atomic.Int64
	ranges atomic.Int64
	fail   atomic.Int64 // Puts still to refuse with Unavailable
	// statusFail makes Status fail with Unavailable; statusDelay (ns)
	// delays it; statuses counts the calls.
	statusFail  atomic.Bool
	statusDelay atomic.Int64
	statuses    atomic.Int64
	g           *grpc.Server
}

type fakeCluster struct {
	mu      sync.Mutex
	leader  string
	members []*pb.Member
	nodes   []*fakeNode
}

func (n *fakeNode) Put(context.Context, *pb.PutRequest) (*pb.PutResponse, error) {
	if n.fail.Add(-1) >= 0 {
		return nil, status.Error(codes.Unavailable, "no leader")
	}
	n.puts.Add(1)
	return &pb.PutResponse{}, nil
}

func (n *fakeNode) Range(context.Context, *pb.RangeRequest) (*pb.RangeResponse, error) {
	n.ranges.Add(1)
	return &pb.RangeResponse{}, nil
}

func (n *fakeNode) Status(ctx context.Context, _ *pb.StatusRequest) (*pb.StatusResponse, error) {
	n.statuses.Add(1)
	if n.statusFail.Load() {
		return nil, status.Error(codes.Unavailable, "status refused by the test")
	}
	select {
	case <-time.After(time.Duration(n.statusDelay.Load())):
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	n.c.mu.Lock()
	defer n.c.mu.Unlock()
	return &pb.StatusResponse{Id: n.id, Leader: n.c.leader}, nil
}

func (n *fakeNode) Members(context.Context, *pb.MembersRequest) (*pb.MembersResponse, error) {
	n.c.mu.Lock()
	defer n.c.mu.Unlock()
	return &pb.MembersResponse{Members: n.c.members}, nil
}

func (c *fakeCluster) setLeader(id string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.leader = id
}

// startFakeCluster serves n fake nodes on loopback, named n1..nn; a
// member's advertised gRPC address is its listener's unless advertise
// overrides it.
func startFakeCluster(t *testing.T, n int, advertise map[string]string) *fakeCluster {
	t.Helper()
	c := &fakeCluster{}
	for i := range n {
		lis, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		node := &fakeNode{id: "n" + string(rune('1'+i)), addr: lis.Addr().String(), c: c, g: grpc.NewServer()}
		pb.RegisterKVServer(node.g, node)
		pb.RegisterClusterServer(node.g, node)
		go node.g.Serve(lis)
		t.Cleanup(node.g.Stop)
		adv := node.addr
		if a, ok := advertise[node.id]; ok {
			adv = a
		}
		c.nodes = append(c.nodes, node)
		c.members = append(c.members, &pb.Member{Id: node.id, GrpcAddr: adv})
	}
	return c
}

func (c *fakeCluster) endpoints() []string {
	var eps []string
	for _, n := range c.nodes {
		eps = append(eps, n.addr)
	}
	return eps
}

// counts returns each node's puts and ranges since the last call.
func (c *fakeCluster) counts() (puts, ranges []int64) {
	for _, n := range c.nodes {
		puts, ranges = append(puts, n.puts.Swap(0)), append(ranges, n.ranges.Swap(0))
	}
	return puts, ranges
}

// routedClient starts 3 fake nodes led by n2 (advertise as for
// startFakeCluster) and a client of all of them that looks the leader up
// every 20 ms; ctx bounds the test's calls.
func routedClient(t *testing.T, advertise map[string]string) (*fakeCluster, *Client, context.Context) {
	t.Helper()
	d := leaderRefresh
	leaderRefresh = 20 * time.Millisecond
	t.Cleanup(func() { leaderRefresh = d }) // after Close (cleanups run last first)
	fc := startFakeCluster(t, 3, advertise)
	fc.setLeader("n2")
	c, err := New(fc.endpoints())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	// The balancer routes a write to the leader only over a ready
	// connection (route.go) and connects to the endpoints one by one: a
	// loaded machine sent 3 of 60 puts round-robin after the route was
	// known, n2's connection not ready yet. Reads are balanced over the
	// ready connections: once every node has served one, all are ready.
	served := make([]int64, len(fc.nodes))
	for slices.Contains(served, 0) {
		if _, err := c.KV.Range(ctx, &pb.RangeRequest{Key: []byte("k")}); err != nil {
			t.Fatal(err)
		}
		_, ranges := fc.counts()
		for i, n := range ranges {
			served[i] += n
		}
	}
	return fc, c, ctx
}

// waitRoute puts until the client routes writes to want ("" = unknown).
func waitRoute(ctx context.Context, t *testing.T, c *Client, want string) {
	t.Helper()
	for c.leaderRoute.leader() != want {
		if _, err := c.KV.Put(ctx, &pb.PutRequest{Key: []byte("k")}); err != nil {
			t.Fatal(err)
		}
		select {
		case <-ctx.Done():
			t.Fatalf("writes still routed to %q, want %q", c.leaderRoute.leader(), want)
		case <-time.After(5 * time.Millisecond):
		}
	}
}

// TestWritesGoToLeader: once the client has looked the leader up, every
// write goes to the leader's endpoint while reads stay balanced over all;
// a new leader is followed; and a leader the client has no endpoint for,
// or none at all, leaves writes balanced too.
func TestWritesGoToLeader(t *testing.T) {
	fc, c, ctx := routedClient(t, map[string]string{"n3": "10.9.9.9:2379"})

	const calls = 60
	run := func() (puts, ranges []int64) {
		fc.counts()
		for range calls {
			// Retry: a call sent just as n1 stops fails Unavailable, as it
			// would with any balancer, before the client sees the close.
			if err := Retry(ctx, func(ctx context.Context) error {
				_, err := c.KV.Put(ctx, &pb.PutRequest{Key: []byte("k")})
				return err
			}); err != nil {
				t.Fatal(err)
			}
			if err := Retry(ctx, func(ctx context.Context) error {
				_, err := c.KV.Range(ctx, &pb.RangeRequest{Key: []byte("k")})
				return err
			}); err != nil {
				t.Fatal(err)
			}
		}
		return fc.counts()
	}
	spread := func(what string, n []int64) {
		t.Helper()
		hit := 0
		for _, x := range n {
			if x > 0 {
				hit++
			}
		}
		if hit < 2 {
			t.Fatalf("%s per node %v: want them balanced over the nodes", what, n)
		}
	}

	waitRoute(ctx, t, c, fc.nodes[1].addr)
	puts, ranges := run()
	if puts[1] != calls {
		t.Fatalf("puts per node %v with n2 leading: want all %d on n2", puts, calls)
	}
	spread("ranges", ranges)

	fc.setLeader("n1")
	waitRoute(ctx, t, c, fc.nodes[0].addr)
	if puts, _ := run(); puts[0] != calls {
		t.Fatalf("puts per node %v after n1 took over: want all %d on n1", puts, calls)
	}

	// n3 advertises an address that is not among the endpoints: no route.
	fc.setLeader("n3")
	waitRoute(ctx, t, c, "")
	puts, _ = run()
	spread("puts with the leader at an unknown address", puts)

	fc.setLeader("")
	fc.nodes[0].g.Stop() // and an endpoint dies: calls go on over the others
	waitRoute(ctx, t, c, "")
	puts, ranges = run()
	spread("puts with no leader", puts)
	spread("ranges with no leader", ranges)
}

// TestFailedLookupKeepsRoute: a lookup of the leader that fails, or is
// slower than leaderRefresh (a loaded machine), does not drop a route that
// works: writes stay on the leader, and a slow lookup still finds a new one.
func TestFailedLookupKeepsRoute(t *testing.T) {
	fc, c, ctx := routedClient(t, nil)
	waitRoute(ctx, t, c, fc.nodes[1].addr)
	statuses := func() (n int64) {
		for _, f := range fc.nodes {
			n += f.statuses.Load()
		}
		return n
	}
	// putWhileLookups puts until the client has made 3 more lookups and
	// returns where the puts went.
	putWhileLookups := func() []int64 {
		fc.counts()
		for from := statuses(); statuses() < from+3; {
			if _, err := c.KV.Put(ctx, &pb.PutRequest{Key: []byte("k")}); err != nil {
				t.Fatal(err)
			}
			time.Sleep(5 * time.Millisecond)
		}
		puts, _ := fc.counts()
		return puts
	}
	for _, f := range fc.nodes {
		f.statusFail.Store(true)
	}
	if puts := putWhileLookups(); puts[0] != 0 || puts[2] != 0 {
		t.Fatalf("puts per node %v while lookups failed: want all on n2, whose route still works", puts)
	}
	for _, f := range fc.nodes {
		f.statusFail.Store(false)
		f.statusDelay.Store(int64(5 * leaderRefresh))
	}
	if puts := putWhileLookups(); puts[0] != 0 || puts[2] != 0 {
		t.Fatalf("puts per node %v while lookups took 5 x leaderRefresh: want all on n2", puts)
	}
	fc.setLeader("n1")
	waitRoute(ctx, t, c, fc.nodes[0].addr) // found by slow lookups
}

// TestOneEndpointNoLookup: a client of one endpoint never looks the
// leader up (every call goes there anyway).
func TestOneEndpointNoLookup(t *testing.T) {
	fc := startFakeCluster(t, 1, nil)
	fc.setLeader("n1")
	c, err := New(fc.endpoints())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if c.leaderRoute != nil {
		t.Fatal("a client of one endpoint has a leader route")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := c.KV.Put(ctx, &pb.PutRequest{Key: []byte("k")}); err != nil {
		t.Fatal(err)
	}
}

// TestFailedRoutedWriteForgetsLeader: a routed write that fails as a
// deposed or cut-off leader's would (Unavailable) drops the route at once,
// and the next write looks the leader up without waiting for the refresh.
func TestFailedRoutedWriteForgetsLeader(t *testing.T) {
	fc, c, ctx := routedClient(t, nil)
	waitRoute(ctx, t, c, fc.nodes[1].addr)
	for c.leaderRoute.running.Load() { // no lookup reads leaderRefresh now
		time.Sleep(time.Millisecond)
	}
	leaderRefresh = time.Hour // from here on only forget starts a lookup

	fc.nodes[1].fail.Store(1)
	if _, err := c.KV.Put(ctx, &pb.PutRequest{Key: []byte("k")}); status.Code(err) != codes.Unavailable {
		t.Fatalf("put on the failing leader: %v, want Unavailable", err)
	}
	if a := c.leaderRoute.leader(); a != "" {
		t.Fatalf("route %q after the routed write failed, want none", a)
	}
	waitRoute(ctx, t, c, fc.nodes[1].addr) // looked up again, within the hour
}
