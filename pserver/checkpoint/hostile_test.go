package checkpoint

// Issue 19 (hostile bytes), the checkpoint items: each test names the item
// and what failed before the fix.

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"runtime"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"

	pb "github.com/raftps/raftps/api/raftpspb"
	"github.com/raftps/raftps/api/rpctypes"
	"github.com/raftps/raftps/schema"
)

// allocated returns the bytes allocated (by every goroutine of the test
// binary) while fn runs.
func allocated(fn func()) uint64 {
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	fn()
	runtime.ReadMemStats(&after)
	return after.TotalAlloc - before.TotalAlloc
}

// twoVersions writes versions 1 and 2 of every slot of job (p slots, keep
// everything) on the cluster's node 0, replicated to node 1 if there is one.
func twoVersions(t *testing.T, c *testCluster, job string, p int32) {
	t.Helper()
	pol := &pb.CheckpointPolicy{Replicas: int32(len(c.nodes))}
	for s := int32(0); s < p; s++ {
		c.claim(job, s, c.nodes[0], 1)
		w := c.nodes[0].mgr.Writer(job, s)
		for v := int64(1); v <= 2; v++ {
			mustCheckpoint(t, w, WriteRequest{Job: job, Slot: s, NumPservers: p, Version: v, Step: v, Incarnation: 1,
				Blobs: slotBlobs(v, s, p, 2*p, 64), Policy: pol})
		}
	}
}

// forgedManifest is a valid-looking manifest of (job, version, slot) that
// names no blob, with num_pservers n.
func forgedManifest(t *testing.T, job string, version int64, slot, n int32) []byte {
	t.Helper()
	raw, err := json.Marshal(Manifest{UUID: "forged", Job: job, Version: version, Slot: slot, NumPservers: n})
	if err != nil {
		t.Fatal(err)
	}
	return raw
}

// Item 1: an existing manifest is never replaced by different bytes, over
// PutBlob (a peer) or locally; the same bytes again are accepted.
func TestManifestNeverReplaced(t *testing.T) {
	c := mustCluster(t, 2)
	ctx := context.Background()
	twoVersions(t, c, "h", 1)
	key := ManifestKey("h", 1, 0)
	orig, err := c.nodes[1].store.GetManifest(key)
	if err != nil {
		t.Fatal(err)
	}
	forged := forgedManifest(t, "h", 1, 0, 1)
	err = c.cli.put(ctx, c.nodes[1].addr, &pb.BlobChunk{Manifest: forged, ManifestKey: key}, nil)
	if !errors.Is(err, ErrConflict) {
		t.Fatalf("PutBlob replacing a kept manifest: %v, want ErrConflict", err)
	}
	if err := c.nodes[0].store.PutManifestRaw(key, forged); !errors.Is(err, ErrConflict) {
		t.Fatalf("PutManifestRaw replacing a manifest: %v, want ErrConflict", err)
	}
	for i, nd := range c.nodes {
		if got, err := nd.store.GetManifest(key); err != nil || !bytes.Equal(got, orig) {
			t.Fatalf("node %d: manifest changed (%v)", i, err)
		}
	}
	if err := c.cli.put(ctx, c.nodes[1].addr, &pb.BlobChunk{Manifest: orig, ManifestKey: key}, nil); err != nil {
		t.Fatalf("the same manifest again: %v", err)
	}
}

