package dataset

import (
	"bytes"
	"compress/gzip"
	"encoding/binary"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"testing"
)

// idx encodes an IDX unsigned-byte file with the given magic and dims.
func idx(magic uint32, dims []uint32, data []byte) []byte {
	var b bytes.Buffer
	binary.Write(&b, binary.BigEndian, magic)
	for _, d := range dims {
		binary.Write(&b, binary.BigEndian, d)
	}
	b.Write(data)
	return b.Bytes()
}

func gz(tb testing.TB, raw []byte) []byte {
	tb.Helper()
	var b bytes.Buffer
	w := gzip.NewWriter(&b)
	w.Write(raw)
	if err := w.Close(); err != nil {
		tb.Fatal(err)
	}
	return b.Bytes()
}

func mustWrite(tb testing.TB, path string, data []byte) {
	tb.Helper()
	if err := os.WriteFile(path, data, 0o644); err != nil {
		tb.Fatal(err)
	}
}

// writeSplit writes a 3-record 2x2 train split into dir.
func writeSplit(tb testing.TB, dir string, images, labels []byte) {
	mustWrite(tb, filepath.Join(dir, "train-images-idx3-ubyte.gz"), gz(tb, images))
	mustWrite(tb, filepath.Join(dir, "train-labels-idx1-ubyte.gz"), gz(tb, labels))
}

var (
	goodImages = idx(0x803, []uint32{3, 2, 2}, []byte{0, 255, 51, 102, 1, 2, 3, 4, 5, 6, 7, 8})
	goodLabels = idx(0x801, []uint32{3}, []byte{9, 0, 3})
)

func TestReadFashionMNIST(t *testing.T) {
	dir := t.TempDir()
	writeSplit(t, dir, goodImages, goodLabels)
	ds, err := ReadFashionMNIST(dir, "train")
	if err != nil {
		t.Fatal(err)
	}
	if ds.N != 3 || ds.Dim != 4 || ds.Classes != 10 || len(ds.Images) != 12 {
		t.Fatalf("got N %d Dim %d Classes %d len %d", ds.N, ds.Dim, ds.Classes, len(ds.Images))
	}
	if want := []float32{0, 1, 0.2, 0.4}; !slices.Equal(ds.Row(0), want) {
		t.Errorf("row 0 = %v, want %v", ds.Row(0), want)
	}
	if !slices.Equal(ds.Labels, []uint8{9, 0, 3}) {
		t.Errorf("labels %v", ds.Labels)
	}
	x, y := ds.Gather([]int{2, 0}, nil, nil)
	if !slices.Equal(y, []uint8{3, 9}) || x[0] != float32(5)/255 || x[4] != 0 {
		t.Errorf("Gather: x %v y %v", x, y)
	}
	if h := ds.Head(2); h.N != 2 || len(h.Images) != 8 || len(h.Labels) != 2 {
		t.Errorf("Head(2): %+v", h)
	}
}

func TestReadUncompressedFallback(t *testing.T) {
	dir := t.TempDir()
	mustWrite(t, filepath.Join(dir, "t10k-images-idx3-ubyte"), goodImages)
	mustWrite(t, filepath.Join(dir, "t10k-labels-idx1-ubyte"), goodLabels)
	if ds, err := ReadFashionMNIST(dir, "test"); err != nil || ds.N != 3 {
		t.Fatalf("uncompressed files: %v", err)
	}
}

func TestReadErrors(t *testing.T) {
	for _, tc := range []struct {
		name           string
		images, labels []byte
		want           error
	}{
		{"images magic", idx(0x801, []uint32{3, 2, 2}, nil), goodLabels, ErrBadMagic},
		{"labels magic", goodImages, idx(0x803, []uint32{3}, []byte{1, 2, 3}), ErrBadMagic},
		{"images truncated", goodImages[:len(goodImages)-1], goodLabels, ErrTruncated},
		{"images header truncated", goodImages[:10], goodLabels, ErrTruncated},
		{"labels truncated", goodImages, goodLabels[:len(goodLabels)-1], ErrTruncated},
		{"empty file", []byte{}, goodLabels, ErrTruncated},
		{"count mismatch", goodImages, idx(0x801, []uint32{2}, []byte{1, 2}), ErrMismatch},
		{"label out of range", goodImages, idx(0x801, []uint32{3}, []byte{1, 2, 10}), ErrMismatch},
		{"huge header", idx(0x803, []uint32{1 << 20, 1 << 10, 1 << 10}, nil), goodLabels, ErrTooLarge},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			writeSplit(t, dir, tc.images, tc.labels)
			_, err := ReadFashionMNIST(dir, "train")
			if !errors.Is(err, tc.want) {
				t.Fatalf("err = %v, want %v", err, tc.want)
			}
			t.Log(err)
		})
	}
	t.Run("missing file", func(t *testing.T) {
		_, err := ReadFashionMNIST(t.TempDir(), "train")
		if !errors.Is(err, fs.ErrNotExist) {
			t.Fatalf("err = %v, want fs.ErrNotExist", err)
		}
		t.Log(err)
	})
	t.Run("unknown split", func(t *testing.T) {
		if _, err := LoadFashionMNIST(t.TempDir(), "valid"); !errors.Is(err, ErrUnknownSplit) {
			t.Fatalf("err = %v, want ErrUnknownSplit", err)
		}
	})
}

