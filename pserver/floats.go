package pserver

import (
	"context"
	"encoding/binary"
	"math"
	"unsafe"
)

var (
	contextCanceled = context.Canceled
	contextDeadline = context.DeadlineExceeded
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

// allFinite reports whether f holds no NaN or Inf.
func allFinite(f []float32) bool {
	for _, v := range f {
		// v-v is NaN for both NaN and ±Inf.
		if v-v != 0 {
			return false
		}
	}
	return true
}
