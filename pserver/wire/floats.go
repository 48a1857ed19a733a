package wire

import (
	"encoding/binary"
	"math"
	"unsafe"
)

// LittleEndian reports whether the host stores float32 little-endian, so
// that packed tensor bytes can be reinterpreted without conversion.
var LittleEndian = func() bool {
	x := uint16(1)
	return *(*byte)(unsafe.Pointer(&x)) == 1
}()

// Float32Bytes returns the packed little-endian bytes of f. On little-endian
// hosts it aliases f (no copy); the caller must not mutate f while the bytes
// are in use.
func Float32Bytes(f []float32) []byte {
	if len(f) == 0 {
		return nil
	}
	if LittleEndian {
		return unsafe.Slice((*byte)(unsafe.Pointer(&f[0])), len(f)*4)
	}
	b := make([]byte, len(f)*4)
	PutFloat32s(b, f)
	return b
}

// PutFloat32s writes f packed little-endian into b (len(b) >= 4*len(f)).
func PutFloat32s(b []byte, f []float32) {
	if LittleEndian && len(f) > 0 {
		copy(b, unsafe.Slice((*byte)(unsafe.Pointer(&f[0])), len(f)*4))
		return
	}
	for i, v := range f {
		binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(v))
	}
}

// GetFloat32s reads len(dst) packed little-endian float32s from b.
func GetFloat32s(dst []float32, b []byte) {
	if LittleEndian && len(dst) > 0 {
		copy(unsafe.Slice((*byte)(unsafe.Pointer(&dst[0])), len(dst)*4), b)
		return
	}
	for i := range dst {
		dst[i] = math.Float32frombits(binary.LittleEndian.Uint32(b[4*i:]))
	}
}

// ViewFloat32s returns b as []float32, aliasing b when the host is
// little-endian and b is 4-byte aligned, copying otherwise.
func ViewFloat32s(b []byte) []float32 {
	n := len(b) / 4
	if n == 0 {
		return nil
	}
	if LittleEndian && uintptr(unsafe.Pointer(&b[0]))%4 == 0 {
		return unsafe.Slice((*float32)(unsafe.Pointer(&b[0])), n)
	}
	f := make([]float32, n)
	GetFloat32s(f, b)
	return f
}
