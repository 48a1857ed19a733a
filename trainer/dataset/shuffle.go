package dataset

import (
	"errors"
	"fmt"
	"math/bits"
)

// ErrRange: a task's record range does not fit the permutation.
var ErrRange = errors.New("dataset: record range out of bounds")

// Permutation returns a permutation of [0, n) that depends only on (n, seed,
// pass): every trainer computes the same shuffled order for a pass without
// talking to anyone, and each pass gets a different order.
//
// The generator is specified here, not borrowed from math/rand, so that the
// order never changes with the Go version: SplitMix64 (Steele, Lea & Flood
// 2014) seeded with mix(seed, pass), driving a Fisher–Yates shuffle whose
// bounded draws use Lemire's multiply-high reduction (bias < n/2^64).
func Permutation(n int, seed int64, pass int32) []int {
	p := make([]int, n)
	for i := range p {
		p[i] = i
	}
	s := splitmix{state: uint64(seed)*0x9e3779b97f4a7c15 ^ (uint64(uint32(pass))+1)*0xbf58476d1ce4e5b9}
	for i := n - 1; i > 0; i-- {
		hi, _ := bits.Mul64(s.next(), uint64(i+1))
		j := int(hi)
		p[i], p[j] = p[j], p[i]
	}
	return p
}

type splitmix struct{ state uint64 }

func (s *splitmix) next() uint64 {
	s.state += 0x9e3779b97f4a7c15
	z := s.state
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9
	z = (z ^ (z >> 27)) * 0x94d049bb133111eb
	return z ^ (z >> 31)
}

// TaskRecords returns the record indices of a task covering positions
// [begin, end) of the pass's shuffled order perm (a sub-slice of perm, not a
// copy). It returns ErrRange unless 0 <= begin <= end <= len(perm).
func TaskRecords(perm []int, begin, end int64) ([]int, error) {
	if begin < 0 || end < begin || end > int64(len(perm)) {
		return nil, fmt.Errorf("%w: [%d, %d) of %d records", ErrRange, begin, end, len(perm))
	}
	return perm[begin:end], nil
}

// Batches cuts records into consecutive mini-batches of at most size records
// (the last one may be shorter), sharing memory with records. size <= 0 means
// one batch.
func Batches(records []int, size int) [][]int {
	if size <= 0 || size > len(records) {
		size = len(records)
	}
	if len(records) == 0 {
		return nil
	}
	out := make([][]int, 0, (len(records)+size-1)/size)
	for b := 0; b < len(records); b += size {
		out = append(out, records[b:min(b+size, len(records))])
	}
	return out
}
