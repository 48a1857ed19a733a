package storetest

import (
	"context"
	"errors"
	"testing"
	"time"

	pb "github.com/raftps/raftps/api/raftpspb"
	"github.com/raftps/raftps/fsm"
)

// TestStore: the store behaves as the state machine does in a cluster:
// revisions count writes, a txn's compare decides its branch, a lease's
// keys vanish when it is revoked or expired, a watch sees later writes,
// job events are recorded, and Fail cuts a method off until reset.
func TestStore(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s := New()
	wch, err := s.Watch(ctx, &pb.WatchRequest{Key: []byte("/a")})
	if err != nil {
		t.Fatal(err)
	}
	before := s.FSM().Revision()
	p, err := s.Put(ctx, &pb.PutRequest{Key: []byte("/a"), Value: []byte("1")})
	if err != nil || p.Header.Revision != before+1 {
		t.Fatalf("put: %v %v, want revision %d", p, err, before+1)
	}
	select {
	case w := <-wch:
		if len(w.Events) != 1 || string(w.Events[0].Kv.Value) != "1" {
			t.Fatalf("watch: %v", w)
		}
	case <-ctx.Done():
		t.Fatal("watch saw no event")
	}
	txn := &pb.TxnRequest{
		Compare: []*pb.Compare{{Key: []byte("/a"), Target: pb.Compare_MOD, Result: pb.Compare_EQUAL,
			TargetUnion: &pb.Compare_ModRevision{ModRevision: p.Header.Revision}}},
		Success: []*pb.RequestOp{{Request: &pb.RequestOp_RequestPut{RequestPut: &pb.PutRequest{Key: []byte("/a"), Value: []byte("2")}}}},
	}
	if r, err := s.Txn(ctx, txn); err != nil || !r.Succeeded {
		t.Fatalf("txn at the put's mod revision: %v %v", r, err)
	}
	if r, err := s.Txn(ctx, txn); err != nil || r.Succeeded {
		t.Fatalf("txn at a stale mod revision: %v %v, want the failure branch", r, err)
	}

	g, err := s.LeaseGrant(ctx, &pb.LeaseGrantRequest{Ttl: 10})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Put(ctx, &pb.PutRequest{Key: []byte("/l"), Value: []byte("x"), Lease: g.Id}); err != nil {
		t.Fatal(err)
	}
	if ttl, err := s.LeaseKeepAlive(ctx, g.Id); err != nil || ttl != 10 {
		t.Fatalf("keepalive: %d %v", ttl, err)
	}
	if err := s.Expire(g.Id); err != nil {
		t.Fatal(err)
	}
	if r, err := s.Range(ctx, &pb.RangeRequest{Key: []byte("/l")}); err != nil || len(r.Kvs) != 0 {
		t.Fatalf("key of an expired lease: %v %v", r, err)
	}
	if _, err := s.LeaseKeepAlive(ctx, g.Id); !errors.Is(err, fsm.ErrLeaseNotFound) {
		t.Fatalf("keepalive of an expired lease: %v, want ErrLeaseNotFound", err)
	}

	if _, err := s.SubmitJob(ctx, &pb.SubmitJobRequest{Spec: &pb.JobSpec{Name: "j",
		Model: &pb.ModelSpec{Name: "softmax"}, Dataset: &pb.DatasetSpec{Path: "/data/fmnist", Records: 1000},
		RecordsPerTask: 100, Passes: 2, BatchSize: 10, NumPservers: 1,
		Optimizer: &pb.OptimizerSpec{Name: "sgd", LearningRate: 0.1}}}); err != nil {
		t.Fatalf("submit: %v", err)
	}
	if js := s.Jobs(); len(js) != 1 || js[0].Name != "j" {
		t.Fatalf("jobs: %v", js)
	}
	if _, err := s.RecordJobEvent(ctx, &pb.JobEvent{Type: pb.JobEvent_CHECKPOINT_COMMITTED, Job: "j", Version: 3}); err != nil {
		t.Fatal(err)
	}
	if seq := s.JobQueue().EventSeq("j"); seq == 0 {
		t.Fatal("the job event was not recorded")
	}

	down := errors.New("down")
	s.Fail("Range", down)
	if _, err := s.Range(ctx, &pb.RangeRequest{Key: []byte("/a")}); !errors.Is(err, down) {
		t.Fatalf("range while failed: %v", err)
	}
	s.Fail("Range", nil)
	if r, err := s.Range(ctx, &pb.RangeRequest{Key: []byte("/a")}); err != nil || string(r.Kvs[0].Value) != "2" {
		t.Fatalf("range after reset: %v %v", r, err)
	}
}
