package checkpoint

import (
	"context"
	"encoding/binary"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net"
	"os"
	"sync"
	"testing"

	"google.golang.org/grpc"

	pb "github.com/raftps/raftps/api/raftpspb"
	"github.com/raftps/raftps/internal/testing/testutil"
	"github.com/raftps/raftps/schema"
)

// testLogger logs to t.Log.
func testLogger(tb testing.TB) *slog.Logger { return testutil.LoggerLevel(tb, slog.LevelInfo) }

// testNode is one node: a Store in a temp dir served over gRPC on 127.0.0.1:0.
type testNode struct {
	id, host string
	dir      string
	store    *Store
	srv      *grpc.Server
	addr     string
	mgr      *Manager
	srvSvc   *Service
}

type testCluster struct {
	tb    testing.TB
	meta  testMeta
	mu    sync.Mutex
	nodes []*testNode
	cli   *Client
}

// Peers implements Peers over the cluster's current nodes.
func (c *testCluster) Peers() []Peer {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []Peer
	for _, n := range c.nodes {
		if n.srv != nil {
			out = append(out, Peer{ID: n.id, Addr: n.addr, Host: n.host})
		}
	}
	return out
}

func mustCluster(tb testing.TB, n int) *testCluster {
	tb.Helper()
	c := &testCluster{tb: tb, meta: newTestMeta(), cli: NewClient()}
	tb.Cleanup(func() { c.cli.Close() })
	for i := 0; i < n; i++ {
		nd := &testNode{id: fmt.Sprintf("n%d", i), host: fmt.Sprintf("h%d", i), dir: tb.TempDir()}
		c.nodes = append(c.nodes, nd)
		c.start(nd)
	}
	return c
}

func (c *testCluster) start(nd *testNode) {
	tb := c.tb
	tb.Helper()
	st, err := Open(nd.dir, testLogger(tb))
	if err != nil {
		tb.Fatal(err)
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	srv := grpc.NewServer()
	svc := NewService(st, testLogger(tb)).WithMeta(c.meta)
	pb.RegisterCheckpointStoreServer(srv, svc)
	go srv.Serve(lis)
	mgr, err := New(Config{NodeID: nd.id, Host: nd.host, Store: st, Meta: c.meta, Peers: c, Client: c.cli, Logger: testLogger(tb)})
	if err != nil {
		tb.Fatal(err)
	}
	c.mu.Lock()
	nd.store, nd.srv, nd.addr, nd.mgr, nd.srvSvc = st, srv, lis.Addr().String(), mgr, svc
	c.mu.Unlock()
	tb.Cleanup(func() { c.stop(nd) })
}

func (c *testCluster) stop(nd *testNode) {
	c.mu.Lock()
	srv, st := nd.srv, nd.store
	nd.srv = nil
	c.mu.Unlock()
	if srv != nil {
		srv.Stop()
	}
	if st != nil {
		st.Close()
	}
}

// restart closes and reopens nd's store from disk (a process crash+restart);
// wipe also deletes the data dir first (a lost disk).
func (c *testCluster) restart(nd *testNode, wipe bool) {
	c.tb.Helper()
	c.stop(nd)
	if wipe {
		if err := os.RemoveAll(nd.dir); err != nil {
			c.tb.Fatal(err)
		}
	}
	c.start(nd)
}

// claim (re)claims /jobs/<job>/ps/<slot> for incarnation inc held by nd: as
// after a lease expiry, the old key is deleted and a new one created (new
// create revision), the value written like pserver.PSValue.
func (c *testCluster) claim(job string, slot int32, nd *testNode, inc int64) {
	c.meta.del(schema.SlotKey(job, slot))
	v := fmt.Sprintf(`{"node":%q,"addr":%q,"incarnation":%d}`, nd.id, nd.addr, inc)
	c.meta.put(schema.SlotKey(job, slot), []byte(v))
}

// fakeBlob is a deterministic blob of vshard id at version: an 16-byte
// header (version, id) then pseudo-random bytes.
func fakeBlob(version int64, id int32, size int) []byte {
	b := make([]byte, size)
	binary.LittleEndian.PutUint64(b[0:], uint64(version))
	binary.LittleEndian.PutUint64(b[8:], uint64(id))
	r := rand.New(rand.NewPCG(uint64(version), uint64(id)))
	for i := 16; i < size; i++ {
		b[i] = byte(r.Uint32())
	}
	return b
}

func blobVersion(b []byte) (int64, int32) {
	return int64(binary.LittleEndian.Uint64(b[0:])), int32(binary.LittleEndian.Uint64(b[8:]))
}

// slotBlobs returns the fake blobs of slot of p over nv vshards.
func slotBlobs(version int64, slot, p, nv int32, size int) map[int32][]byte {
	out := map[int32][]byte{}
	for v := int32(0); v < nv; v++ {
		if v%p == slot {
			out[v] = fakeBlob(version, v, size)
		}
	}
	return out
}

func mustCheckpoint(tb testing.TB, w *Writer, req WriteRequest) *pb.CheckpointPointer {
	tb.Helper()
	p, err := w.Checkpoint(context.Background(), req)
	if err != nil {
		tb.Fatalf("checkpoint %s/%d v%d: %v", req.Job, req.Slot, req.Version, err)
	}
	return p
}

func mustPointer(tb testing.TB, meta Meta, job string, slot int32) *pb.CheckpointPointer {
	tb.Helper()
	resp, err := meta.Range(context.Background(), &pb.RangeRequest{Key: []byte(schema.CheckpointKey(job, slot))})
	if err != nil || len(resp.GetKvs()) == 0 {
		tb.Fatalf("pointer %s/%d: %v (kvs %d)", job, slot, err, len(resp.GetKvs()))
	}
	p, err := DecodePointer(resp.GetKvs()[0].GetValue())
	if err != nil {
		tb.Fatal(err)
	}
	return p
}

// checkWhole asserts that blobs are exactly the vshards want, all of one
// version, byte-identical to fakeBlob; it returns that version.
func checkWhole(tb testing.TB, blobs map[int32][]byte, want []int32, size int) int64 {
	tb.Helper()
	v, err := wholeVersion(blobs, want, size)
	if err != nil {
		tb.Fatal(err)
	}
	return v
}

func wholeVersion(blobs map[int32][]byte, want []int32, size int) (int64, error) {
	if len(blobs) != len(want) {
		return 0, fmt.Errorf("got %d vshards, want %d (%v)", len(blobs), len(want), want)
	}
	var ver int64 = -1
	for _, id := range want {
		b, ok := blobs[id]
		if !ok {
			return 0, fmt.Errorf("vshard %d missing", id)
		}
		v, gotID := blobVersion(b)
		if gotID != id {
			return 0, fmt.Errorf("vshard %d holds vshard %d's bytes", id, gotID)
		}
		if ver == -1 {
			ver = v
		} else if v != ver {
			return 0, fmt.Errorf("mixed versions: vshard %d is version %d, others %d", id, v, ver)
		}
		if string(b) != string(fakeBlob(v, id, size)) {
			return 0, fmt.Errorf("vshard %d version %d: bytes differ (torn)", id, v)
		}
	}
	return ver, nil
}

func vshardsOf(slot, p, nv int32) []int32 {
	var out []int32
	for v := int32(0); v < nv; v++ {
		if v%p == slot {
			out = append(out, v)
		}
	}
	return out
}
