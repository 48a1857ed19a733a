package jobq

import (
	"bytes"
	"errors"
	"math"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/raftps/raftps/api/errs"
	pb "github.com/raftps/raftps/api/raftpspb"
	"github.com/raftps/raftps/jobspec"
)

// roundTrip checks the invariant every accepted command must keep: the
// queue's snapshot restores, and the restored queue encodes to the same
// bytes and passes check.
func roundTrip(tb testing.TB, q *Queue) {
	tb.Helper()
	b := mustMarshal(tb, q)
	r := New()
	if err := r.UnmarshalBinary(b); err != nil {
		tb.Fatalf("snapshot of an accepted state does not restore: %v", err)
	}
	if err := r.check(); err != nil {
		tb.Fatalf("restored queue: %v", err)
	}
	if b2 := mustMarshal(tb, r); !bytes.Equal(b, b2) {
		tb.Fatalf("restored queue encodes to %d bytes, original %d: not identical", len(b2), len(b))
	}
}

// TestSubmitExtremeSpecs is issue 12 item 2 and issue 19 item 3: specs at
// and past every bound. Each is either refused with ErrInvalid naming the
// field, or accepted with a job whose snapshot restores identically. Before
// the fix, records = records_per_task = MaxInt64 was accepted as a RUNNING
// job with 0 tasks whose snapshot no node could restore, and shapes such as
// [1<<40] or [3, 1<<62] and num_virtual_shards 2^30 were accepted.
func TestSubmitExtremeSpecs(t *testing.T) {
	for _, tc := range []struct {
		name  string
		field string // "" = must be accepted
		edit  func(s *pb.JobSpec)
	}{
		{"maxint records and records_per_task", "dataset.records", func(s *pb.JobSpec) {
			s.Dataset.Records, s.RecordsPerTask = math.MaxInt64, math.MaxInt64
		}},
		{"records_per_task maxint", "records_per_task", func(s *pb.JobSpec) { s.RecordsPerTask = math.MaxInt64 }},
		{"records maxint", "dataset.records", func(s *pb.JobSpec) { s.Dataset.Records = math.MaxInt64 }},
		{"records and rpt near overflow", "dataset.records", func(s *pb.JobSpec) {
			s.Dataset.Records, s.RecordsPerTask = math.MaxInt64/2+1, math.MaxInt64/2+1
		}},
		{"one task of 2^50 records", "", func(s *pb.JobSpec) { s.Dataset.Records, s.RecordsPerTask = 1<<50, 1<<50 }},
		{"passes maxint32", "passes", func(s *pb.JobSpec) { s.Passes = math.MaxInt32 }},
		{"batch maxint32", "batch_size", func(s *pb.JobSpec) { s.BatchSize = math.MaxInt32 }},
		{"pservers maxint32", "num_pservers", func(s *pb.JobSpec) { s.NumPservers = math.MaxInt32; s.NumVirtualShards = math.MaxInt32 }},
		{"vshards 2^30", "num_virtual_shards", func(s *pb.JobSpec) { s.NumVirtualShards = 1 << 30 }},
		{"staleness maxint32", "staleness", func(s *pb.JobSpec) { s.Staleness = math.MaxInt32 }},
		{"keep_max maxint32", "checkpoint.keep_max", func(s *pb.JobSpec) { s.Checkpoint = &pb.CheckpointPolicy{KeepMax: math.MaxInt32} }},
		{"replicas maxint32", "checkpoint.replicas", func(s *pb.JobSpec) { s.Checkpoint = &pb.CheckpointPolicy{Replicas: math.MaxInt32} }},
		{"every_seconds maxint64", "checkpoint.every_seconds", func(s *pb.JobSpec) {
			s.Checkpoint = &pb.CheckpointPolicy{EverySeconds: math.MaxInt64}
		}},
		{"every_steps maxint64", "checkpoint.every_steps", func(s *pb.JobSpec) { s.Checkpoint = &pb.CheckpointPolicy{EverySteps: math.MaxInt64} }},
		{"timeout floor maxint64", "task_timeout_floor_ms", func(s *pb.JobSpec) { s.TaskTimeoutFloorMs = math.MaxInt64 }},
		{"max_steps maxint64", "max_steps", func(s *pb.JobSpec) { s.MaxSteps = math.MaxInt64 }},
		{"dense block maxint64", "dense_block_size", func(s *pb.JobSpec) { s.DenseBlockSize = math.MaxInt64 }},
		{"hidden 1e9", "model.hidden[0]", func(s *pb.JobSpec) { s.Model = &pb.ModelSpec{Name: "mlp", Hidden: []int32{1_000_000_000}} }},
		{"hash_buckets maxint64", "model.hash_buckets", func(s *pb.JobSpec) {
			s.Model = &pb.ModelSpec{Name: "hashed_lr", EmbeddingDim: 16, HashBuckets: math.MaxInt64}
		}},
		{"shape [1<<40]", "params", func(s *pb.JobSpec) { s.Params = []*pb.ParamSpec{{Name: "w", Shape: []int64{1 << 40}}} }},
		{"shape [3, 1<<62]", "params[0].shape", func(s *pb.JobSpec) { s.Params = []*pb.ParamSpec{{Name: "w", Shape: []int64{3, 1 << 62}}} }},
		{"shape with a negative dim", "params[0].shape", func(s *pb.JobSpec) { s.Params = []*pb.ParamSpec{{Name: "w", Shape: []int64{-1, -1}}} }},
		{"shape overflowing to zero", "params[0].shape", func(s *pb.JobSpec) {
			s.Params = []*pb.ParamSpec{{Name: "w", Shape: []int64{1 << 32, 1 << 32}}}
		}},
		{"nan learning rate", "optimizer.learning_rate", func(s *pb.JobSpec) { s.Optimizer.LearningRate = math.NaN() }},
		{"inf momentum", "optimizer.momentum", func(s *pb.JobSpec) { s.Optimizer.Momentum = math.Inf(1) }},
		{"nan target accuracy", "target_accuracy", func(s *pb.JobSpec) { s.TargetAccuracy = math.NaN() }},
		{"a small real model", "", func(s *pb.JobSpec) {
			s.Model = &pb.ModelSpec{Name: "mlp", Hidden: []int32{128}}
			s.Params = []*pb.ParamSpec{{Name: "w1", Shape: []int64{784, 128}}, {Name: "b1", Shape: []int64{128}}}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			q := New()
			s := testSpec("x", 100, 10)
			tc.edit(s)
			_, err := q.Submit(t0, &pb.SubmitJobRequest{Spec: s})
			if tc.field == "" {
				if err != nil {
					t.Fatalf("Submit: %v", err)
				}
				roundTrip(t, q)
				return
			}
			if !errors.Is(err, errs.ErrInvalid) {
				st, _ := q.Job("x")
				t.Fatalf("Submit = %v, want ErrInvalid naming %s (job: %v tasks)", err, tc.field, st.GetTotalTasks())
			}
			if !strings.Contains(err.Error(), tc.field) {
				t.Errorf("error %q does not name the field %s", err, tc.field)
			}
			if _, ok := q.Job("x"); ok {
				t.Error("a refused spec created a job")
			}
			roundTrip(t, q)
		})
	}
}

