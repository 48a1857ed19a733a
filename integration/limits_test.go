package integration

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	pb "github.com/raftps/raftps/api/raftpspb"
)

// nodeAddressSpace is the address-space limit (prlimit --as) each node of
// TestHostileTxnUnderMemoryLimit runs under: an idle node maps about
// 1.8 GB of address space (thread stacks, heap arenas), so this leaves it
// 1.7 GB to grow, far more than it needs, and far less than the hostile
// txn made main's nodes allocate.
const nodeAddressSpace = 3584 << 20

// limitAddressSpace makes every node of c run under prlimit --as=bytes
// (the kernel's RLIMIT_AS: an allocation past it fails and the Go runtime
// dies "out of memory"), on every start.
func limitAddressSpace(t *testing.T, c *Cluster, bytes int64) {
	t.Helper()
	for _, p := range c.Procs {
		p.Args = append([]string{fmt.Sprintf("--as=%d", bytes), "--", p.Bin}, p.Args...)
		p.Bin = "/usr/bin/prlimit"
	}
}

// rangesTxn is a txn of n range ops, each over every key under prefix.
func rangesTxn(prefix string, n int) *pb.TxnRequest {
	req := &pb.TxnRequest{}
	for range n {
		req.Success = append(req.Success, &pb.RequestOp{Request: &pb.RequestOp_RequestRange{
			RequestRange: &pb.RangeRequest{Key: []byte(prefix), RangeEnd: []byte(prefix[:len(prefix)-1] + string(prefix[len(prefix)-1]+1))}}})
	}
	return req
}

// mustAllRunning fails the test if a node exited.
func mustAllRunning(t *testing.T, c *Cluster, when string) {
	t.Helper()
	for _, p := range c.Procs {
		if !p.Running() {
			t.Fatalf("%s: node %s exited (%v): %s", when, p.ID, p.ExitErr(), fatalLines(c))
		}
	}
}

// fatalLines returns the lines of the nodes' logs that report a runtime
// fatal error or a panic (the log tails a failed test prints are mostly
// goroutine stacks).
func fatalLines(c *Cluster) string {
	var out []string
	for _, p := range c.Procs {
		b, _ := os.ReadFile(p.LogPath)
		for _, line := range strings.Split(string(b), "\n") {
			if strings.HasPrefix(line, "fatal error") || strings.HasPrefix(line, "panic:") || strings.HasPrefix(line, "runtime: out of memory") {
				out = append(out, p.ID+": "+line)
			}
		}
	}
	return strings.Join(out, "; ")
}

// TestHostileTxnUnderMemoryLimit is issue 32 hole 1: a txn made only of
// range ops (8,000 of them over 300 KB of keys) made every replica build
// every range result while applying it, and all nodes died out of memory
// (and again replaying the log). Three real nodes, each under an
// address-space limit, take that txn, a 1,000-op one and txns within the
// op cap whose results would exceed the response cap: each is refused
// with InvalidArgument naming the limit, no node exits, writes go on, and
// a restart of every node replays its log and serves again.
func TestHostileTxnUnderMemoryLimit(t *testing.T) {
	c := NewCluster(t, binPath, 3, "--roles", "server")
	limitAddressSpace(t, c, nodeAddressSpace)
	c.StartAll()
	mustLeader(t, c, 60*time.Second)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	cl := c.Client()

	const prefix = "/hostile/"
	value := []byte(strings.Repeat("v", 1024))
	for i := range 300 {
		if _, err := cl.KV.Put(ctx, &pb.PutRequest{Key: fmt.Appendf(nil, "%s%04d", prefix, i), Value: value}); err != nil {
			t.Fatalf("put %d: %v", i, err)
		}
	}

	// A mixed txn within the op cap whose ranges would answer 127 x 300 KB.
	mixed := rangesTxn(prefix, 127)
	mixed.Success = append(mixed.Success, &pb.RequestOp{Request: &pb.RequestOp_RequestPut{
		RequestPut: &pb.PutRequest{Key: []byte("/hostile-mixed"), Value: []byte("x")}}})
	for _, tc := range []struct {
		name string
		req  *pb.TxnRequest
		want string
	}{
		{"8000 ranges", rangesTxn(prefix, 8000), "ops"},
		{"1000 ranges", rangesTxn(prefix, 1000), "ops"},
		{"128 ranges over 300 KB", rangesTxn(prefix, 128), "response"},
		{"127 ranges and a put", mixed, "response"},
	} {
		tctx, tcancel := context.WithTimeout(ctx, 30*time.Second)
		_, err := cl.KV.Txn(tctx, tc.req)
		tcancel()
		if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), tc.want) {
			t.Fatalf("%s: txn answered %v (code %v), want InvalidArgument naming the %s limit; nodes: %s", tc.name, err, status.Code(err), tc.want, fatalLines(c))
		}
		time.Sleep(2 * time.Second) // let every replica apply whatever was proposed
		mustAllRunning(t, c, tc.name)
	}
	if r, err := cl.KV.Range(ctx, &pb.RangeRequest{Key: []byte("/hostile-mixed")}); err != nil || len(r.Kvs) != 0 {
		t.Fatalf("the refused mixed txn wrote its put: %v %v", r, err)
	}
	// A read-only txn within both caps is answered.
	small := rangesTxn(prefix, 2)
	small.Compare = []*pb.Compare{{Key: []byte(prefix + "0000"), Target: pb.Compare_VERSION, Result: pb.Compare_EQUAL, TargetUnion: &pb.Compare_Version{Version: 1}}}
	if r, err := cl.KV.Txn(ctx, small); err != nil || !r.Succeeded || len(r.Responses) != 2 || r.Responses[1].GetResponseRange().GetCount() != 300 {
		t.Fatalf("small read-only txn: %v %v", r, err)
	}
	if _, err := cl.KV.Put(ctx, &pb.PutRequest{Key: []byte("/after"), Value: []byte("1")}); err != nil {
		t.Fatalf("put after the hostile txns: %v", err)
	}

	// Every node restarts and replays its log within the limit.
	for _, p := range c.Procs {
		if err := c.Stop(p); err != nil {
			t.Fatalf("stop %s: %v", p.ID, err)
		}
	}
	c.StartAll()
	mustLeader(t, c, 60*time.Second)
	cl = c.Client()
	if _, err := cl.KV.Put(ctx, &pb.PutRequest{Key: []byte("/after-restart"), Value: []byte("1")}); err != nil {
		t.Fatalf("put after restart: %v", err)
	}
	r, err := cl.KV.Range(ctx, &pb.RangeRequest{Key: []byte(prefix), RangeEnd: []byte("/hostile0"), CountOnly: true})
	if err != nil || r.Count != 300 {
		t.Fatalf("after restart: %v keys (%v), want 300", r.GetCount(), err)
	}
	time.Sleep(2 * time.Second)
	mustAllRunning(t, c, "after restart")
}
