package dataset

import (
	"bytes"
	"errors"
	"runtime"
	"testing"
)

// allocated returns the bytes fn allocated on the heap.
func allocated(fn func()) uint64 {
	var a, b runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&a)
	fn()
	runtime.ReadMemStats(&b)
	return b.TotalAlloc - a.TotalAlloc
}

// TestIDXHeaderProductOverflow: dims whose product overflows int (2^30 ×
// 2^30 × 2^30 wraps to 0; 2^30 × 2^30 × 3 to a value the old check passed)
// are ErrTooLarge, and a 0 × 0 image is refused (Dim 0 made Row panic).
func TestIDXHeaderProductOverflow(t *testing.T) {
	for _, dims := range [][]uint32{
		{1 << 30, 1 << 30, 1 << 30},
		{1 << 30, 1 << 30, 1 << 2},
		{1 << 20, 1 << 20, 1 << 20},
		{1 << 16, 1 << 16, 1},
	} {
		_, _, _, _, err := ReadImages(bytes.NewReader(idx(magicImages, dims, nil)))
		if !errors.Is(err, ErrTooLarge) {
			t.Errorf("ReadImages(dims %v) = %v, want ErrTooLarge", dims, err)
		}
	}
	for _, dims := range [][]uint32{{1, 0, 28}, {1, 28, 0}} {
		_, _, _, _, err := ReadImages(bytes.NewReader(idx(magicImages, dims, nil)))
		if !errors.Is(err, ErrBadHeader) {
			t.Errorf("ReadImages(dims %v) = %v, want ErrBadHeader", dims, err)
		}
	}
}

// TestIDXHeaderAllocatesWithData: a header alone announcing 2^30 values
// (1 GiB) allocates in proportion to the bytes that arrive, not to the
// announced size, and ends in ErrTruncated.
func TestIDXHeaderAllocatesWithData(t *testing.T) {
	data := make([]byte, 1000)
	var err error
	n := allocated(func() {
		_, _, err = ReadLabels(bytes.NewReader(idx(magicLabels, []uint32{1 << 30}, data)))
	})
	if !errors.Is(err, ErrTruncated) {
		t.Fatalf("ReadLabels: %v, want ErrTruncated", err)
	}
	if n > 1<<20 {
		t.Fatalf("a 1 KB labels file allocated %d bytes", n)
	}
	n = allocated(func() {
		_, _, _, _, err = ReadImages(bytes.NewReader(idx(magicImages, []uint32{1 << 10, 1 << 10, 1 << 10}, data)))
	})
	if !errors.Is(err, ErrTruncated) {
		t.Fatalf("ReadImages: %v, want ErrTruncated", err)
	}
	if n > 1<<20 {
		t.Fatalf("a 1 KB images file allocated %d bytes", n)
	}
}
