package checkpoint

import (
	"context"
	"encoding/binary"
	"flag"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"google.golang.org/grpc"

	pb "github.com/raftps/raftps/api/raftpspb"
	"github.com/raftps/raftps/schema"
)

// Sizes of the benchmarks: 100M float32 parameters (400 MB) in 64 vshards by
// default. Smaller: go test -bench . -ckpt.params 1000000
var (
	benchParams     = flag.Int64("ckpt.params", 100_000_000, "float32 parameters checkpointed by the benchmarks")
	benchVShards    = flag.Int("ckpt.vshards", 64, "vshards the benchmark parameters are split into")
	benchRestorePar = flag.Int("ckpt.restorepar", 0, "RestoreParallelism for BenchmarkRestoreLocal (0: default)")
	benchQuiesce    = flag.Bool("ckpt.quiesce", true, "wait (untimed) for Pebble compactions to finish between checkpoints, as between real checkpoints minutes apart")
)

// quiesce waits, with the timer stopped, until st has no compaction or
// flush running: back-to-back checkpoints otherwise measure the previous
// one's background compaction too.
func quiesce(b *testing.B, st *Store) {
	b.Helper()
	if !*benchQuiesce {
		return
	}
	b.StopTimer()
	defer b.StartTimer()
	db, err := st.getDB()
	if err != nil {
		b.Fatal(err)
	}
	for i := 0; i < 600; i++ {
		m := db.Metrics()
		if m.Compact.NumInProgress == 0 && m.Flush.NumInProgress == 0 {
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func benchBlobs(b *testing.B) (map[int32][]byte, int64) {
	b.Helper()
	total := *benchParams * 4
	per := total / int64(*benchVShards)
	blobs := make(map[int32][]byte, *benchVShards)
	for v := 0; v < *benchVShards; v++ {
		buf := make([]byte, per)
		r := rand.New(rand.NewPCG(uint64(v), 1))
		for i := 0; i+8 <= len(buf); i += 8 {
			binary.LittleEndian.PutUint64(buf[i:], r.Uint64())
		}
		blobs[int32(v)] = buf
	}
	return blobs, per * int64(*benchVShards)
}

// stamp makes every blob differ from the previous iteration's (content
// addressing would otherwise skip the write).
func stamp(blobs map[int32][]byte, it int) {
	for _, buf := range blobs {
		binary.LittleEndian.PutUint64(buf, uint64(it)+1)
	}
}

var benchVerbose = flag.Bool("ckpt.v", false, "log checkpoint stage timings to stderr")

func quietLogger() *slog.Logger {
	if *benchVerbose {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return slog.New(slog.NewTextHandler(io.Discard, nil))
}

type benchEnv struct {
	meta testMeta
	st   *Store
	mgr  *Manager
	dir  string
}

func newBenchEnv(b *testing.B) *benchEnv {
	b.Helper()
	dir := b.TempDir()
	st, err := Open(filepath.Join(dir, "ckpt"), quietLogger())
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { st.Close() })
	meta := newTestMeta()
	meta.put(schema.SlotKey("bench", 0), []byte(`{"node":"n0","incarnation":1}`))
	mgr, err := New(Config{NodeID: "n0", Store: st, Meta: meta, Logger: quietLogger()})
	if err != nil {
		b.Fatal(err)
	}
	return &benchEnv{meta: meta, st: st, mgr: mgr, dir: dir}
}

func (e *benchEnv) checkpoint(b *testing.B, blobs map[int32][]byte, version int64) {
	b.Helper()
	_, err := e.mgr.Writer("bench", 0).Checkpoint(context.Background(), WriteRequest{
		Job: "bench", Slot: 0, NumPservers: 1, Version: version, Step: version, Incarnation: 1, Blobs: blobs,
		Policy: &pb.CheckpointPolicy{KeepMax: 1, Replicas: 1}})
	if err != nil {
		b.Fatal(err)
	}
}

// plainWrite writes every blob sequentially to one file and fsyncs it: the
// floor any durable checkpoint pays.
func plainWrite(b *testing.B, dir string, blobs map[int32][]byte) {
	b.Helper()
	path := filepath.Join(dir, "plain.bin")
	f, err := os.Create(path)
	if err != nil {
		b.Fatal(err)
	}
	for v := 0; v < len(blobs); v++ {
		if _, err := f.Write(blobs[int32(v)]); err != nil {
			b.Fatal(err)
		}
	}
	if err := f.Sync(); err != nil {
		b.Fatal(err)
	}
	f.Close()
	os.Remove(path)
}

// BenchmarkCheckpointLocal: Checkpoint (R=1, keep_max=1) of the benchmark
// parameters; MB/s from SetBytes.
func BenchmarkCheckpointLocal(b *testing.B) {
	blobs, total := benchBlobs(b)
	e := newBenchEnv(b)
	b.SetBytes(total)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		quiesce(b, e.st)
		stamp(blobs, i)
		e.checkpoint(b, blobs, int64(i+1))
	}
}

// BenchmarkPlainFileFsync: sequential write + fsync of the same bytes.
func BenchmarkPlainFileFsync(b *testing.B) {
	blobs, total := benchBlobs(b)
	dir := b.TempDir()
	b.SetBytes(total)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		stamp(blobs, i)
		plainWrite(b, dir, blobs)
	}
}

// BenchmarkCheckpointVsFile runs both, interleaved, in the same directory in
// the same run and reports ckpt_MB/s, file_MB/s and ckpt/file ratio.
func BenchmarkCheckpointVsFile(b *testing.B) {
	blobs, total := benchBlobs(b)
	e := newBenchEnv(b)
	var ckpt, file time.Duration
	b.SetBytes(2 * total)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		quiesce(b, e.st)
		stamp(blobs, i)
		t0 := time.Now()
		e.checkpoint(b, blobs, int64(i+1))
		t1 := time.Now()
		plainWrite(b, e.dir, blobs)
		ckpt += t1.Sub(t0)
		file += time.Since(t1)
	}
	mb := float64(total) * float64(b.N) / 1e6
	b.ReportMetric(mb/ckpt.Seconds(), "ckpt_MB/s")
	b.ReportMetric(mb/file.Seconds(), "file_MB/s")
	b.ReportMetric(file.Seconds()/ckpt.Seconds(), "ckpt/file")
}

