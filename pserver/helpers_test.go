package pserver

import (
	"context"
	"testing"

	"google.golang.org/grpc"

	pb "github.com/raftps/raftps/api/raftpspb"
	"github.com/raftps/raftps/pserver/psclient"
	"github.com/raftps/raftps/pserver/wire"
)

// mustSlot builds a slot or fails the test.
func mustSlot(tb testing.TB, spec *pb.JobSpec, slot, n int32) *Slot {
	tb.Helper()
	s, err := NewSlot(spec, slot, n)
	if err != nil {
		tb.Fatalf("NewSlot(%d/%d): %v", slot, n, err)
	}
	return s
}

// pullAll reassembles every dense param from the given slots.
func pullAll(tb testing.TB, slots ...*Slot) map[string][]float32 {
	tb.Helper()
	l := slots[0].Layout()
	out := map[string][]float32{}
	for _, p := range l.Params {
		if !p.Embedding {
			out[p.Spec.GetName()] = make([]float32, p.Size)
		}
	}
	for _, s := range slots {
		resp, err := s.Pull(context.Background(), &pb.PullRequest{})
		if err != nil {
			tb.Fatalf("pull slot %d: %v", s.Index(), err)
		}
		for _, t := range resp.Tensors {
			p, _ := l.Param(t.Name)
			lo, hi := l.BlockRange(p, t.Block)
			wire.GetFloat32s(out[t.Name][lo:hi], t.Data)
		}
	}
	return out
}

// denseTensors cuts flat dense gradients into the block tensors of slot s.
func denseTensors(l *wire.Layout, s int32, grads map[string][]float32) []*pb.Tensor {
	var ts []*pb.Tensor
	for _, p := range l.Params {
		g, ok := grads[p.Spec.GetName()]
		if !ok || p.Embedding {
			continue
		}
		for b := int64(0); b < p.Blocks; b++ {
			if l.SlotOfBlock(p, b) != s {
				continue
			}
			lo, hi := l.BlockRange(p, b)
			data := make([]byte, 4*(hi-lo))
			wire.PutFloat32s(data, g[lo:hi])
			ts = append(ts, &pb.Tensor{Name: p.Spec.GetName(), Block: b, Data: data})
		}
	}
	return ts
}

func packed(f ...float32) []byte {
	b := make([]byte, 4*len(f))
	wire.PutFloat32s(b, f)
	return b
}

// startServers starts n in-process gRPC pservers on 127.0.0.1:0 hosting
// fresh slots of spec; it returns their addresses, Servers and Slots.
func startServers(tb testing.TB, spec *pb.JobSpec, n int32) ([]string, []*Server, []*Slot) {
	tb.Helper()
	var addrs []string
	var srvs []*Server
	var slots []*Slot
	for i := range n {
		lis, err := wire.Listen("127.0.0.1:0")
		if err != nil {
			tb.Fatal(err)
		}
		gs := grpc.NewServer(wire.ServerOptions()...)
		srv := NewServer()
		s := mustSlot(tb, spec, i, n)
		srv.Host(spec.GetName(), i, s)
		pb.RegisterPServerServer(gs, srv)
		go gs.Serve(lis)
		tb.Cleanup(gs.Stop)
		addrs = append(addrs, lis.Addr().String())
		srvs = append(srvs, srv)
		slots = append(slots, s)
	}
	return addrs, srvs, slots
}

func resolverOf(addrs []string) psclient.StaticResolver {
	r := psclient.StaticResolver{}
	for i, a := range addrs {
		r[int32(i)] = a
	}
	return r
}
