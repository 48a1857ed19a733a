package dataset

import (
	"bufio"
	"compress/gzip"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
)

// Errors returned by the readers; match with errors.Is.
var (
	// ErrBadMagic: the file does not start with the IDX magic number expected
	// for its kind (0x00000803 for images, 0x00000801 for labels).
	ErrBadMagic = errors.New("dataset: bad IDX magic number")
	// ErrTruncated: the file ends before the header's dimensions are filled.
	ErrTruncated = errors.New("dataset: truncated IDX data")
	// ErrMismatch: the images and labels files disagree on the record count,
	// or a label is out of range.
	ErrMismatch = errors.New("dataset: images and labels do not match")
	// ErrUnknownSplit: split is neither "train" nor "test".
	ErrUnknownSplit = errors.New("dataset: unknown split")
	// ErrTooLarge: the header announces more data than the reader accepts
	// (the product of its dimensions exceeds 2^30 values).
	ErrTooLarge = errors.New("dataset: IDX dimensions too large")
	// ErrBadHeader: the header announces images of zero rows or columns.
	ErrBadHeader = errors.New("dataset: bad IDX dimensions")
	// ErrOutsideDir: a dataset file is a symbolic link that leads out of
	// the dataset directory, or is not a regular file (a FIFO, a device).
	ErrOutsideDir = errors.New("dataset: file is not a regular file inside the dataset directory")
)

const (
	magicLabels = 0x00000801 // unsigned byte, 1 dimension
	magicImages = 0x00000803 // unsigned byte, 3 dimensions

	// maxValues bounds N x rows x cols so that a corrupt header cannot make
	// the reader allocate gigabytes.
	maxValues = 1 << 30

	// Classes is the number of Fashion-MNIST classes (labels 0..9).
	Classes = 10
)

// Dataset is a decoded split: N records of Dim float32 features each, stored
// row-major in one slice (record i is Images[i*Dim:(i+1)*Dim]), scaled to
// [0, 1], and their labels in [0, Classes).
//
// A Dataset returned by LoadFashionMNIST is shared by every caller: treat it
// as read-only.
type Dataset struct {
	Images []float32
	Labels []uint8
	N      int
	Dim    int
	// Classes is the number of distinct labels (10 for Fashion-MNIST).
	Classes int
}

// Row returns record i's features (len Dim), aliasing d.Images.
func (d *Dataset) Row(i int) []float32 { return d.Images[i*d.Dim : (i+1)*d.Dim] }

// Head returns a view of the first n records (all of them if n >= N or n <= 0),
// sharing memory with d.
func (d *Dataset) Head(n int) *Dataset {
	if n <= 0 || n >= d.N {
		return d
	}
	return &Dataset{Images: d.Images[:n*d.Dim], Labels: d.Labels[:n], N: n, Dim: d.Dim, Classes: d.Classes}
}

// Gather copies the records named by idx into x (len(idx) x Dim, row-major)
// and y, growing them if needed, and returns them. Indices must be in [0, N).
func (d *Dataset) Gather(idx []int, x []float32, y []uint8) ([]float32, []uint8) {
	n := len(idx)
	if cap(x) < n*d.Dim {
		x = make([]float32, n*d.Dim)
	}
	x = x[:n*d.Dim]
	if cap(y) < n {
		y = make([]uint8, n)
	}
	y = y[:n]
	for i, r := range idx {
		copy(x[i*d.Dim:(i+1)*d.Dim], d.Images[r*d.Dim:(r+1)*d.Dim])
		y[i] = d.Labels[r]
	}
	return x, y
}

// FileNames returns the images and labels file names of a Fashion-MNIST
// split ("train" or "t10k" prefix, gzip IDX).
func FileNames(split string) (images, labels string, err error) {
	switch split {
	case "train":
		return "train-images-idx3-ubyte.gz", "train-labels-idx1-ubyte.gz", nil
	case "test", "t10k":
		return "t10k-images-idx3-ubyte.gz", "t10k-labels-idx1-ubyte.gz", nil
	}
	return "", "", fmt.Errorf("%w %q (want \"train\" or \"test\")", ErrUnknownSplit, split)
}

