package replica_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"math/rand"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	pb "github.com/raftps/raftps/api/raftpspb"
	"github.com/raftps/raftps/pserver"
	"github.com/raftps/raftps/pserver/replica"
)

// optimizers are every optimizer the pserver supports, with weight decay
// and a learning rate schedule so that every path of the update runs.
var optimizers = []*pb.OptimizerSpec{
	{Name: "sgd", LearningRate: 0.1, WeightDecay: 0.01, LrDecay: 0.01},
	{Name: "momentum", LearningRate: 0.05, Momentum: 0.9, WeightDecay: 0.01},
	{Name: "momentum", LearningRate: 0.05, Momentum: 0.9, Nesterov: true, LrDecay: 0.01},
	{Name: "adam", LearningRate: 0.01, Beta1: 0.9, Beta2: 0.999, Epsilon: 1e-8, WeightDecay: 0.01},
	{Name: "adagrad", LearningRate: 0.1, Epsilon: 1e-10},
}

func optName(o *pb.OptimizerSpec) string {
	if o.Nesterov {
		return o.Name + "-nesterov"
	}
	return o.Name
}

// testSpec is a one-slot job with two dense params (several blocks each)
// and an embedding table.
func testSpec(mode pb.UpdateMode, opt *pb.OptimizerSpec) *pb.JobSpec {
	return &pb.JobSpec{
		Name: "rep", Mode: mode, Seed: 7, DenseBlockSize: 4, NumVirtualShards: 8, NumPservers: 1,
		ScaleLrWithTrainers: true, Optimizer: opt,
		Params: []*pb.ParamSpec{
			{Name: "w", Shape: []int64{5, 3}, Init: pb.Initializer_INIT_GLOROT},
			{Name: "b", Shape: []int64{6}, Init: pb.Initializer_INIT_ZEROS},
			{Name: "emb", Shape: []int64{40, 3}, Embedding: true, Init: pb.Initializer_INIT_UNIFORM, Scale: 0.1},
		},
	}
}

func mustSlot(t *testing.T, spec *pb.JobSpec) *pserver.Slot {
	t.Helper()
	s, err := pserver.NewSlot(spec, 0, 1)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func packed(f []float32) []byte {
	b := make([]byte, 4*len(f))
	for i, v := range f {
		binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(v))
	}
	return b
}

// grads returns a push's gradient for every dense block and three distinct
// embedding rows, drawn from rng.
func grads(t *testing.T, s *pserver.Slot, rng *rand.Rand) []*pb.Tensor {
	t.Helper()
	l := s.Layout()
	var ts []*pb.Tensor
	for _, p := range l.Params {
		if p.Embedding {
			rows := rng.Perm(40)[:3]
			g := make([]float32, 3*p.Dim)
			for i := range g {
				g[i] = float32(rng.NormFloat64())
			}
			ts = append(ts, &pb.Tensor{Name: p.Spec.GetName(), Rows: []int64{int64(rows[0]), int64(rows[1]), int64(rows[2])}, Data: packed(g)})
			continue
		}
		for b := range p.Blocks {
			lo, hi := l.BlockRange(p, b)
			g := make([]float32, hi-lo)
			for i := range g {
				g[i] = float32(rng.NormFloat64())
			}
			ts = append(ts, &pb.Tensor{Name: p.Spec.GetName(), Block: b, Data: packed(g)})
		}
	}
	return ts
}

// recorder collects a primary's updates in the order it applied them.
type recorder struct {
	mu      sync.Mutex
	updates []*pb.ReplicateRequest
}

func (r *recorder) hook(u *pb.ReplicateRequest) {
	r.mu.Lock()
	r.updates = append(r.updates, u)
	r.mu.Unlock()
}

func (r *recorder) all() []*pb.ReplicateRequest {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.updates)
}

// encoded returns every vshard blob of s's snapshot, with its version
// and step: byte equality of two slots' encodings is equality of values,
// optimizer state and update counts.
func encoded(t *testing.T, s *pserver.Slot) [][]byte {
	t.Helper()
	snap := s.Snapshot()
	out := [][]byte{[]byte(fmt.Sprintf("version %d step %d", snap.Version, snap.Step))}
	for v := range int32(8) {
		if snap.VShards[v] == nil {
			continue
		}
		b, err := pserver.EncodeVShard(snap, v)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, b)
	}
	return out
}