// BenchmarkRestoreLocal: Restore of the whole checkpoint from the local
// store (MD5 verified); MB/s from SetBytes.
func BenchmarkRestoreLocal(b *testing.B) {
	blobs, total := benchBlobs(b)
	e := newBenchEnv(b)
	e.checkpoint(b, blobs, 1)
	if *benchRestorePar > 0 {
		defer func(p int) { RestoreParallelism = p }(RestoreParallelism)
		RestoreParallelism = *benchRestorePar
	}
	b.SetBytes(total)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		got, rec, err := e.mgr.Restore(context.Background(), RestoreRequest{Job: "bench", Slot: 0, NumPservers: 1})
		if err != nil || len(got) != len(blobs) {
			b.Fatalf("restore: %v %v", rec, err)
		}
	}
}

// BenchmarkCheckpointR2: Checkpoint with R=2 to a second store served over
// loopback gRPC (same disk: both copies compete for it).
func BenchmarkCheckpointR2(b *testing.B) {
	blobs, total := benchBlobs(b)
	e := newBenchEnv(b)
	st2, err := Open(filepath.Join(b.TempDir(), "ckpt2"), quietLogger())
	if err != nil {
		b.Fatal(err)
	}
	defer st2.Close()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	srv := grpc.NewServer()
	pb.RegisterCheckpointStoreServer(srv, NewService(st2, quietLogger()))
	go srv.Serve(lis)
	defer srv.Stop()
	mgr, err := New(Config{NodeID: "n0", Host: "h0", Store: e.st, Meta: e.meta, Logger: quietLogger(),
		Peers: StaticPeers{{ID: "n1", Addr: lis.Addr().String(), Host: "h1"}}})
	if err != nil {
		b.Fatal(err)
	}
	b.SetBytes(total)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		quiesce(b, e.st)
		quiesce(b, st2)
		stamp(blobs, i)
		p, err := mgr.Writer("bench", 0).Checkpoint(context.Background(), WriteRequest{
			Job: "bench", Slot: 0, NumPservers: 1, Version: int64(i + 1), Incarnation: 1, Blobs: blobs,
			Policy: &pb.CheckpointPolicy{KeepMax: 1, Replicas: 2}})
		if err != nil || len(p.GetReplicas()) != 2 {
			b.Fatalf("checkpoint: %v %v", p, err)
		}
	}
}
