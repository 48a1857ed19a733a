package pserver

import (
	"context"
	"encoding/binary"
	"errors"
	"hash/crc32"
	"reflect"
	"testing"

	pb "github.com/raftps/raftps/api/raftpspb"
	"github.com/raftps/raftps/pserver/vshard"
	"github.com/raftps/raftps/pserver/wire"
)

func restoreSpec() *pb.JobSpec {
	return &pb.JobSpec{Name: "r", Mode: pb.UpdateMode_UPDATE_MODE_ASYNC, Seed: 9, DenseBlockSize: 3, NumVirtualShards: 12,
		Optimizer: &pb.OptimizerSpec{Name: "adam", LearningRate: 0.01},
		Params: []*pb.ParamSpec{
			{Name: "w", Shape: []int64{5, 4}, Init: pb.Initializer_INIT_GLOROT},
			{Name: "b", Shape: []int64{4}},
			{Name: "emb", Shape: []int64{50, 2}, Embedding: true, Init: pb.Initializer_INIT_UNIFORM},
		}}
}

// trainSlots pushes a few dense and sparse gradients to every slot.
func trainSlots(tb testing.TB, slots []*Slot, steps int, seed int) {
	tb.Helper()
	l := slots[0].Layout()
	emb, _ := l.Param("emb")
	for k := range steps {
		g := map[string][]float32{"w": make([]float32, 20), "b": make([]float32, 4)}
		for i := range g["w"] {
			g["w"][i] = float32((i*7+k*3+seed)%11) - 5
		}
		for i := range g["b"] {
			g["b"][i] = float32(i - k)
		}
		rows := []int64{int64(k), 10, 49}
		for _, s := range slots {
			ts := denseTensors(l, s.Index(), g)
			for _, r := range rows {
				if l.SlotOfRow(emb, r) == s.Index() {
					ts = append(ts, &pb.Tensor{Name: "emb", Rows: []int64{r}, Data: packed(float32(r)/10, float32(k))})
				}
			}
			if _, err := s.Push(context.Background(), &pb.PushRequest{Version: s.Version(), Grads: ts}); err != nil {
				tb.Fatal(err)
			}
		}
	}
}

// entries collects every entry of the given slots' snapshots by (param, index).
func entries(tb testing.TB, slots []*Slot) map[key]vshard.Entry {
	tb.Helper()
	out := map[key]vshard.Entry{}
	for _, s := range slots {
		for _, vs := range s.Snapshot().VShards {
			for _, e := range vs.Entries {
				out[key{e.Param, e.Index}] = e
			}
		}
	}
	return out
}

func blobsOf(tb testing.TB, slots []*Slot) map[int32][]byte {
	tb.Helper()
	blobs := map[int32][]byte{}
	for _, s := range slots {
		snap := s.Snapshot()
		for v := range snap.VShards {
			b, err := EncodeVShard(snap, v)
			if err != nil {
				tb.Fatal(err)
			}
			blobs[v] = b
		}
	}
	return blobs
}

func TestRestoreRepartition(t *testing.T) {
	spec := restoreSpec()
	two := []*Slot{mustSlot(t, spec, 0, 2), mustSlot(t, spec, 1, 2)}
	trainSlots(t, two, 4, 0)
	want := entries(t, two)
	blobs := blobsOf(t, two)
	for _, n := range []int32{1, 2, 3} {
		var slots []*Slot
		for i := range n {
			s, err := RestoreSlot(spec, i, n, blobs)
			if err != nil {
				t.Fatalf("restore %d/%d: %v", i, n, err)
			}
			if s.Version() != 4 {
				t.Fatalf("restored version %d", s.Version())
			}
			slots = append(slots, s)
		}
		if got := entries(t, slots); !reflect.DeepEqual(got, want) {
			t.Fatalf("restore into %d pservers: entries differ", n)
		}
		// Continuing training gives the same model as without the restore
		// (Adam moments and t restored exactly).
		trainSlots(t, slots, 2, 1)
		if n == 3 {
			trainSlots(t, two, 2, 1)
			want = entries(t, two)
			if got := entries(t, slots); !reflect.DeepEqual(got, want) {
				t.Fatal("training after restore diverged")
			}
		}
	}
}

func TestRestoreErrors(t *testing.T) {
	spec := restoreSpec()
	slots := []*Slot{mustSlot(t, spec, 0, 1)}
	blobs := blobsOf(t, slots)
	delete(blobs, 5)
	if _, err := RestoreSlot(spec, 0, 1, blobs); !errors.Is(err, wire.ErrMissingVShard) {
		t.Fatalf("missing vshard: %v", err)
	}
	blobs = blobsOf(t, slots)
	other := restoreSpec()
	other.Optimizer.Name = "sgd"
	if _, err := RestoreSlot(other, 0, 1, blobs); !errors.Is(err, wire.ErrIncompatible) {
		t.Fatalf("other optimizer: %v", err)
	}
	other = restoreSpec()
	other.Params[0].Shape = []int64{4, 5}
	if _, err := RestoreSlot(other, 0, 1, blobs); !errors.Is(err, wire.ErrIncompatible) {
		t.Fatalf("other shape: %v", err)
	}
}