func assertSame(t *testing.T, want, got *pserver.Slot, what string) {
	t.Helper()
	w, g := encoded(t, want), encoded(t, got)
	if len(w) != len(g) {
		t.Fatalf("%s: %d vshard blobs, primary %d", what, len(g), len(w))
	}
	for i := range w {
		if !bytes.Equal(w[i], g[i]) {
			t.Fatalf("%s differs from the primary (blob %d; %q vs %q)", what, i, g[0], w[0])
		}
	}
}

// backups returns n backups of spec at epoch and the replicator of a
// primary at epoch with those backups.
func backups(t *testing.T, spec *pb.JobSpec, n int, epoch int64) ([]*replica.Backup, *replica.Replicator) {
	peers := map[string]replica.Peer{}
	var bs []*replica.Backup
	for i := range n {
		b := replica.NewBackup(spec.GetName(), mustSlot(t, spec), epoch)
		bs = append(bs, b)
		peers[fmt.Sprintf("n%d", i+2)] = b
	}
	return bs, replica.NewReplicator(epoch, peers)
}

// replicateAll sends every update concurrently, last first, so backups
// see them out of order and must apply them in seq order.
func replicateAll(t *testing.T, r *replica.Replicator, us []*pb.ReplicateRequest) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	errs := make([]error, len(us))
	var wg sync.WaitGroup
	for i := len(us) - 1; i >= 0; i-- {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = r.Replicate(ctx, us[i])
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
}

// TestBackupsMatchPrimaryAsync: after concurrent async pushes of three
// trainers (learning rate scaled by the primary's trainer set, which the
// backups do not have), with every optimizer, two backups that got the
// updates out of order end byte-identical to the primary, and a promoted
// backup answers a trainer's retried push id without applying it again.
func TestBackupsMatchPrimaryAsync(t *testing.T) {
	for _, opt := range optimizers {
		t.Run(optName(opt), func(t *testing.T) {
			spec := testSpec(pb.UpdateMode_UPDATE_MODE_ASYNC, opt)
			p := mustSlot(t, spec)
			p.SetTrainers([]string{"t0", "t1", "t2"})
			var rec recorder
			p.OnUpdate(rec.hook)
			const pushes = 15
			var wg sync.WaitGroup
			for tr := range 3 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					rng := rand.New(rand.NewSource(int64(tr)))
					for id := uint64(1); id <= pushes; id++ {
						req := &pb.PushRequest{Job: "rep", Trainer: fmt.Sprintf("t%d", tr), PushId: id, Examples: 4, Grads: grads(t, p, rng)}
						if _, err := p.Push(context.Background(), req); err != nil {
							t.Error(err)
							return
						}
					}
				}()
			}
			wg.Wait()
			// A retry of an applied push id is answered, not applied or reported.
			retry := &pb.PushRequest{Job: "rep", Trainer: "t1", PushId: 3, Examples: 4, Grads: grads(t, p, rand.New(rand.NewSource(9)))}
			resp, err := p.Push(context.Background(), retry)
			if err != nil {
				t.Fatal(err)
			}
			us := rec.all()
			if len(us) != 3*pushes || p.Version() != 3*pushes {
				t.Fatalf("primary reported %d updates at version %d, want %d", len(us), p.Version(), 3*pushes)
			}
			for i, u := range us {
				if u.GetSeq() != int64(i+1) || u.GetLrScale() != 3 || len(u.GetPushIds()) != 1 {
					t.Fatalf("update %d: seq %d, lr scale %g, push ids %v", i, u.GetSeq(), u.GetLrScale(), u.GetPushIds())
				}
			}
			bs, r := backups(t, spec, 2, 1)
			replicateAll(t, r, us)
			for i, b := range bs {
				if b.Applied() != 3*pushes {
					t.Fatalf("backup %d applied %d", i, b.Applied())
				}
				assertSame(t, p, b.Slot(), fmt.Sprintf("backup %d", i))
			}
			// Promoted, backup 0 answers the retry with the version the
			// first attempt produced and applies nothing.
			nb := bs[0].Slot()
			nb.SetTrainers([]string{"t0", "t1", "t2"})
			got, err := nb.Push(context.Background(), retry)
			if err != nil {
				t.Fatal(err)
			}
			if got.GetVersion() != resp.GetVersion() || nb.Version() != 3*pushes {
				t.Fatalf("retry on the promoted backup: version %d (primary answered %d), slot at %d", got.GetVersion(), resp.GetVersion(), nb.Version())
			}
			assertSame(t, p, nb, "promoted backup after the retry")
		})
	}
}

