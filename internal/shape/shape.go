package shape

import (
	"errors"
	"fmt"
	"math"
	"math/bits"
)

// MaxElements bounds the number of elements of one tensor: 2^48 float32s
// (1 PiB). Any count at or below it can be multiplied by 4 bytes and by
// 1 + 3 optimizer state tensors without overflowing int64.
const MaxElements = 1 << 48

// ErrTooLarge: a shape has a negative dimension or its element count
// exceeds MaxElements (including products that overflow int64).
var ErrTooLarge = errors.New("shape: negative dimension or too many elements")

// Elements returns the product of dims (1 for rank 0), or an error wrapping
// ErrTooLarge if a dim is negative or the product exceeds MaxElements. It
// never overflows: [3, 1<<62] is an error, not a negative size.
func Elements(dims []int64) (int64, error) {
	n := int64(1)
	for _, d := range dims {
		if d < 0 {
			return 0, fmt.Errorf("%w: dimension %d in %v", ErrTooLarge, d, dims)
		}
		p, ok := Mul(n, d)
		if !ok || p > MaxElements {
			return 0, fmt.Errorf("%w: %v has more than %d elements", ErrTooLarge, dims, int64(MaxElements))
		}
		n = p
	}
	return n, nil
}

// Mul returns a·b and whether it fits in an int64 (a, b >= 0).
func Mul(a, b int64) (int64, bool) {
	if a < 0 || b < 0 {
		return 0, false
	}
	hi, lo := bits.Mul64(uint64(a), uint64(b))
	if hi != 0 || lo > math.MaxInt64 {
		return 0, false
	}
	return int64(lo), true
}

// Add returns a+b and whether it fits in an int64 (a, b >= 0).
func Add(a, b int64) (int64, bool) {
	if a < 0 || b < 0 || a > math.MaxInt64-b {
		return 0, false
	}
	return a + b, true
}
