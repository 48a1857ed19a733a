package master

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"google.golang.org/grpc"

	pb "github.com/raftps/raftps/api/raftpspb"
	"github.com/raftps/raftps/gossip"
	"github.com/raftps/raftps/internal/testing/testutil"
	"github.com/raftps/raftps/schema"
)

// TestMain runs the child process of TestGossipSuspectReported (the
// os/exec helper-process pattern) when MASTER_GOSSIP_CHILD is set, and the
// tests otherwise.
func TestMain(m *testing.M) {
	if id := os.Getenv("MASTER_GOSSIP_CHILD"); id != "" {
		gossipChild(id, os.Getenv("MASTER_GOSSIP_JOIN"))
	}
	os.Exit(m.Run())
}

// gossipChild is a pserver node in a child process: a gossip member id
// that joins join, and a PServer endpoint (every call answered
// Unimplemented: alive). It prints "ready <pserver addr>" and runs until
// it is killed (a minute at most: an orphan's bound).
func gossipChild(id, join string) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		fmt.Println("error", err)
		os.Exit(1)
	}
	gs := grpc.NewServer()
	pb.RegisterPServerServer(gs, pb.UnimplementedPServerServer{})
	go func() { _ = gs.Serve(lis) }()
	g, err := openGossip(id, join)
	if err != nil {
		fmt.Println("error", err)
		os.Exit(1)
	}
	defer g.Close()
	fmt.Println("ready", lis.Addr().String())
	time.Sleep(time.Minute)
	os.Exit(2)
}

// openGossip opens a loopback gossip member id (a pserver node) that
// joins join ("" for none) and waits until it joined.
func openGossip(id, join string) (*gossip.Gossip, error) {
	cfg := gossip.DefaultConfig()
	cfg.BindAddr = "127.0.0.1:0"
	cfg.Meta = gossip.Meta{ID: id, Roles: []string{gossip.RolePServer}}
	if join != "" {
		cfg.Join = []string{join}
	}
	cfg.Logger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError}))
	g, err := gossip.New(cfg)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := g.Open(ctx); err != nil {
		return nil, err
	}
	if join != "" {
		if err := g.Joined(ctx); err != nil {
			g.Close()
			return nil, err
		}
	}
	return g, nil
}

// startGossipChild starts gossipChild id joining join and returns it and
// its PServer address; it is killed when the test ends.
func startGossipChild(t *testing.T, id, join string) (*exec.Cmd, string) {
	t.Helper()
	cmd, line := testutil.StartChild(t, "MASTER_GOSSIP_CHILD="+id, "MASTER_GOSSIP_JOIN="+join)
	f := strings.Fields(line)
	if len(f) != 2 || f[0] != "ready" {
		t.Fatalf("child %s: %q", id, line)
	}
	return cmd, f[1]
}