// TestBackupsMatchPrimarySync: sync steps of two trainers (the weighted
// mean), then steps of one (the solo path), with every optimizer: the
// backups end byte-identical to the primary and know every step's push
// ids.
func TestBackupsMatchPrimarySync(t *testing.T) {
	for _, opt := range optimizers {
		t.Run(optName(opt), func(t *testing.T) {
			spec := testSpec(pb.UpdateMode_UPDATE_MODE_SYNC, opt)
			p := mustSlot(t, spec)
			p.SetTrainers([]string{"a", "b"})
			var rec recorder
			p.OnUpdate(rec.hook)
			rngs := map[string]*rand.Rand{"a": rand.New(rand.NewSource(1)), "b": rand.New(rand.NewSource(2))}
			push := func(tr string, step int64) *pb.PushRequest {
				return &pb.PushRequest{Job: "rep", Trainer: tr, Step: step, PushId: uint64(step + 1), Examples: int64(len(tr)) + step%3, Grads: grads(t, p, rngs[tr])}
			}
			const both, solo = 6, 3
			for step := range int64(both) {
				reqs := []*pb.PushRequest{push("a", step), push("b", step)}
				var wg sync.WaitGroup
				for _, req := range reqs {
					wg.Add(1)
					go func() {
						defer wg.Done()
						if _, err := p.Push(context.Background(), req); err != nil {
							t.Error(err)
						}
					}()
				}
				wg.Wait()
			}
			p.LeaveStep("b")
			var last *pb.PushRequest
			for step := int64(both); step < both+solo; step++ {
				last = push("a", step)
				if _, err := p.Push(context.Background(), last); err != nil {
					t.Fatal(err)
				}
			}
			us := rec.all()
			if len(us) != both+solo || p.Step() != both+solo {
				t.Fatalf("primary reported %d updates at step %d, want %d", len(us), p.Step(), both+solo)
			}
			if u := us[0]; u.GetLrScale() != 2 || len(u.GetPushIds()) != 2 || u.GetPushIds()[0].GetTrainer() != "a" {
				t.Fatalf("first step's update: lr scale %g, push ids %v", u.GetLrScale(), u.GetPushIds())
			}
			bs, r := backups(t, spec, 2, 1)
			replicateAll(t, r, us)
			for i, b := range bs {
				assertSame(t, p, b.Slot(), fmt.Sprintf("backup %d", i))
			}
			nb := bs[1].Slot()
			nb.SetTrainers([]string{"a"})
			got, err := nb.Push(context.Background(), last)
			if err != nil {
				t.Fatal(err)
			}
			if got.GetVersion() != p.Version() || nb.Step() != both+solo {
				t.Fatalf("retry of the last step on the promoted backup: version %d, step %d; want version %d, step %d", got.GetVersion(), nb.Step(), p.Version(), both+solo)
			}
		})
	}
}

