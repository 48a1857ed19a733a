package pserver

import (
	"encoding/binary"
	"math"
	"unsafe"
)

// littleEndian reports whether the host stores float32 little-endian, so
// that packed tensor bytes can be reinterpreted without conversion.
var littleEndian = func() bool {
	x := uint16(1)
	return *(*byte)(unsafe.Pointer(&x)) == 1
}()

// float32Bytes returns the packed little-endian bytes of f. On little-endian
// hosts it aliases f (no copy); the caller must not mutate f while the bytes
// are in use.
func float32Bytes(f []float32) []byte {
	if len(f) == 0 {
		return nil
	}
	if littleEndian {
		return unsafe.Slice((*byte)(unsafe.Pointer(&f[0])), len(f)*4)
	}
	b := make([]byte, len(f)*4)
	putFloat32s(b, f)
	return b
}

// putFloat32s writes f packed little-endian into b (len(b) >= 4*len(f)).
func putFloat32s(b []byte, f []float32) {
	if littleEndian && len(f) > 0 {
		copy(b, unsafe.Slice((*byte)(unsafe.Pointer(&f[0])), len(f)*4))
		return
	}
	for i, v := range f {
		binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(v))
	}
}

// getFloat32s reads len(dst) packed little-endian float32s from b.
func getFloat32s(dst []float32, b []byte) {
	if littleEndian && len(dst) > 0 {
		copy(unsafe.Slice((*byte)(unsafe.Pointer(&dst[0])), len(dst)*4), b)
		return
	}
	for i := range dst {
		dst[i] = math.Float32frombits(binary.LittleEndian.Uint32(b[4*i:]))
	}
}

// viewFloat32s returns b as []float32, aliasing b when the host is
// little-endian and b is 4-byte aligned, copying otherwise.
func viewFloat32s(b []byte) []float32 {
	n := len(b) / 4
	if n == 0 {
		return nil
	}
	if littleEndian && uintptr(unsafe.Pointer(&b[0]))%4 == 0 {
		return unsafe.Slice((*float32)(unsafe.Pointer(&b[0])), n)
	}
	f := make([]float32, n)
	getFloat32s(f, b)
	return f
}

// allFinite reports whether f holds no NaN or Inf: no |x| above
// MaxFloat32 (see anyAbove).
func allFinite(f []float32) bool {
	return !anyAbove(f, math.Float32bits(math.MaxFloat32))
}

// absMask clears the sign bit of a float32's bits. With it cleared, the
// bits as an unsigned integer order like the magnitudes, and every NaN
// orders above +Inf.
const absMask = 1<<31 - 1

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

// maxAbsBits returns the largest bit pattern of |x| over f (0 if f is
// empty): the bits of max |x|, or above +Inf's if f holds a NaN. It reads
// two elements per 64-bit load into four independent running maxima.
func maxAbsBits(f []float32) uint32 {
	head, words, tail := pairs(f)
	var m0, m1, m2, m3 uint32
	for _, x := range head {
		m0 = math.Float32bits(x) & absMask
	}
	for _, x := range tail {
		m1 = math.Float32bits(x) & absMask
	}
	i := 0
	for ; i+2 <= len(words); i += 2 {
		q := words[i : i+2 : i+2]
		a, b := q[0], q[1]
		m0 = max(m0, uint32(a)&absMask)
		m1 = max(m1, uint32(a>>32)&absMask)
		m2 = max(m2, uint32(b)&absMask)
		m3 = max(m3, uint32(b>>32)&absMask)
	}
	for ; i < len(words); i++ {
		m2 = max(m2, uint32(words[i])&absMask, uint32(words[i]>>32)&absMask)
	}
	return max(m0, m1, m2, m3)
}

// anyAbove reports whether some |x| in f is above the float32 whose bits
// are limit (limit <= absMask), or is NaN. It adds 2^31-1-limit to both
// halves of each 64-bit word after clearing their sign bits: a half
// carries into its top bit exactly when it is above limit, and never into
// the other half. The OR of the sums has a top bit set iff some element
// is above; no comparison, no branch.
func anyAbove(f []float32, limit uint32) bool {
	head, words, tail := pairs(f)
	for _, x := range head {
		if math.Float32bits(x)&absMask > limit {
			return true
		}
	}
	for _, x := range tail {
		if math.Float32bits(x)&absMask > limit {
			return true
		}
	}
	const mask2 = absMask | absMask<<32
	c := uint64(absMask - limit)
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
