package fsm

import (
	"fmt"
	"testing"

	"github.com/hashicorp/raft"

	pb "github.com/raftps/raftps/api/raftpspb"
)

// benchEntries pre-encodes n entries of per puts each over a key space of
// 100k keys with 128-byte values.
func benchEntries(b *testing.B, n, per int) [][]byte {
	val := make([]byte, 128)
	out := make([][]byte, n)
	k := 0
	for i := range out {
		cmds := make([]*pb.Command, per)
		for j := range cmds {
			cmds[j] = mustCmd(b, pb.CommandType_COMMAND_PUT, &pb.PutRequest{Key: fmt.Appendf(nil, "/bench/key/%06d", k%100000), Value: val})
			k++
		}
		d, err := EncodeEntry(int64(i), cmds)
		if err != nil {
			b.Fatal(err)
		}
		out[i] = d
	}
	return out
}

func benchApply(b *testing.B, per int) {
	const distinct = 1024
	entries := benchEntries(b, distinct, per)
	f := New(nil)
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		r := f.Apply(&raft.Log{Index: uint64(i + 1), Type: raft.LogCommand, Data: entries[i%distinct]}).(*ApplyResult)
		if r.Err != nil || r.Results[0].Error != nil {
			b.Fatal(r.Err, r.Results[0].Error)
		}
	}
	b.StopTimer()
	b.ReportMetric(float64(b.N*per)/b.Elapsed().Seconds(), "puts/s")
}

// BenchmarkApplyPut applies one put per log entry.
func BenchmarkApplyPut(b *testing.B) { benchApply(b, 1) }

// BenchmarkApplyBatch applies 256 puts per log entry.
func BenchmarkApplyBatch(b *testing.B) { benchApply(b, 256) }