// TestDeposedPrimaryGetsNoAck: once a backup knows epoch 2 (from its watch
// or from the new primary's first message), the epoch-1 primary's updates
// are refused with FailedPrecondition naming both epochs, a waiting one
// included, and nothing of them is applied; the trainer whose push the
// deposed primary could not acknowledge retries it on the new primary,
// where it applies exactly once.
func TestDeposedPrimaryGetsNoAck(t *testing.T) {
	spec := testSpec(pb.UpdateMode_UPDATE_MODE_ASYNC, optimizers[1])
	old := mustSlot(t, spec)
	var rec recorder
	old.OnUpdate(rec.hook)
	bs, r1 := backups(t, spec, 2, 1)
	ctx := context.Background()
	rng := rand.New(rand.NewSource(3))
	first := &pb.PushRequest{Job: "rep", Trainer: "t", PushId: 1, Grads: grads(t, old, rng)}
	if _, err := old.Push(ctx, first); err != nil {
		t.Fatal(err)
	}
	if err := r1.Replicate(ctx, rec.all()[0]); err != nil {
		t.Fatal(err)
	}

	// Promotion: backup 0 (node n2) learns epoch 2 from its watch; backup
	// 1 (n3) from the new primary's first message, a duplicate here.
	bs[0].SetEpoch(2)
	r2 := replica.NewReplicator(2, map[string]replica.Peer{"n3": bs[1]})
	if err := r2.Replicate(ctx, rec.all()[0]); err != nil {
		t.Fatal(err)
	}
	if bs[1].Epoch() != 2 {
		t.Fatalf("backup 1 knows epoch %d after the new primary's message, want 2", bs[1].Epoch())
	}

	// The old primary and the trainer keep talking: the push applies on the
	// old primary, but no backup acknowledges it.
	second := &pb.PushRequest{Job: "rep", Trainer: "t", PushId: 2, Grads: grads(t, old, rng)}
	if _, err := old.Push(ctx, second); err != nil {
		t.Fatal(err)
	}
	err := r1.Replicate(ctx, rec.all()[1])
	var be *replica.BackupError
	if !errors.As(err, &be) || !be.Deposed() || len(be.Failed) != 2 || !errors.Is(err, replica.ErrStaleEpoch) {
		t.Fatalf("deposed primary's replicate: %v, want both backups refusing with ErrStaleEpoch", err)
	}
	if status.Code(err) != codes.FailedPrecondition {
		t.Fatalf("code %v, want FailedPrecondition", status.Code(err))
	}
	for i, e := range be.Errs {
		if status.Code(e) != codes.FailedPrecondition || !strings.Contains(e.Error(), "epoch 1") || !strings.Contains(e.Error(), "epoch 2") {
			t.Fatalf("backup %s's refusal %q: want FailedPrecondition naming epochs 1 and 2", be.Failed[i], e)
		}
	}
	for i, b := range bs {
		if b.Applied() != 1 {
			t.Fatalf("backup %d applied %d updates of a deposed primary's, want only the first", i, b.Applied())
		}
	}

	// The trainer, refused, resolves the new primary (backup 0) and
	// retries with the same push id: applied once, replicated at epoch 2.
	np := bs[0].Slot()
	var nrec recorder
	np.OnUpdate(nrec.hook)
	for range 2 {
		if _, err := np.Push(ctx, second); err != nil {
			t.Fatal(err)
		}
	}
	if np.Version() != 2 || len(nrec.all()) != 1 {
		t.Fatalf("new primary at version %d with %d updates after the retries, want 2 and 1", np.Version(), len(nrec.all()))
	}
	if err := r2.Replicate(ctx, nrec.all()[0]); err != nil {
		t.Fatal(err)
	}
	assertSame(t, np, bs[1].Slot(), "backup of the new primary")
	// Same gradients, same order: the new primary is where the old one got to.
	assertSame(t, old, np, "new primary against the deposed one")
}

// TestWaitingOldEpochFailsOnNewEpoch: a request of epoch 1 waiting for an
// earlier seq is refused once the backup adopts epoch 2, not applied later.
func TestWaitingOldEpochFailsOnNewEpoch(t *testing.T) {
	spec := testSpec(pb.UpdateMode_UPDATE_MODE_ASYNC, optimizers[0])
	b := replica.NewBackup("rep", mustSlot(t, spec), 1)
	us := primaryUpdates(t, spec, 2)
	u2 := withEpoch(us[1], 1)
	done := make(chan error, 1)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	go func() {
		_, err := b.Replicate(ctx, u2)
		done <- err
	}()
	waitFor(t, func() bool { return b.Waiting() == 1 })
	b.SetEpoch(2)
	if err := <-done; !errors.Is(err, replica.ErrStaleEpoch) || status.Code(err) != codes.FailedPrecondition {
		t.Fatalf("waiting epoch-1 request after epoch 2: %v, want ErrStaleEpoch", err)
	}
	if b.Applied() != 0 {
		t.Fatalf("applied %d", b.Applied())
	}
}

