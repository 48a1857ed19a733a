package dataset

import (
	"bytes"
	"testing"
)

// FuzzReadIDX feeds arbitrary bytes to ReadImages and ReadLabels: they
// must return an error or a result whose sizes agree with the header,
// never panic, and never hold more values than the input had bytes.
func FuzzReadIDX(f *testing.F) {
	f.Add(goodImages)
	f.Add(goodLabels)
	f.Add(idx(magicImages, []uint32{1 << 30, 1 << 30, 1 << 30}, nil))
	f.Add(idx(magicImages, []uint32{1, 0, 28}, nil))
	f.Add(idx(magicLabels, []uint32{1 << 30}, []byte{1, 2, 3}))
	f.Fuzz(func(t *testing.T, b []byte) {
		images, n, rows, cols, err := ReadImages(bytes.NewReader(b))
		if err == nil {
			if rows <= 0 || cols <= 0 || n < 0 || len(images) != n*rows*cols {
				t.Fatalf("images: %d values for %d x %d x %d", len(images), n, rows, cols)
			}
			if len(images) > len(b) {
				t.Fatalf("%d values from %d bytes", len(images), len(b))
			}
			ds := &Dataset{Images: images, N: n, Dim: rows * cols}
			if n > 0 {
				_ = ds.Row(n - 1)
			}
		}
		labels, n, err := ReadLabels(bytes.NewReader(b))
		if err == nil && (len(labels) != n || len(labels) > len(b)) {
			t.Fatalf("labels: %d for n = %d from %d bytes", len(labels), n, len(b))
		}
	})
}