// Item 1: kept versions' manifests are checked against the pointer like
// the current one (kept_md5s), and a manifest claiming more slots than
// there are pointers is not looped over. Before: ReadVersion of a kept
// version whose manifest said num_pservers 2^31-1 looped (and allocated)
// over every one of those slots.
func TestForgedKeptManifestBounded(t *testing.T) {
	c := mustCluster(t, 1)
	nd := c.nodes[0]
	twoVersions(t, c, "h", 2)
	p := mustPointer(t, c.meta, "h", 0)
	if len(p.GetKeptMd5S()) != 1 || p.GetKeptMd5S()[0] == "" {
		t.Fatalf("pointer %v: want the md5 of kept version 1", p)
	}
	// A forged manifest of kept version 1, slot 0, at rest with a matching
	// stored sum (as a replaced manifest was before).
	key := ManifestKey("h", 1, 0)
	forged := forgedManifest(t, "h", 1, 0, math.MaxInt32)
	if err := nd.store.setRaw(key, forged); err != nil {
		t.Fatal(err)
	}
	if err := nd.store.setRaw(manifestSumKey(key), []byte(MD5Hex(forged))); err != nil {
		t.Fatal(err)
	}
	var err error
	n := allocated(func() {
		done := make(chan struct{})
		go func() {
			defer close(done)
			_, err = nd.mgr.ReadVersion(context.Background(), "h", 1)
		}()
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			t.Fatal("ReadVersion of a forged kept manifest did not return in 30 s")
		}
	})
	if err == nil {
		t.Fatal("ReadVersion accepted a forged manifest")
	}
	if n > 16<<20 {
		t.Fatalf("ReadVersion of a forged kept manifest allocated %d bytes", n)
	}
	// The same forgery with a plausible slot count, and a pointer written
	// before kept_md5s existed: the manifest is caught by its slot count.
	forged = forgedManifest(t, "h", 1, 0, 60000)
	if err := nd.store.setRaw(key, forged); err != nil {
		t.Fatal(err)
	}
	if err := nd.store.setRaw(manifestSumKey(key), []byte(MD5Hex(forged))); err != nil {
		t.Fatal(err)
	}
	for s := int32(0); s < 2; s++ {
		old := mustPointer(t, c.meta, "h", s)
		old.KeptMd5S = nil
		b, _ := EncodePointer(old)
		c.meta.put(schema.CheckpointKey("h", s), b)
	}
	if _, err := nd.mgr.ReadVersion(context.Background(), "h", 1); err == nil || !strings.Contains(err.Error(), "pointers exist") {
		t.Fatalf("ReadVersion of a 60000-slot manifest with 2 pointers: %v", err)
	}
}

// evilStore is a CheckpointStore peer that serves real manifests and
// hostile GetBlob streams.
type evilStore struct {
	pb.UnimplementedCheckpointStoreServer
	manifests map[string][]byte
	getBlob   func(req *pb.GetBlobRequest, send func(*pb.BlobChunk) error) error
}

func (e *evilStore) GetManifest(_ context.Context, req *pb.GetManifestRequest) (*pb.GetManifestResponse, error) {
	raw, ok := e.manifests[req.GetKey()]
	if !ok {
		return nil, rpctypes.ToStatus(fmt.Errorf("%w: %s", ErrNotFound, req.GetKey()))
	}
	return &pb.GetManifestResponse{Manifest: raw}, nil
}

func (e *evilStore) GetBlob(req *pb.GetBlobRequest, stream grpc.ServerStreamingServer[pb.BlobChunk]) error {
	return e.getBlob(req, stream.Send)
}

func serveEvil(t *testing.T, e *evilStore) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	pb.RegisterCheckpointStoreServer(srv, e)
	go srv.Serve(lis)
	t.Cleanup(srv.Stop)
	return lis.Addr().String()
}