// TestExternalModelSpec: a model raftps does not implement is accepted
// with its parameter list; without one, or with a bad parameter, it is
// ErrInvalid naming the field and the parameter.
func TestExternalModelSpec(t *testing.T) {
	ok := testSpec("ext", 100, 10)
	ok.Model = &pb.ModelSpec{Name: jobspec.ModelExternal}
	ok.Params = []*pb.ParamSpec{
		{Name: "conv1.weight", Shape: []int64{8, 1, 3, 3}, Init: pb.Initializer_INIT_GLOROT},
		{Name: "conv1.bias", Shape: []int64{8}},
		{Name: "emb", Shape: []int64{100, 4}, Embedding: true, Init: pb.Initializer_INIT_NORMAL, Scale: 0.1},
	}
	if _, err := jobspec.ValidateSpec(ok); err != nil {
		t.Fatalf("external spec refused: %v", err)
	}
	none := proto.Clone(ok).(*pb.JobSpec)
	none.Params = nil
	if _, err := jobspec.ValidateSpec(none); !errors.Is(err, errs.ErrInvalid) || !strings.Contains(err.Error(), "params") {
		t.Errorf("external without params: %v, want ErrInvalid naming params", err)
	}
	for _, tc := range []struct {
		name, field string
		edit        func(p []*pb.ParamSpec)
	}{
		{"zero dim", "params[1].shape", func(p []*pb.ParamSpec) { p[1].Shape = []int64{0} }},
		{"embedding rank 3", "params[2].shape", func(p []*pb.ParamSpec) { p[2].Shape = []int64{1, 2, 3} }},
		{"negative scale", "params[0].scale", func(p []*pb.ParamSpec) { p[0].Scale = -1 }},
		{"unknown init", "params[1].init", func(p []*pb.ParamSpec) { p[1].Init = 99 }},
		{"duplicate", "params[1].name", func(p []*pb.ParamSpec) { p[1].Name = "conv1.weight" }},
	} {
		s := proto.Clone(ok).(*pb.JobSpec)
		tc.edit(s.Params)
		_, err := jobspec.ValidateSpec(s)
		if !errors.Is(err, errs.ErrInvalid) || !strings.Contains(err.Error(), tc.field) || !strings.Contains(err.Error(), `(param "`) {
			t.Errorf("%s: %v, want ErrInvalid naming %s and the param", tc.name, err, tc.field)
		}
	}
}
