package pserver

import (
	"context"
	"errors"
	"testing"

	pb "github.com/raftps/raftps/api/raftpspb"
	"github.com/raftps/raftps/pserver/optim"
	"github.com/raftps/raftps/pserver/wire"
)

// TestApplyReplicatedRefuses: a replicated update out of sequence is
// wire.ErrStale, one with a non-positive learning rate scale or a bad tensor is
// wire.ErrInvalid, and none of them changes the slot; a refused push is not
// reported to OnUpdate.
func TestApplyReplicatedRefuses(t *testing.T) {
	spec := &pb.JobSpec{Name: "r", Mode: pb.UpdateMode_UPDATE_MODE_ASYNC, Seed: 1, DenseBlockSize: 4, NumVirtualShards: 4, NumPservers: 1,
		Optimizer: &pb.OptimizerSpec{Name: optim.SGD, LearningRate: 0.1},
		Params:    []*pb.ParamSpec{{Name: "w", Shape: []int64{4}, Init: pb.Initializer_INIT_UNIFORM, Scale: 1}}}
	p, b := mustSlot(t, spec, 0, 1), mustSlot(t, spec, 0, 1)
	var got []*pb.ReplicateRequest
	p.OnUpdate(func(u *pb.ReplicateRequest) { got = append(got, u) })
	g := []*pb.Tensor{{Name: "w", Data: packed(1, 2, 3, 4)}}
	if _, err := p.Push(context.Background(), &pb.PushRequest{Trainer: "t", PushId: 1, Grads: g}); err != nil {
		t.Fatal(err)
	}
	bad := []*pb.Tensor{{Name: "w", Data: packed(1, 2, 3, float32(MaxGradient)*2)}}
	if _, err := p.Push(context.Background(), &pb.PushRequest{Trainer: "t", PushId: 2, Grads: bad}); !errors.Is(err, wire.ErrInvalid) {
		t.Fatalf("bad push: %v", err)
	}
	if len(got) != 1 || got[0].GetSeq() != 1 || got[0].GetLrScale() != 1 {
		t.Fatalf("reported %v, want the one applied update", got)
	}
	before := pullAll(t, b)
	for _, u := range []struct {
		req  *pb.ReplicateRequest
		want error
	}{
		{&pb.ReplicateRequest{Seq: 2, LrScale: 1, Grads: g}, wire.ErrStale},
		{&pb.ReplicateRequest{Seq: 1, LrScale: 0, Grads: g}, wire.ErrInvalid},
		{&pb.ReplicateRequest{Seq: 1, LrScale: 1, Grads: bad}, wire.ErrInvalid},
	} {
		if err := b.ApplyReplicated(u.req); !errors.Is(err, u.want) {
			t.Fatalf("ApplyReplicated(seq %d, lr scale %g): %v, want %v", u.req.Seq, u.req.LrScale, err, u.want)
		}
	}
	if b.Version() != 0 || pullAll(t, b)["w"][0] != before["w"][0] {
		t.Fatal("a refused replicated update changed the slot")
	}
	if err := b.ApplyReplicated(got[0]); err != nil {
		t.Fatal(err)
	}
	if pw, bw := pullAll(t, p)["w"], pullAll(t, b)["w"]; b.Version() != 1 || pw[3] != bw[3] {
		t.Fatalf("backup %v at version %d, primary %v", bw, b.Version(), pw)
	}
}

// TestAckGate: a push is acknowledged only once the slot's ack gate lets
// its version through; refused, the trainer gets the gate's error though
// the update applied, and its retry with the same push id (not applied
// again) passes the gate again with the version the push produced.
func TestAckGate(t *testing.T) {
	spec := &pb.JobSpec{Name: "r", Mode: pb.UpdateMode_UPDATE_MODE_ASYNC, Seed: 1, DenseBlockSize: 4, NumVirtualShards: 4, NumPservers: 1,
		Optimizer: &pb.OptimizerSpec{Name: optim.SGD, LearningRate: 0.1},
		Params:    []*pb.ParamSpec{{Name: "w", Shape: []int64{4}, Init: pb.Initializer_INIT_UNIFORM, Scale: 1}}}
	p := mustSlot(t, spec, 0, 1)
	errNotYet := errors.New("not replicated yet")
	var seen []int64
	allow := int64(1)
	p.SetAckGate(func(_ context.Context, v int64) error {
		seen = append(seen, v)
		if v > allow {
			return errNotYet
		}
		return nil
	})
	g := []*pb.Tensor{{Name: "w", Data: packed(1, 2, 3, 4)}}
	ctx := context.Background()
	if r, err := p.Push(ctx, &pb.PushRequest{Trainer: "t", PushId: 1, Grads: g}); err != nil || r.Version != 1 {
		t.Fatalf("push 1: %v, %v", r, err)
	}
	if _, err := p.Push(ctx, &pb.PushRequest{Trainer: "t", PushId: 2, Grads: g}); !errors.Is(err, errNotYet) {
		t.Fatalf("push 2 through a closed gate: %v, want the gate's error", err)
	}
	allow = 2
	if r, err := p.Push(ctx, &pb.PushRequest{Trainer: "t", PushId: 2, Grads: g}); err != nil || r.Version != 2 {
		t.Fatalf("retry of push 2: %v, %v; want version 2", r, err)
	}
	if p.Version() != 2 || len(seen) != 3 || seen[0] != 1 || seen[1] != 2 || seen[2] != 2 {
		t.Fatalf("slot at version %d, gate saw %v; want version 2 and 1, 2, 2", p.Version(), seen)
	}
	p.SetAckGate(nil)
	if _, err := p.Push(ctx, &pb.PushRequest{Trainer: "t", PushId: 3, Grads: g}); err != nil {
		t.Fatalf("push without a gate: %v", err)
	}
}