// ReadFashionMNIST decodes split ("train" or "test") from dir without
// caching. Each file is read gzip-compressed from its .gz name or, if that
// does not exist, uncompressed from the name without .gz.
func ReadFashionMNIST(dir, split string) (*Dataset, error) {
	imgName, lblName, err := FileNames(split)
	if err != nil {
		return nil, err
	}
	var ds Dataset
	var rows, cols int
	if err := readFile(dir, imgName, func(r io.Reader) error {
		ds.Images, ds.N, rows, cols, err = ReadImages(r)
		return err
	}); err != nil {
		return nil, err
	}
	var nl int
	if err := readFile(dir, lblName, func(r io.Reader) error {
		ds.Labels, nl, err = ReadLabels(r)
		return err
	}); err != nil {
		return nil, err
	}
	if nl != ds.N {
		return nil, fmt.Errorf("%w: %s has %d images, %s has %d labels", ErrMismatch, imgName, ds.N, lblName, nl)
	}
	for i, l := range ds.Labels {
		if int(l) >= Classes {
			return nil, fmt.Errorf("%w: label %d of record %d is not in [0, %d)", ErrMismatch, l, i, Classes)
		}
	}
	ds.Dim = rows * cols
	ds.Classes = Classes
	return &ds, nil
}

// readFile opens name in dir (or name without ".gz"), transparently
// un-gzips it and hands it to fn; errors name the file. The file is opened
// through an os.Root of dir: a symbolic link that leads out of dir (or a
// ".." in name) is refused with ErrOutsideDir, as is anything but a
// regular file (opened non-blocking, so a FIFO cannot stall the reader).
func readFile(dir, name string, fn func(io.Reader) error) error {
	path := filepath.Join(dir, name)
	root, err := os.OpenRoot(dir)
	if err != nil {
		return fmt.Errorf("dataset: open: %w", err)
	}
	defer root.Close()
	f, err := openRegular(root, name)
	if errors.Is(err, os.ErrNotExist) && strings.HasSuffix(name, ".gz") {
		if f2, err2 := openRegular(root, strings.TrimSuffix(name, ".gz")); err2 == nil || !errors.Is(err2, os.ErrNotExist) {
			f, err, path = f2, err2, strings.TrimSuffix(path, ".gz")
		}
	}
	if err != nil {
		return fmt.Errorf("dataset: open %s: %w", path, err)
	}
	defer f.Close()
	br := bufio.NewReaderSize(f, 1<<16)
	var r io.Reader = br
	if hdr, _ := br.Peek(2); len(hdr) == 2 && hdr[0] == 0x1f && hdr[1] == 0x8b {
		zr, err := gzip.NewReader(br)
		if err != nil {
			return fmt.Errorf("dataset: %s: %w", path, err)
		}
		defer zr.Close()
		r = zr
	}
	if err := fn(r); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	return nil
}

// openRegular opens name under root, refusing an escape from root and
// anything but a regular file with ErrOutsideDir.
func openRegular(root *os.Root, name string) (*os.File, error) {
	f, err := root.OpenFile(name, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return nil, err
		}
		if fi, lerr := root.Lstat(name); lerr == nil && fi.Mode()&os.ModeSymlink != 0 {
			return nil, fmt.Errorf("%w: %w", ErrOutsideDir, err) // os.Root refused the link's target
		}
		return nil, err
	}
	if fi, err := f.Stat(); err != nil || !fi.Mode().IsRegular() {
		f.Close()
		if err == nil {
			err = fmt.Errorf("%w: mode %v", ErrOutsideDir, fi.Mode())
		}
		return nil, err
	}
	return f, nil
}

// ReadImages decodes an uncompressed IDX3 unsigned-byte image stream (magic
// 0x00000803, dims N x rows x cols, big-endian) into N x rows*cols float32
// values scaled to [0, 1] (byte / 255).
func ReadImages(r io.Reader) (images []float32, n, rows, cols int, err error) {
	dims, err := readHeader(r, magicImages, 3)
	if err != nil {
		return nil, 0, 0, 0, err
	}
	n, rows, cols = dims[0], dims[1], dims[2]
	if rows == 0 || cols == 0 {
		return nil, 0, 0, 0, fmt.Errorf("%w: images of %d x %d pixels", ErrBadHeader, rows, cols)
	}
	// Each dim is at most 2^30, so the products fit in 64 bits before the
	// bound is applied to them.
	total := uint64(n) * uint64(rows)
	if total <= maxValues {
		total *= uint64(cols)
	}
	if total > maxValues {
		return nil, 0, 0, 0, fmt.Errorf("%w: %d x %d x %d", ErrTooLarge, n, rows, cols)
	}
	raw, err := readN(r, int(total))
	if err != nil {
		return nil, 0, 0, 0, fmt.Errorf("images: %w", err)
	}
	images = make([]float32, total)
	for i, b := range raw {
		images[i] = float32(b) / 255
	}
	return images, n, rows, cols, nil
}