// TestOutOfOrderBuffered: requests ahead of their turn wait (they are
// buffered, not refused) and apply in seq order; a duplicate is
// acknowledged and applied once; a request more than MaxPending ahead is
// ResourceExhausted; a request for another slot is FailedPrecondition.
func TestOutOfOrderBuffered(t *testing.T) {
	spec := testSpec(pb.UpdateMode_UPDATE_MODE_ASYNC, optimizers[3])
	p, us := primaryAndUpdates(t, spec, 3)
	b := replica.NewBackup("rep", mustSlot(t, spec), 1)
	ctx := context.Background()
	acks := make(chan *pb.ReplicateAck, 2)
	for _, u := range []*pb.ReplicateRequest{us[2], us[1]} {
		go func() {
			ack, err := b.Replicate(ctx, withEpoch(u, 1))
			if err != nil {
				t.Error(err)
			}
			acks <- ack
		}()
	}
	waitFor(t, func() bool { return b.Waiting() == 2 })
	if b.Applied() != 0 {
		t.Fatalf("applied %d before seq 1 arrived", b.Applied())
	}
	ack, err := b.Replicate(ctx, withEpoch(us[0], 1))
	if err != nil || ack.GetApplied() < 1 || ack.GetEpoch() != 1 {
		t.Fatalf("seq 1: ack %v, %v", ack, err)
	}
	for range 2 {
		if a := <-acks; a == nil || a.GetApplied() < 2 {
			t.Fatalf("buffered request acknowledged with %v", a)
		}
	}
	if b.Applied() != 3 {
		t.Fatalf("applied %d, want 3", b.Applied())
	}
	// A duplicate: acknowledged, not applied again.
	ack, err = b.Replicate(ctx, withEpoch(us[1], 1))
	if err != nil || ack.GetApplied() != 3 || b.Slot().Version() != 3 {
		t.Fatalf("duplicate seq 2: ack %v, %v, slot version %d", ack, err, b.Slot().Version())
	}
	assertSame(t, p, b.Slot(), "backup")

	far := withEpoch(us[0], 1)
	far.Seq = 3 + replica.MaxPending + 1
	if _, err := b.Replicate(ctx, far); !errors.Is(err, replica.ErrTooFarAhead) || status.Code(err) != codes.ResourceExhausted {
		t.Fatalf("seq %d: %v, want ResourceExhausted", far.Seq, err)
	}
	other := withEpoch(us[0], 1)
	other.Slot = 1
	if _, err := b.Replicate(ctx, other); !errors.Is(err, replica.ErrWrongSlot) || status.Code(err) != codes.FailedPrecondition {
		t.Fatalf("slot 1 on a backup of slot 0: %v, want FailedPrecondition", err)
	}
	assertSame(t, p, b.Slot(), "backup after refused requests")
}

func primaryAndUpdates(t *testing.T, spec *pb.JobSpec, n int) (*pserver.Slot, []*pb.ReplicateRequest) {
	t.Helper()
	p := mustSlot(t, spec)
	var rec recorder
	p.OnUpdate(rec.hook)
	rng := rand.New(rand.NewSource(5))
	for i := range n {
		if _, err := p.Push(context.Background(), &pb.PushRequest{Job: "rep", Trainer: "t", PushId: uint64(i + 1), Grads: grads(t, p, rng)}); err != nil {
			t.Fatal(err)
		}
	}
	return p, rec.all()
}

func primaryUpdates(t *testing.T, spec *pb.JobSpec, n int) []*pb.ReplicateRequest {
	_, us := primaryAndUpdates(t, spec, n)
	return us
}

func withEpoch(u *pb.ReplicateRequest, epoch int64) *pb.ReplicateRequest {
	c := proto.Clone(u).(*pb.ReplicateRequest)
	c.Epoch = epoch
	return c
}

// waitFor polls cond for at most 30 s (a bound for a loaded machine, not
// a timing assumption: cond is expected to become true).
func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not reached in 30 s")
		}
		time.Sleep(time.Millisecond)
	}
}
