package master

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	pb "github.com/raftps/raftps/api/raftpspb"
)

// TestCheckFashionMNISTRefusesLinksOut: the submit check refuses a
// dataset directory whose files are symbolic links out of it (issue 32,
// hole 10), naming the file; the real directory passes.
func TestCheckFashionMNISTRefusesLinksOut(t *testing.T) {
	src, err := filepath.Abs(filepath.Join("..", "datasets", "fashion-mnist"))
	if err != nil {
		t.Fatal(err)
	}
	if err := CheckFashionMNIST(&pb.DatasetSpec{Path: src}); err != nil {
		t.Fatalf("the shipped dataset: %v", err)
	}
	dir := t.TempDir()
	for _, n := range []string{"train-images-idx3-ubyte.gz", "train-labels-idx1-ubyte.gz", "t10k-images-idx3-ubyte.gz", "t10k-labels-idx1-ubyte.gz"} {
		if err := os.Symlink(filepath.Join(src, n), filepath.Join(dir, n)); err != nil {
			t.Fatal(err)
		}
	}
	err = CheckFashionMNIST(&pb.DatasetSpec{Path: dir})
	if err == nil || !strings.Contains(err.Error(), "train-images-idx3-ubyte.gz") {
		t.Fatalf("links out of the dataset directory: %v, want a refusal naming the file", err)
	}
	t.Logf("refused: %v", err)
}
