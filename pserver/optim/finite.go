package optim

import (
	"math"
	"unsafe"
)

// AllFinite reports whether f holds no NaN or Inf: no |x| above
// MaxFloat32 (see AnyAbove).
func AllFinite(f []float32) bool {
	return !AnyAbove(f, math.Float32bits(math.MaxFloat32))
}

// AbsMask clears the sign bit of a float32's bits. With it cleared, the
// bits as an unsigned integer order like the magnitudes, and every NaN
// orders above +Inf.
const AbsMask = 1<<31 - 1

// pairs returns f as whole 64-bit words (two float32s each, in either
// order) from its first 8-byte-aligned element, with the elements before
// and after them (at most one each).
func pairs(f []float32) (head []float32, words []uint64, tail []float32) {
	if len(f) > 0 && uintptr(unsafe.Pointer(&f[0]))%8 != 0 {
		head, f = f[:1], f[1:]
	}
	if len(f) >= 2 {
		words = unsafe.Slice((*uint64)(unsafe.Pointer(&f[0])), len(f)/2)
	}
	return head, words, f[len(f)&^1:]
}

// MaxAbsBits returns the largest bit pattern of |x| over f (0 if f is
// empty): the bits of max |x|, or above +Inf's if f holds a NaN. It reads
// two elements per 64-bit load into four independent running maxima.
func MaxAbsBits(f []float32) uint32 {
	head, words, tail := pairs(f)
	var m0, m1, m2, m3 uint32
	for _, x := range head {
		m0 = math.Float32bits(x) & AbsMask
	}
	for _, x := range tail {
		m1 = math.Float32bits(x) & AbsMask
	}
	i := 0
	for ; i+2 <= len(words); i += 2 {
		q := words[i : i+2 : i+2]
		a, b := q[0], q[1]
		m0 = max(m0, uint32(a)&AbsMask)
		m1 = max(m1, uint32(a>>32)&AbsMask)
		m2 = max(m2, uint32(b)&AbsMask)
		m3 = max(m3, uint32(b>>32)&AbsMask)
	}
	for ; i < len(words); i++ {
		m2 = max(m2, uint32(words[i])&AbsMask, uint32(words[i]>>32)&AbsMask)
	}
	return max(m0, m1, m2, m3)
}

// AnyAbove reports whether some |x| in f is above the float32 whose bits
// are limit (limit <= AbsMask), or is NaN. It adds 2^31-1-limit to both
// halves of each 64-bit word after clearing their sign bits: a half
// carries into its top bit exactly when it is above limit, and never into
// the other half. The OR of the sums has a top bit set iff some element
// is above; no comparison, no branch.
func AnyAbove(f []float32, limit uint32) bool {
	head, words, tail := pairs(f)
	for _, x := range head {
		if math.Float32bits(x)&AbsMask > limit {
			return true
		}
	}
	for _, x := range tail {
		if math.Float32bits(x)&AbsMask > limit {
			return true
		}
	}
	const mask2 = AbsMask | AbsMask<<32
	c := uint64(AbsMask - limit)
	c |= c << 32
	var a0, a1, a2, a3 uint64
	i := 0
	for ; i+4 <= len(words); i += 4 {
		q := words[i : i+4 : i+4]
		a0 |= q[0]&mask2 + c
		a1 |= q[1]&mask2 + c
		a2 |= q[2]&mask2 + c
		a3 |= q[3]&mask2 + c
	}
	for ; i < len(words); i++ {
		a0 |= words[i]&mask2 + c
	}
	return (a0|a1|a2|a3)&^mask2 != 0
}
