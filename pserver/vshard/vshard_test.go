package vshard

import (
	"errors"
	"reflect"
	"testing"

	"github.com/raftps/raftps/pserver/wire"
)

// TestEncodeDecodeRoundTrip: a blob decodes to the snapshot it was
// encoded from, its values to runs at the right offsets, and every
// truncation of it is ErrCorrupt.
func TestEncodeDecodeRoundTrip(t *testing.T) {
	in := &Snapshot{Job: "j", VShard: 3, NumVShards: 8, BlockSize: 4, Version: 7, Step: 6,
		Optimizer: "adam", StateSlots: []string{"m", "v"},
		Params: []ParamInfo{{Name: "w", Shape: []int64{10}}, {Name: "e", Embedding: true, Shape: []int64{5, 2}}},
		Entries: []Entry{
			{Param: 0, Index: 2, T: 6, Values: []float32{1, 2}, State: [][]float32{{0.5, 0.25}, {1, 2}}},
			{Param: 1, Index: 4, T: 1, Values: []float32{-1, 3}, State: [][]float32{{0, 1}, {4, 0}}},
		}}
	blob := in.Encode()
	out, err := Decode(blob)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(in, out) {
		t.Fatalf("decoded %+v, want %+v", out, in)
	}
	runs, err := DecodeValues(blob)
	if err != nil {
		t.Fatal(err)
	}
	want := []ValueRun{{Name: "w", Shape: []int64{10}, Offset: 8, Data: []float32{1, 2}},
		{Name: "e", Shape: []int64{5, 2}, Offset: 8, Data: []float32{-1, 3}}}
	if !reflect.DeepEqual(runs, want) {
		t.Fatalf("runs %+v, want %+v", runs, want)
	}
	for n := range len(blob) {
		if _, err := Decode(blob[:n]); !errors.Is(err, wire.ErrCorrupt) {
			t.Fatalf("blob cut to %d of %d bytes: %v, want ErrCorrupt", n, len(blob), err)
		}
	}
}
