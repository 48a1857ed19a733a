package main

import (
	"errors"
	"testing"

	"github.com/raftps/raftps/pserver/vshard"
	"github.com/raftps/raftps/pserver/wire"
)

// A crafted blob with a rank-0 embedding (valid CRC and MD5 as far as the
// store is concerned) is an export error, not a panic of the CLI.
func TestVShardDecoderRefusesRankZeroEmbedding(t *testing.T) {
	vs := &vshard.Snapshot{
		Job: "j", VShard: 0, NumVShards: 1, BlockSize: 4, Optimizer: "sgd",
		Params:  []vshard.ParamInfo{{Name: "emb", Embedding: true, Shape: nil}},
		Entries: []vshard.Entry{{Param: 0, Index: 3, Values: []float32{1, 2}}},
	}
	blob := vs.Encode()
	defer func() {
		if r := recover(); r != nil {
			t.Fatalf("decoder panicked: %v", r)
		}
	}()
	if _, err := vshardDecoder.DecodeVShard(blob); err == nil {
		t.Fatal("rank-0 embedding decoded without error")
	} else if !errors.Is(err, wire.ErrCorrupt) {
		t.Fatalf("err = %v, want wire.ErrCorrupt", err)
	}
}