func TestLoadCaches(t *testing.T) {
	dir := t.TempDir()
	if _, err := LoadFashionMNIST(dir, "train"); err == nil {
		t.Fatal("load of an empty dir succeeded")
	}
	writeSplit(t, dir, goodImages, goodLabels) // errors are not cached
	a, err := LoadFashionMNIST(dir, "train")
	if err != nil {
		t.Fatal(err)
	}
	b, err := LoadFashionMNIST(dir+string(filepath.Separator)+".", "train")
	if err != nil || a != b {
		t.Fatalf("second load: %p vs %p, err %v", a, b, err)
	}
}

func TestRealFashionMNIST(t *testing.T) {
	dir := filepath.Join("..", "..", "datasets", "fashion-mnist")
	if _, err := os.Stat(filepath.Join(dir, "t10k-images-idx3-ubyte.gz")); err != nil {
		t.Fatalf("the repository's copy of Fashion-MNIST is missing (datasets/fashion-mnist): %v", err)
	}
	splits := []struct {
		split string
		n     int
	}{{"test", 10000}}
	if !testing.Short() && !raceEnabled {
		splits = append(splits, struct {
			split string
			n     int
		}{"train", 60000})
	}
	for _, s := range splits {
		ds, err := LoadFashionMNIST(dir, s.split)
		if err != nil {
			t.Fatal(err)
		}
		if ds.N != s.n || ds.Dim != 784 || len(ds.Images) != s.n*784 {
			t.Fatalf("%s: N %d Dim %d", s.split, ds.N, ds.Dim)
		}
		var counts [10]int
		for _, l := range ds.Labels {
			counts[l]++
		}
		for c, k := range counts {
			if k != s.n/10 { // Fashion-MNIST is balanced
				t.Errorf("%s: class %d has %d records", s.split, c, k)
			}
		}
	}
}

func TestPermutation(t *testing.T) {
	a := Permutation(1000, 42, 3)
	if !slices.Equal(a, Permutation(1000, 42, 3)) {
		t.Fatal("same (n, seed, pass) gave different orders")
	}
	sorted := slices.Clone(a)
	slices.Sort(sorted)
	for i, v := range sorted {
		if v != i {
			t.Fatalf("not a permutation: sorted[%d] = %d", i, v)
		}
	}
	if slices.Equal(a, Permutation(1000, 42, 4)) || slices.Equal(a, Permutation(1000, 43, 3)) {
		t.Error("different pass or seed gave the same order")
	}
	fixed := 0
	for i, v := range a {
		if i == v {
			fixed++
		}
	}
	if fixed > 10 {
		t.Errorf("%d fixed points in a shuffle of 1000", fixed)
	}
	// Pinned: the order must never change across Go versions or refactors,
	// or trainers of different builds would disagree on task contents.
	if got, want := Permutation(10, 1, 0), []int{0, 8, 9, 3, 7, 1, 5, 4, 6, 2}; !slices.Equal(got, want) {
		t.Errorf("Permutation(10, 1, 0) = %v, want %v", got, want)
	}
	if len(Permutation(0, 1, 0)) != 0 || !slices.Equal(Permutation(1, 1, 0), []int{0}) {
		t.Error("degenerate sizes")
	}
}

func TestTaskRecordsAndBatches(t *testing.T) {
	perm := Permutation(100, 7, 0)
	rec, err := TaskRecords(perm, 10, 35)
	if err != nil || len(rec) != 25 || rec[0] != perm[10] {
		t.Fatalf("TaskRecords: %v %v", rec, err)
	}
	for _, r := range [][2]int64{{-1, 5}, {5, 4}, {90, 101}} {
		if _, err := TaskRecords(perm, r[0], r[1]); !errors.Is(err, ErrRange) {
			t.Errorf("TaskRecords(%v): err %v, want ErrRange", r, err)
		}
	}
	b := Batches(rec, 10)
	if len(b) != 3 || len(b[0]) != 10 || len(b[2]) != 5 || b[2][4] != rec[24] {
		t.Errorf("Batches: %v", b)
	}
	if len(Batches(nil, 10)) != 0 || len(Batches(rec, 0)) != 1 {
		t.Error("degenerate batches")
	}
}