// restoreFromEvil writes a checkpoint on a real node, then restores it on
// a node with an empty store whose only peer is evil (serving the real
// manifest and getBlob's streams).
func restoreFromEvil(t *testing.T, getBlob func(*pb.GetBlobRequest, func(*pb.BlobChunk) error) error) (map[int32][]byte, *pb.RestoreRecord, error) {
	t.Helper()
	c := mustCluster(t, 1)
	twoVersions(t, c, "h", 1)
	raw, err := c.nodes[0].store.GetManifest(ManifestKey("h", 2, 0))
	if err != nil {
		t.Fatal(err)
	}
	addr := serveEvil(t, &evilStore{manifests: map[string][]byte{ManifestKey("h", 2, 0): raw}, getBlob: getBlob})
	st, err := Open(t.TempDir(), testLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	mgr, err := New(Config{NodeID: "fresh", Store: st, Meta: c.meta, Peers: StaticPeers{{ID: "evil", Addr: addr}}, Client: c.cli, Logger: testLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	return mgr.Restore(context.Background(), RestoreRequest{Job: "h", Slot: 0, NumPservers: 1})
}

// Item 2: a GetBlob chunk announcing a negative size. Before, the
// restoring node's fetch worker panicked (make with a negative cap) outside
// Restore's recover, killing the process.
func TestGetBlobNegativeSize(t *testing.T) {
	blobs, rec, err := restoreFromEvil(t, func(req *pb.GetBlobRequest, send func(*pb.BlobChunk) error) error {
		return send(&pb.BlobChunk{Md5: req.GetMd5(), Size: -1, Data: []byte("x")})
	})
	if err != nil || blobs != nil || !strings.HasPrefix(rec.GetReason(), "initializer") {
		t.Fatalf("restore from a peer sending size -1: blobs %d, reason %q, err %v", len(blobs), rec.GetReason(), err)
	}
}

// Item 2: a peer streaming far more than the blob's size. Before, the
// client appended every chunk (256 MiB here for a 64-byte blob) before
// checking the MD5.
func TestGetBlobEndlessChunks(t *testing.T) {
	chunk := make([]byte, ChunkSize)
	var blobs map[int32][]byte
	var rec *pb.RestoreRecord
	var err error
	n := allocated(func() {
		blobs, rec, err = restoreFromEvil(t, func(req *pb.GetBlobRequest, send func(*pb.BlobChunk) error) error {
			if err := send(&pb.BlobChunk{Md5: req.GetMd5(), Size: 64, Data: chunk}); err != nil {
				return err
			}
			for range 255 {
				if err := send(&pb.BlobChunk{Data: chunk}); err != nil {
					return err
				}
			}
			return nil
		})
	})
	if err != nil || blobs != nil || !strings.HasPrefix(rec.GetReason(), "initializer") {
		t.Fatalf("restore from a peer sending 256 MiB for 64 bytes: blobs %d, reason %q, err %v", len(blobs), rec.GetReason(), err)
	}
	if n > 96<<20 {
		t.Fatalf("restore from a peer sending 256 MiB for a 64-byte blob allocated %d MiB", n>>20)
	}
}

// Item 2: the client side of GetBlob on its own: sizes other than the
// manifest's, negative sizes, more or fewer bytes, wrong MD5; what it
// allocates is bounded by the size the manifest promised.
func TestRecvGetBlobBounds(t *testing.T) {
	data := fakeBlob(1, 0, 3*ChunkSize/2)
	h := MD5Hex(data)
	stream := func(chunks ...*pb.BlobChunk) func() (*pb.BlobChunk, error) {
		return func() (*pb.BlobChunk, error) {
			if len(chunks) == 0 {
				return nil, io.EOF
			}
			c := chunks[0]
			chunks = chunks[1:]
			return c, nil
		}
	}
	size := int64(len(data))
	ok := stream(&pb.BlobChunk{Md5: h, Size: size, Data: data[:ChunkSize]}, &pb.BlobChunk{Data: data[ChunkSize:]})
	if got, err := recvGetBlob(ok, h, size); err != nil || !bytes.Equal(got, data) {
		t.Fatalf("intact stream: %v", err)
	}
	for name, tc := range map[string]struct {
		recv func() (*pb.BlobChunk, error)
		size int64
	}{
		"negative":     {stream(&pb.BlobChunk{Md5: h, Size: -1}), -1},
		"other size":   {stream(&pb.BlobChunk{Md5: h, Size: 1 << 40}), size},
		"more bytes":   {stream(&pb.BlobChunk{Md5: h, Size: size, Data: data}, &pb.BlobChunk{Data: []byte{1}}), size},
		"fewer bytes":  {stream(&pb.BlobChunk{Md5: h, Size: size, Data: data[:10]}), size},
		"wrong md5":    {stream(&pb.BlobChunk{Md5: h, Size: 3, Data: []byte("abc")}), 3},
		"empty stream": {stream(), size},
	} {
		if _, err := recvGetBlob(tc.recv, h, tc.size); !errors.Is(err, ErrCorrupt) {
			t.Errorf("%s: %v, want ErrCorrupt", name, err)
		}
	}
	// Announced and promised 1 GiB, 1 byte sent: allocation follows the data.
	n := allocated(func() {
		_, err := recvGetBlob(stream(&pb.BlobChunk{Md5: h, Size: 1 << 30, Data: []byte{1}}), h, 1<<30)
		if !errors.Is(err, ErrCorrupt) {
			t.Errorf("1 of 1 GiB: %v", err)
		}
	})
	if n > 1<<20 {
		t.Fatalf("a 1-byte stream announcing 1 GiB allocated %d bytes", n)
	}
}

// Item 7: deletes are no longer tunnelled through PutBlob. Before, a
// one-line "delete/<job>/<slot>" request with keep [MaxInt64] erased every
// stored version of the slot.
func TestDeleteTunnelRefused(t *testing.T) {
	c := mustCluster(t, 2)
	twoVersions(t, c, "h", 1)
	body := []byte(fmt.Sprintf(`{"keep":[%d]}`, int64(math.MaxInt64)))
	err := c.cli.put(context.Background(), c.nodes[1].addr, &pb.BlobChunk{Manifest: body, ManifestKey: "delete/h/0"}, nil)
	if err == nil {
		t.Fatal("a delete tunnelled through PutBlob was accepted")
	}
	keys, err := c.nodes[1].store.ManifestKeys("h")
	if err != nil || len(keys) != 2 {
		t.Fatalf("manifests after the refused delete: %v %v", keys, err)
	}
}

// Item 7: DeleteVersions deletes only versions the node holds that the
// committed pointer neither names nor is older than; without a pointer
// (or Meta) nothing is deleted.
func TestDeleteVersionsChecked(t *testing.T) {
	c := mustCluster(t, 2)
	ctx := context.Background()
	pol := &pb.CheckpointPolicy{Replicas: 2}
	c.claim("h", 0, c.nodes[0], 1)
	w := c.nodes[0].mgr.Writer("h", 0)
	for v := int64(1); v <= 4; v++ {
		mustCheckpoint(t, w, WriteRequest{Job: "h", Slot: 0, NumPservers: 1, Version: v, Step: v, Incarnation: 1,
			Blobs: slotBlobs(v, 0, 1, 2, 64), Policy: pol})
	}
	// The pointer: version 3, keeping 2 (as after keep_max 2); version 4
	// is on disk but not committed (in flight).
	p := mustPointer(t, c.meta, "h", 0)
	p.Version, p.KeptVersions, p.KeptMd5S = 3, []int64{2}, nil
	b, _ := EncodePointer(p)
	c.meta.put(schema.CheckpointKey("h", 0), b)
	addr := c.nodes[1].addr
	got, err := c.cli.DeleteVersions(ctx, addr, "h", 0, []int64{1, 2, 3, 4, 99, math.MaxInt64, -1})
	if err != nil || len(got) != 1 || got[0] != 1 {
		t.Fatalf("DeleteVersions: deleted %v, err %v; want [1]", got, err)
	}
	for v := int64(2); v <= 4; v++ {
		if _, err := c.nodes[1].store.GetManifest(ManifestKey("h", v, 0)); err != nil {
			t.Fatalf("version %d deleted: %v", v, err)
		}
	}
	if _, err := c.cli.DeleteVersions(ctx, addr, "other", 0, []int64{1}); !errors.Is(err, ErrNoPointer) {
		t.Fatalf("delete without a pointer: %v, want ErrNoPointer", err)
	}
	for name, req := range map[string]*pb.DeleteVersionsRequest{
		"bad job":       {Job: "a/b", Slot: 0, Versions: []int64{1}},
		"negative slot": {Job: "h", Slot: -1, Versions: []int64{1}},
		"no versions":   {Job: "h", Slot: 0},
		"too many":      {Job: "h", Slot: 0, Versions: make([]int64, MaxDeleteVersions+1)},
	} {
		if _, err := c.cli.DeleteVersions(ctx, addr, req.Job, req.Slot, req.Versions); !errors.Is(err, ErrInvalid) {
			t.Errorf("%s: %v, want ErrInvalid", name, err)
		}
	}
	// A service without Meta cannot check, and refuses.
	svc := NewService(c.nodes[1].store, testLogger(t))
	if _, err := svc.DeleteVersions(ctx, &pb.DeleteVersionsRequest{Job: "h", Slot: 0, Versions: []int64{2}}); !errors.Is(rpctypes.FromStatus(err), ErrNoPointer) {
		t.Fatalf("delete on a service without Meta: %v", err)
	}
}

// Item 9: PutBlob grows its buffer with the data. Before, a first chunk
// announcing 4 GiB allocated 4 GiB before any data arrived.
func TestPutBlobAllocatesWithData(t *testing.T) {
	c := mustCluster(t, 1)
	stub, err := c.cli.stub(c.nodes[0].addr)
	if err != nil {
		t.Fatal(err)
	}
	n := allocated(func() {
		stream, err := stub.PutBlob(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		if err := stream.Send(&pb.BlobChunk{Md5: MD5Hex(nil), Size: MaxBlobSize, Data: make([]byte, 50)}); err != nil {
			t.Fatal(err)
		}
		if _, err := stream.CloseAndRecv(); !errors.Is(rpctypes.FromStatus(err), ErrCorrupt) {
			t.Fatalf("50 of 4 GiB announced: %v, want ErrCorrupt", err)
		}
	})
	if n > 16<<20 {
		t.Fatalf("a 50-byte PutBlob announcing 4 GiB allocated %d MiB", n>>20)
	}
}

// Item 9: one peer may hold at most MaxStreamsPerPeer PutBlob streams open.
func TestPutBlobStreamsPerPeer(t *testing.T) {
	c := mustCluster(t, 1)
	stub, err := c.cli.stub(c.nodes[0].addr)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	data := []byte("held open")
	var open []pb.CheckpointStore_PutBlobClient
	for range MaxStreamsPerPeer {
		s, err := stub.PutBlob(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if err := s.Send(&pb.BlobChunk{Md5: MD5Hex(data), Size: int64(len(data)), Data: data[:1]}); err != nil {
			t.Fatal(err)
		}
		open = append(open, s)
	}
	// The server counts a stream when its handler starts: wait until all
	// are counted.
	svc := c.nodes[0].srvSvc
	deadline := time.Now().Add(30 * time.Second)
	for svc.openStreams() < MaxStreamsPerPeer {
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d streams counted", svc.openStreams(), MaxStreamsPerPeer)
		}
		time.Sleep(5 * time.Millisecond)
	}
	extra, err := stub.PutBlob(ctx)
	if err != nil {
		t.Fatal(err)
	}
	_ = extra.Send(&pb.BlobChunk{Md5: MD5Hex(data), Size: int64(len(data)), Data: data})
	if _, err := extra.CloseAndRecv(); !errors.Is(rpctypes.FromStatus(err), ErrBusy) {
		t.Fatalf("stream %d of one peer: %v, want ErrBusy", MaxStreamsPerPeer+1, err)
	}
	for _, s := range open {
		if err := s.Send(&pb.BlobChunk{Data: data[1:]}); err != nil {
			t.Fatal(err)
		}
		if _, err := s.CloseAndRecv(); err != nil {
			t.Fatal(err)
		}
	}
	if err := c.cli.PutBlob(context.Background(), c.nodes[0].addr, MD5Hex(data), data); err != nil {
		t.Fatalf("a stream after the others closed: %v", err)
	}
}

// Item 10: export of crafted blocks. Before: an offset of MaxInt64
// overflowed the bounds check and panicked; shape [2^34] allocated 64 GiB;
// a shape [2^24] allocated its 64 MiB whatever the blocks held.
func TestWriteExportHostileBlocks(t *testing.T) {
	export := func(blocks ...Block) (out int64, err error) {
		defer func() {
			if r := recover(); r != nil {
				err = fmt.Errorf("panicked: %v", r)
			}
		}()
		dec := DecoderFunc(func([]byte) ([]Block, error) { return blocks, nil })
		cw := &countWriter{}
		err = WriteExport(cw, ExportHeader{Job: "h", Version: 1}, map[int32][]byte{0: nil}, dec)
		return cw.n, err
	}
	for name, b := range map[string]Block{
		"offset MaxInt64":   {Name: "p", Shape: []int64{4}, Offset: math.MaxInt64, Data: []float32{1}},
		"offset negative":   {Name: "p", Shape: []int64{4}, Offset: -1, Data: []float32{1}},
		"past the end":      {Name: "p", Shape: []int64{4}, Offset: 3, Data: []float32{1, 2}},
		"shape 2^34":        {Name: "p", Shape: []int64{1 << 34}, Data: []float32{1}},
		"shape overflow":    {Name: "p", Shape: []int64{3, 1 << 62}, Data: []float32{1}},
		"shape wraps to 0":  {Name: "p", Shape: []int64{1 << 32, 1 << 32}, Data: []float32{1}},
		"negative dim":      {Name: "p", Shape: []int64{-2, -2}, Data: []float32{1}},
		"rank 0, 2 values":  {Name: "p", Shape: nil, Data: []float32{1, 2}},
		"embedding rank 0?": {Name: "e", Shape: []int64{}, Offset: 1, Data: []float32{1}},
	} {
		if _, err := export(b); !errors.Is(err, ErrCorrupt) {
			t.Errorf("%s: %v, want ErrCorrupt", name, err)
		}
	}
	if _, err := export(Block{Name: "p", Shape: []int64{8}, Data: []float32{1, 2}}, Block{Name: "p", Shape: []int64{8}, Offset: 1, Data: []float32{3}}); !errors.Is(err, ErrCorrupt) {
		t.Errorf("overlapping blocks: %v, want ErrCorrupt", err)
	}
	// A decoder that indexes a rank-0 embedding's last dimension (as
	// cmd/raftps's did) panics: the export fails, the process does not.
	rank0 := DecoderFunc(func([]byte) ([]Block, error) {
		var shape []int64
		return []Block{{Name: "e", Shape: shape, Offset: 3 * shape[len(shape)-1]}}, nil
	})
	if err := WriteExport(io.Discard, ExportHeader{Job: "h", Version: 1}, map[int32][]byte{0: nil}, rank0); !errors.Is(err, ErrCorrupt) {
		t.Errorf("a decoder panicking on a rank-0 embedding: %v, want ErrCorrupt", err)
	}
	// A rank-0 parameter is one value.
	if n, err := export(Block{Name: "s", Data: []float32{7}}); err != nil || n <= 4 {
		t.Errorf("rank 0: %d bytes, %v", n, err)
	}
	// Shape [2^24], one 4-value block: 64 MiB written, not allocated.
	var n int64
	var err error
	alloc := allocated(func() {
		n, err = export(Block{Name: "p", Shape: []int64{1 << 24}, Offset: 1 << 20, Data: []float32{1, 2, 3, 4}})
	})
	if err != nil {
		t.Fatal(err)
	}
	if n < 4<<24 {
		t.Fatalf("exported %d bytes, want at least %d", n, 4<<24)
	}
	if alloc > 4<<20 {
		t.Fatalf("exporting a 64 MiB parameter from one 4-value block allocated %d MiB", alloc>>20)
	}
}

// openStreams is the number of PutBlob streams the service counts.
func (s *Service) openStreams() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for _, k := range s.streams {
		n += k
	}
	return n
}

type countWriter struct{ n int64 }

func (w *countWriter) Write(p []byte) (int, error) { w.n += int64(len(p)); return len(p), nil }

// Item 12: a manifest whose vshard sizes overflow int64 to the negative
// total it claims. Before, it passed validation.
func TestManifestSizeSumOverflow(t *testing.T) {
	h := MD5Hex(nil)
	raw := fmt.Sprintf(`{"uuid":"u","job":"h","version":1,"slot":0,"num_pservers":1,"step":1,"timestamp_unix_nano":1,`+
		`"vshards":[{"id":0,"md5":%q,"bytes":%d},{"id":1,"md5":%q,"bytes":%d}],"bytes":-2}`, h, int64(math.MaxInt64), h, int64(math.MaxInt64))
	if _, err := DecodeManifest([]byte(raw)); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("overflowing sizes: %v, want ErrCorrupt", err)
	}
	for name, m := range map[string]Manifest{
		"2^31-1 pservers": {UUID: "u", Job: "h", Version: 1, Slot: 0, NumPservers: math.MaxInt32},
		"blob over max":   {UUID: "u", Job: "h", Version: 1, Slot: 0, NumPservers: 1, VShards: []VShardRef{{ID: 0, MD5: h, Bytes: MaxBlobSize + 1}}, Bytes: MaxBlobSize + 1},
	} {
		raw, _ := json.Marshal(m)
		if _, err := DecodeManifest(raw); !errors.Is(err, ErrCorrupt) {
			t.Errorf("%s: %v, want ErrCorrupt", name, err)
		}
	}
}

// An export file's preamble announcing a 1 GiB header, followed by 10
// bytes: the reader allocates as the header arrives. Before, it allocated
// the announced size at once.
func TestReadExportHeaderAllocatesWithData(t *testing.T) {
	pre := []byte(ExportMagic)
	pre = binary.LittleEndian.AppendUint32(pre, ExportFormatVersion)
	pre = binary.LittleEndian.AppendUint32(pre, 1<<30-1)
	in := append(pre, []byte(`{"job":"x"`)...)
	var err error
	n := allocated(func() { _, err = ReadExportHeader(bytes.NewReader(in)) })
	if !errors.Is(err, ErrCorrupt) {
		t.Fatalf("truncated header: %v, want ErrCorrupt", err)
	}
	if n > 1<<20 {
		t.Fatalf("a 26-byte file announcing a 1 GiB header allocated %d MiB", n>>20)
	}
}

// A pointer (any client can write the metadata store) claiming 2^31-1
// slots: keep_max decisions, List and async restores do not size or loop
// anything by it.
func TestHostilePointerSlotCount(t *testing.T) {
	c := mustCluster(t, 1)
	nd := c.nodes[0]
	pol := &pb.CheckpointPolicy{KeepMax: 1, Replicas: 1}
	c.claim("h", 0, nd, 1)
	w := nd.mgr.Writer("h", 0)
	write := func(v int64) {
		mustCheckpoint(t, w, WriteRequest{Job: "h", Slot: 0, NumPservers: 1, Version: v, Step: v, Incarnation: 1,
			Blobs: slotBlobs(v, 0, 1, 2, 64), Policy: pol})
	}
	write(1)
	b, _ := EncodePointer(&pb.CheckpointPointer{Version: 1, NumPservers: math.MaxInt32, TimestampUnixNano: math.MaxInt64})
	c.meta.put(schema.CheckpointKey("h", 1), b)
	n := allocated(func() {
		write(2)
		if _, err := nd.mgr.List(context.Background(), "h", nil); err != nil {
			t.Error(err)
		}
		blobs, rec, err := nd.mgr.Restore(context.Background(), RestoreRequest{Job: "h", Slot: 0, NumPservers: 1, Async: true})
		if err != nil || blobs != nil || !strings.HasPrefix(rec.GetReason(), "initializer") {
			t.Errorf("async restore under a pointer claiming 2^31-1 slots: %d blobs, %q, %v", len(blobs), rec.GetReason(), err)
		}
	})
	if n > 64<<20 {
		t.Fatalf("a pointer claiming 2^31-1 slots cost %d MiB", n>>20)
	}
}
