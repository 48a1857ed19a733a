package dataset

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// copyFile copies src to dst (mode 0600).
func copyFile(t *testing.T, src, dst string) {
	t.Helper()
	b, err := os.ReadFile(src)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(dst, b, 0o600); err != nil {
		t.Fatal(err)
	}
}

// TestSymlinkOutOfDatasetDirRefused: a dataset directory whose files are
// symbolic links to files elsewhere (issue 32, hole 10: only the
// directory's path was resolved) is refused with ErrOutsideDir, naming
// the file; a link that stays inside the directory still reads.
func TestSymlinkOutOfDatasetDirRefused(t *testing.T) {
	src := filepath.Join("..", "..", "datasets", "fashion-mnist")
	outside := t.TempDir() // "elsewhere": not under the dataset directory
	dir := t.TempDir()
	for _, n := range []string{"t10k-images-idx3-ubyte.gz", "t10k-labels-idx1-ubyte.gz"} {
		copyFile(t, filepath.Join(src, n), filepath.Join(outside, n))
		if err := os.Symlink(filepath.Join(outside, n), filepath.Join(dir, n)); err != nil {
			t.Fatal(err)
		}
	}
	_, err := ReadFashionMNIST(dir, "test")
	if !errors.Is(err, ErrOutsideDir) {
		t.Fatalf("ReadFashionMNIST over links out of the directory = %v, want ErrOutsideDir", err)
	}
	t.Logf("refused: %v", err)

	// A relative link out (../) is refused the same way.
	rel := t.TempDir()
	sub := filepath.Join(rel, "ds")
	if err := os.Mkdir(sub, 0o700); err != nil {
		t.Fatal(err)
	}
	for _, n := range []string{"t10k-images-idx3-ubyte.gz", "t10k-labels-idx1-ubyte.gz"} {
		copyFile(t, filepath.Join(src, n), filepath.Join(rel, n))
		if err := os.Symlink(filepath.Join("..", n), filepath.Join(sub, n)); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := ReadFashionMNIST(sub, "test"); !errors.Is(err, ErrOutsideDir) {
		t.Fatalf("ReadFashionMNIST over ../ links = %v, want ErrOutsideDir", err)
	}

	// Links inside the directory are fine.
	in := t.TempDir()
	for _, n := range []string{"t10k-images-idx3-ubyte.gz", "t10k-labels-idx1-ubyte.gz"} {
		copyFile(t, filepath.Join(src, n), filepath.Join(in, "real-"+n))
		if err := os.Symlink("real-"+n, filepath.Join(in, n)); err != nil {
			t.Fatal(err)
		}
	}
	ds, err := ReadFashionMNIST(in, "test")
	if err != nil || ds.N != 10000 {
		t.Fatalf("links inside the directory: %v", err)
	}
}

// TestNonRegularDatasetFileRefused: a FIFO in place of a dataset file is
// refused at once (not read, not waited on).
func TestNonRegularDatasetFileRefused(t *testing.T) {
	dir := t.TempDir()
	if err := mkfifo(filepath.Join(dir, "t10k-images-idx3-ubyte.gz")); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		_, err := ReadFashionMNIST(dir, "test")
		done <- err
	}()
	select {
	case err := <-done:
		if !errors.Is(err, ErrOutsideDir) {
			t.Fatalf("ReadFashionMNIST over a FIFO = %v, want ErrOutsideDir", err)
		}
	case <-time.After(10 * time.Second):
		// Unblock the reader: open the FIFO for writing and close it.
		if w, err := os.OpenFile(filepath.Join(dir, "t10k-images-idx3-ubyte.gz"), os.O_WRONLY, 0); err == nil {
			w.Close()
		}
		t.Fatal("ReadFashionMNIST blocked on a FIFO for 10 s")
	}
}