func TestEncodeDecodeRoundTrip(t *testing.T) {
	spec := restoreSpec()
	s := mustSlot(t, spec, 0, 1)
	trainSlots(t, []*Slot{s}, 3, 0)
	snap := s.Snapshot()
	for v, vs := range snap.VShards {
		b, err := EncodeVShard(snap, v)
		if err != nil {
			t.Fatal(err)
		}
		got, err := vshard.Decode(b)
		if err != nil {
			t.Fatalf("vshard %d: %v", v, err)
		}
		if len(vs.Entries) == 0 {
			vs.Entries = []vshard.Entry{}
		}
		if !reflect.DeepEqual(got, vs) {
			t.Fatalf("vshard %d: round trip differs:\n%+v\n%+v", v, got, vs)
		}
	}
	if _, err := EncodeVShard(snap, 99); err == nil {
		t.Fatal("encode of a missing vshard succeeded")
	}
}

func TestDecodeCorrupt(t *testing.T) {
	spec := restoreSpec()
	s := mustSlot(t, spec, 0, 1)
	trainSlots(t, []*Slot{s}, 2, 0)
	blob := blobsOf(t, []*Slot{s})[3]
	// Every truncation.
	for n := 0; n < len(blob); n++ {
		if _, err := vshard.Decode(blob[:n]); !errors.Is(err, wire.ErrCorrupt) {
			t.Fatalf("truncated to %d: %v", n, err)
		}
	}
	// Every single-byte flip.
	for i := range blob {
		b := append([]byte(nil), blob...)
		b[i] ^= 0x40
		if _, err := vshard.Decode(b); !errors.Is(err, wire.ErrCorrupt) {
			t.Fatalf("flip at %d: %v", i, err)
		}
	}
	// Corrupt fields behind a valid CRC (a buggy writer): still an error, no panic.
	recrc := func(b []byte) []byte {
		binary.LittleEndian.PutUint32(b[len(b)-4:], crc32.Checksum(b[:len(b)-4], crc32.MakeTable(crc32.Castagnoli)))
		return b
	}
	for i := 8; i < len(blob)-4; i++ {
		for _, x := range []byte{0xff, 0x7f, 0x01} {
			b := append([]byte(nil), blob...)
			b[i] ^= x
			vs, err := vshard.Decode(recrc(b))
			if err == nil {
				// Some flips (values, names) decode fine; restore must still
				// refuse or accept without panicking.
				_ = vs
				_, _ = RestoreSlot(spec, 0, 1, map[int32][]byte{3: recrc(b)})
			}
		}
	}
	if _, err := vshard.Decode([]byte("RPVS\x02\x00\x00\x00abcdefgh")); !errors.Is(err, wire.ErrCorrupt) {
		t.Fatalf("future format: %v", err)
	}
}

// FuzzDecodeVShard: any input decodes to a blob or an ErrCorrupt error,
// never a panic. Run with go test -fuzz FuzzDecodeVShard ./pserver/.
func FuzzDecodeVShard(f *testing.F) {
	spec := restoreSpec()
	s := mustSlot(f, spec, 0, 1)
	trainSlots(f, []*Slot{s}, 2, 0)
	for _, b := range blobsOf(f, []*Slot{s}) {
		f.Add(b)
	}
	f.Add([]byte("RPVS\x01\x00\x00\x00"))
	f.Fuzz(func(t *testing.T, b []byte) {
		vs, err := vshard.Decode(b)
		if err != nil {
			if !errors.Is(err, wire.ErrCorrupt) {
				t.Fatalf("error %v does not wrap wire.ErrCorrupt", err)
			}
			return
		}
		if again, err := vshard.Decode(vs.Encode()); err != nil || !reflect.DeepEqual(again.Params, vs.Params) {
			t.Fatalf("re-encode: %v", err)
		}
	})
}

func TestDecodeVShardValues(t *testing.T) {
	spec := restoreSpec()
	s := mustSlot(t, spec, 0, 1)
	trainSlots(t, []*Slot{s}, 2, 0)
	want := pullAll(t, s)
	got := map[string][]float32{"w": make([]float32, 20), "b": make([]float32, 4)}
	rows := 0
	for _, blob := range blobsOf(t, []*Slot{s}) {
		runs, err := vshard.DecodeValues(blob)
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range runs {
			if r.Name == "emb" {
				rows++
				if r.Offset%2 != 0 || len(r.Data) != 2 {
					t.Fatalf("row run %+v", r)
				}
				continue
			}
			copy(got[r.Name][r.Offset:], r.Data)
		}
	}
	if !reflect.DeepEqual(got, want) || rows != 4 {
		t.Fatalf("values differ or %d rows (want 4)", rows)
	}
}