// ReadLabels decodes an uncompressed IDX1 unsigned-byte label stream (magic
// 0x00000801, one dimension N).
func ReadLabels(r io.Reader) (labels []uint8, n int, err error) {
	dims, err := readHeader(r, magicLabels, 1)
	if err != nil {
		return nil, 0, err
	}
	n = dims[0]
	if n > maxValues {
		return nil, 0, fmt.Errorf("%w: %d labels", ErrTooLarge, n)
	}
	if labels, err = readN(r, n); err != nil {
		return nil, 0, fmt.Errorf("labels: %w", err)
	}
	return labels, n, nil
}

func readHeader(r io.Reader, magic uint32, ndim int) ([]int, error) {
	buf := make([]byte, 4*(1+ndim))
	if err := readFull(r, buf[:4]); err != nil {
		return nil, fmt.Errorf("header: %w", err)
	}
	if got := binary.BigEndian.Uint32(buf); got != magic {
		return nil, fmt.Errorf("%w: got 0x%08x, want 0x%08x", ErrBadMagic, got, magic)
	}
	if err := readFull(r, buf[4:]); err != nil {
		return nil, fmt.Errorf("header: %w", err)
	}
	dims := make([]int, ndim)
	for i := range dims {
		d := binary.BigEndian.Uint32(buf[4*(i+1):])
		if d > maxValues {
			return nil, fmt.Errorf("%w: dimension %d = %d", ErrTooLarge, i, d)
		}
		dims[i] = int(d)
	}
	return dims, nil
}

// readN reads exactly n bytes. The buffer grows with the data that
// arrives (at most twice what was read), so a header that announces 1 GiB
// before a short file allocates about as much as the file holds.
func readN(r io.Reader, n int) ([]byte, error) {
	b, err := io.ReadAll(io.LimitReader(r, int64(n)))
	if err != nil {
		return nil, err
	}
	if len(b) < n {
		return nil, fmt.Errorf("%w: got %d of %d bytes", ErrTruncated, len(b), n)
	}
	return b, nil
}

func readFull(r io.Reader, b []byte) error {
	n, err := io.ReadFull(r, b)
	if errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF) {
		return fmt.Errorf("%w: got %d of %d bytes", ErrTruncated, n, len(b))
	}
	return err
}

// cache holds decoded datasets by absolute directory and split.
var cache = struct {
	sync.Mutex
	m map[string]*cacheEntry
}{m: map[string]*cacheEntry{}}

type cacheEntry struct {
	ready chan struct{}
	ds    *Dataset
	err   error
}

// LoadFashionMNIST is ReadFashionMNIST with a process-wide cache keyed by the
// absolute directory and split: the first caller decodes (about 1 s for the
// 60000-record train split), concurrent and later callers share the result.
// Failures are not cached, so a caller may retry after fixing the files.
// The returned Dataset is shared and must not be modified.
func LoadFashionMNIST(dir, split string) (*Dataset, error) {
	if _, _, err := FileNames(split); err != nil {
		return nil, err
	}
	abs, err := filepath.Abs(dir)
	if err != nil {
		return nil, fmt.Errorf("dataset: %w", err)
	}
	if split == "t10k" {
		split = "test"
	}
	key := abs + "\x00" + split
	cache.Lock()
	e, ok := cache.m[key]
	if !ok {
		e = &cacheEntry{ready: make(chan struct{})}
		cache.m[key] = e
		cache.Unlock()
		e.ds, e.err = ReadFashionMNIST(abs, split)
		if e.err != nil {
			cache.Lock()
			delete(cache.m, key)
			cache.Unlock()
		}
		close(e.ready)
	} else {
		cache.Unlock()
		<-e.ready
	}
	return e.ds, e.err
}
