package psclient

import (
	"context"
	"errors"
	"net"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	pb "github.com/raftps/raftps/api/raftpspb"
	"github.com/raftps/raftps/pserver/wire"
)

type report struct {
	slot int32
	addr string
	err  error
}

// answering is a PServer whose every pull is answered with err.
type answering struct {
	pb.UnimplementedPServerServer
	err error
}

func (a answering) Pull(context.Context, *pb.PullRequest) (*pb.PullResponse, error) {
	return nil, a.err
}

func serve(t *testing.T, srv pb.PServerServer) string {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	g := grpc.NewServer()
	pb.RegisterPServerServer(g, srv)
	go func() { _ = g.Serve(lis) }()
	t.Cleanup(g.Stop)
	return lis.Addr().String()
}

func spec() *pb.JobSpec {
	return &pb.JobSpec{Name: "j", Model: &pb.ModelSpec{Name: "softmax"}, NumPservers: 1,
		Optimizer: &pb.OptimizerSpec{Name: "sgd", LearningRate: 0.1}}
}

// TestFailedCallReports (issue 34, fast detection): a pull that fails at
// the transport (the slot's pserver refuses connections: a SIGKILLed
// primary) is reported to the SuspectReporter with the slot and the
// address the call went to, once per report in flight; a pserver that
// answers, even with an error (ErrNotHosted: the slot moved; ErrInvalid),
// is not reported.
func TestFailedCallReports(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := lis.Addr().String()
	lis.Close() // connections refused

	reports := make(chan report, 100)
	reporter := WithSuspectReporter(func(_ context.Context, slot int32, addr string, err error) bool {
		reports <- report{slot, addr, err}
		return false
	})
	c, err := NewClient(spec(), "t1", StaticResolver{0: dead}, reporter, WithRetries(3, time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := c.Pull(ctx, c.NewParams()); err == nil {
		t.Fatal("a pull from a refusing address succeeded")
	}
	select {
	case r := <-reports:
		if r.slot != 0 || r.addr != dead || !Transport(r.err) {
			t.Fatalf("report %+v, want slot 0 at %s with a transport error", r, dead)
		}
	case <-ctx.Done():
		t.Fatal("a failed call to a slot's pserver was not reported")
	}

	for _, answer := range []error{wire.Errorf(wire.ErrNotHosted, "moved"), wire.Errorf(wire.ErrInvalid, "bad"), status.Error(codes.Internal, "boom")} {
		addr := serve(t, answering{err: wire.ToGRPC(answer)})
		reports := make(chan report, 100)
		reporter := WithSuspectReporter(func(_ context.Context, slot int32, addr string, err error) bool {
			reports <- report{slot, addr, err}
			return false
		})
		c, err := NewClient(spec(), "t1", StaticResolver{0: addr}, reporter, WithRetries(2, time.Millisecond))
		if err != nil {
			t.Fatal(err)
		}
		if err := c.Pull(ctx, c.NewParams()); err == nil {
			t.Fatalf("pull answered %v succeeded", answer)
		}
		c.Close()
		// A report would have been sent before Pull returned its error.
		select {
		case r := <-reports:
			t.Fatalf("a pserver that answered %v was reported: %+v", answer, r)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// TestProbe: Probe is nil for a pserver that answers anything (a served
// slot answers ErrInvalid for ProbeParam; ErrNotHosted; Unimplemented),
// and the transport error for one that refuses connections or does not
// answer within the deadline.
func TestProbe(t *testing.T) {
	ctx := context.Background()
	probe := func(addr string, d time.Duration) error {
		cc, err := grpc.NewClient(addr, wire.DialOptions()...)
		if err != nil {
			t.Fatal(err)
		}
		defer cc.Close()
		pctx, cancel := context.WithTimeout(ctx, d)
		defer cancel()
		return Probe(pctx, cc, "j", 0)
	}
	for _, answer := range []error{wire.Errorf(wire.ErrInvalid, "no param"), wire.Errorf(wire.ErrNotHosted, "moved")} {
		if err := probe(serve(t, answering{err: wire.ToGRPC(answer)}), 5*time.Second); err != nil {
			t.Errorf("probe of a pserver answering %v: %v, want nil", answer, err)
		}
	}
	if err := probe(serve(t, pb.UnimplementedPServerServer{}), 5*time.Second); err != nil {
		t.Errorf("probe of a pserver answering Unimplemented: %v, want nil", err)
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	refused := lis.Addr().String()
	lis.Close()
	if err := probe(refused, 5*time.Second); !Transport(err) {
		t.Errorf("probe of a refusing address: %v, want a transport error", err)
	}
	silent, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer silent.Close()
	go func() {
		for {
			c, err := silent.Accept()
			if err != nil {
				return
			}
			defer c.Close()
		}
	}()
	start := time.Now()
	if err := probe(silent.Addr().String(), 200*time.Millisecond); !Transport(err) {
		t.Errorf("probe of a silent pserver: %v, want a transport error", err)
	}
	if took := time.Since(start); took > 10*time.Second {
		t.Errorf("probe of a silent pserver took %v, its deadline 200ms", took)
	}
}

// movingResolver resolves slot 0 to addr, which the test changes.
type movingResolver struct {
	mu   sync.Mutex
	addr string
}

func (r *movingResolver) Slots(context.Context, string) (map[int32]string, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return map[int32]string{0: r.addr}, nil
}

// TestReportMovedRetriesNow: when the reporter says the slot moved (the
// master promoted its backup), the call waiting out its backoff retries
// at once and reaches the new address: with a first backoff of 10 s, the
// pull reaches the promoted pserver (which answers ErrInvalid here)
// long before the 10 s are over.
func TestReportMovedRetriesNow(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := lis.Addr().String()
	lis.Close()
	promoted := serve(t, answering{err: wire.ToGRPC(wire.Errorf(wire.ErrInvalid, "reached the promoted pserver"))})
	r := &movingResolver{addr: dead}
	c, err := NewClient(spec(), "t1", r, WithRetries(3, 10*time.Second), WithSuspectReporter(func(context.Context, int32, string, error) bool {
		r.mu.Lock()
		r.addr = promoted // the master promoted the backup; its claim is in
		r.mu.Unlock()
		return true
	}))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	start := time.Now()
	err = c.Pull(ctx, c.NewParams())
	took := time.Since(start)
	if !errors.Is(err, wire.ErrInvalid) {
		t.Fatalf("pull: %v, want the promoted pserver's ErrInvalid", err)
	}
	if took >= 5*time.Second {
		t.Fatalf("the pull reached the promoted pserver after %v: it waited out its 10 s backoff", took)
	}
	t.Logf("reached the promoted pserver %v after the first call", took.Round(time.Millisecond))
}