// TestGossipSuspectReported (issue 34, "gossip suspicion reports to the
// leader"): on a real memberlist cluster on loopback, two pserver nodes
// in child processes, n2 and n4, are SIGSTOPped. Gossip suspects them
// (EventSuspect, before any failure is declared), and the leader's
// Suspects.FollowGossip reports the replicated slots they are primary of
// through Report, which probes before it acts: slot 0's primary is n2's
// own PServer endpoint, stopped with it, so the probe fails and n2's
// in-sync backup n3 is promoted; slot 1's primary, n4, has its PServer
// endpoint in another process that still answers (only n4's gossip is
// stopped: a false suspicion), so the probe answers and the record is
// left alone. raftps_pserver_suspect_reports_total counts both under
// source "gossip". No Master runs: gossip's node-gone path cannot be what
// promoted.
func TestGossipSuspectReported(t *testing.T) {
	s := openStore(t)
	n1, err := openGossip("n1", "")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { n1.Close() })
	n3, err := openGossip("n3", n1.LocalAddr())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { n3.Close() })
	n2, addr2 := startGossipChild(t, "n2", n1.LocalAddr())
	n4, _ := startGossipChild(t, "n4", n1.LocalAddr())
	live := livePServer(t) // n4's pserver endpoint, in this process
	waitUntil(t, 10*time.Second, "n2, n3, n4 alive in n1's view", func() bool {
		alive := aliveNodes(n1)
		return alive.has("n2") && alive.has("n3") && alive.has("n4")
	})

	epoch2 := replicatedSlot(t, s, addr2) // slot 0: primary n2 at addr2, backup n3
	put(t, s, schema.ReplicaKey("j", 1), schema.ReplicaRecord{Primary: schema.ReplicaMember{Node: "n4", Addr: live},
		Backups: []schema.ReplicaMember{{Node: "n3", Addr: "127.0.0.1:1"}}, Incarnation: 4}.Marshal(), 0)
	rec1, _ := readReplica(t, s, "j", 1)

	promoted := counterValue(metricSuspectReports.WithLabelValues(SourceGossip, VerdictPromoted))
	healthy := counterValue(metricSuspectReports.WithLabelValues(SourceGossip, VerdictHealthy))
	var probes atomic.Int64
	sus := NewSuspects(s, n1, probeOver(&probes), 300*time.Millisecond, slogDiscard())
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); sus.FollowGossip(ctx) }()
	t.Cleanup(func() { cancel(); <-done })

	for _, c := range []*exec.Cmd{n2, n4} {
		if err := c.Process.Signal(syscall.SIGSTOP); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = c.Process.Signal(syscall.SIGCONT) })
	}
	start := time.Now()
	// The counters move once each report returned (after its Txn).
	waitUntil(t, 15*time.Second, "a gossip report promoted and one found its primary healthy", func() bool {
		return counterValue(metricSuspectReports.WithLabelValues(SourceGossip, VerdictPromoted)) > promoted &&
			counterValue(metricSuspectReports.WithLabelValues(SourceGossip, VerdictHealthy)) > healthy
	})
	t.Logf("stopped primary failed over %v after SIGSTOP (gossip suspicion, probe of %v)", time.Since(start).Round(time.Millisecond), sus.Timeout())
	r0, _ := readReplica(t, s, "j", 0)
	if r0.Primary.Node != "n3" || r0.Epoch <= epoch2 || len(r0.Backups) != 0 {
		t.Fatalf("slot 0 after the report: %+v, want n3 primary at an epoch > %d", r0, epoch2)
	}
	if got := counterValue(metricSuspectReports.WithLabelValues(SourceGossip, VerdictPromoted)); got != promoted+1 {
		t.Fatalf("gossip reports promoted: %v, want %v", got, promoted+1)
	}
	if r1, _ := readReplica(t, s, "j", 1); r1.Epoch != rec1.Epoch || r1.Primary.Node != "n4" {
		t.Fatalf("slot 1, whose primary answered its probe, changed: %+v (was %+v)", r1, rec1)
	}
}

// counterValue is c's value.
func counterValue(c prometheus.Counter) float64 {
	var m dto.Metric
	if err := c.Write(&m); err != nil {
		panic(err)
	}
	return m.GetCounter().GetValue()
}

// waitUntil polls cond every 20 ms until it holds, or fails the test
// after timeout.
func waitUntil(t *testing.T, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for: %s", timeout, what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestReportSource: the source label of raftps_pserver_suspect_reports_total:
// a report naming a trainer is the trainer's whatever its source says (a
// trainer certificate reports as itself), a node's report its source.
func TestReportSource(t *testing.T) {
	for _, tc := range []struct {
		req  *pb.ReportSuspectRequest
		want string
	}{
		{&pb.ReportSuspectRequest{Trainer: "t1"}, SourceTrainer},
		{&pb.ReportSuspectRequest{Trainer: "t1", Source: SourceGossip}, SourceTrainer},
		{&pb.ReportSuspectRequest{Source: SourceReplication}, SourceReplication},
		{&pb.ReportSuspectRequest{Source: SourceGossip}, SourceGossip},
		{&pb.ReportSuspectRequest{Source: SourceTrainer}, "other"},
		{&pb.ReportSuspectRequest{}, "other"},
	} {
		if got := reportSource(tc.req); got != tc.want {
			t.Errorf("reportSource(%v) = %q, want %q", tc.req, got, tc.want)
		}
	}
}
