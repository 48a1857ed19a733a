package checkpoint_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"

	pb "github.com/raftps/raftps/api/raftpspb"
	"github.com/raftps/raftps/pserver/checkpoint"
	"github.com/raftps/raftps/schema"
)

// memMeta is the smallest Meta for the example: a map, Txn always applying
// its success ops (a real one is raftstore with etcd compare semantics).
type memMeta map[string][]byte

func (m memMeta) Txn(_ context.Context, t *pb.TxnRequest) (*pb.TxnResponse, error) {
	for _, op := range t.GetSuccess() {
		if p := op.GetRequestPut(); p != nil {
			m[string(p.GetKey())] = p.GetValue()
		}
	}
	return &pb.TxnResponse{Succeeded: true}, nil
}

func (m memMeta) Range(_ context.Context, r *pb.RangeRequest) (*pb.RangeResponse, error) {
	resp := &pb.RangeResponse{}
	for k, v := range m {
		if k == string(r.GetKey()) || (len(r.GetRangeEnd()) > 0 && k >= string(r.GetKey()) && k < string(r.GetRangeEnd())) {
			resp.Kvs = append(resp.Kvs, &pb.KeyValue{Key: []byte(k), Value: v, CreateRevision: 1, ModRevision: 1})
		}
	}
	return resp, nil
}

// A pserver checkpoints its slot and a restarted one restores it.
func Example() {
	dir, _ := os.MkdirTemp("", "ckpt")
	defer os.RemoveAll(dir)
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	st, _ := checkpoint.Open(dir, logger)
	defer st.Close()
	meta := memMeta{schema.SlotKey("mnist", 0): []byte(`{"node":"n1","incarnation":7}`)}
	mgr, _ := checkpoint.New(checkpoint.Config{NodeID: "n1", Store: st, Meta: meta, Logger: logger})

	ptr, err := mgr.Writer("mnist", 0).Checkpoint(context.Background(), checkpoint.WriteRequest{
		Job: "mnist", Slot: 0, NumPservers: 1, Version: 100, Step: 100, Incarnation: 7,
		Blobs:  map[int32][]byte{0: []byte("vshard 0 bytes"), 1: []byte("vshard 1 bytes")},
		Policy: &pb.CheckpointPolicy{KeepMax: 3, Replicas: 1},
	})
	fmt.Println(ptr.GetVersion(), ptr.GetReplicas(), ptr.GetBytes(), err)

	blobs, rec, err := mgr.Restore(context.Background(), checkpoint.RestoreRequest{Job: "mnist", Slot: 0, NumPservers: 1})
	fmt.Println(string(blobs[1]), rec.GetVersion(), rec.GetReason(), rec.GetMd5() == ptr.GetMd5(), err)
	// Output:
	// 100 [n1] 28 <nil>
	// vshard 1 bytes 100 newest true <nil>
}
