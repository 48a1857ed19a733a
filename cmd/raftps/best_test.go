package main

import (
	"bufio"
	"encoding/binary"
	"encoding/json"
	"io"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	pb "github.com/raftps/raftps/api/raftpspb"
	"github.com/raftps/raftps/internal/localcluster"
	"github.com/raftps/raftps/pserver/checkpoint"
	"github.com/raftps/raftps/trainer/dataset"
	"github.com/raftps/raftps/trainer/model"
)

// readExport reads every parameter of a raftps export file (FORMAT.md).
func readExport(t *testing.T, path string) (*checkpoint.ExportHeader, map[string][]float32) {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	r := bufio.NewReader(f)
	h, err := checkpoint.ReadExportHeader(r)
	if err != nil {
		t.Fatal(err)
	}
	params := map[string][]float32{}
	for _, p := range h.Params { // contiguous, in header order
		b := make([]byte, p.Bytes)
		if _, err := io.ReadFull(r, b); err != nil {
			t.Fatalf("export data of %s: %v", p.Name, err)
		}
		v := make([]float32, p.Bytes/4)
		for i := range v {
			v[i] = math.Float32frombits(binary.LittleEndian.Uint32(b[4*i:]))
		}
		params[p.Name] = v
	}
	return h, params
}

// TestCheckpointBestIsEvaluatedVersion (issue 33, checkpoint best): the
// version `checkpoint best` names holds the parameters its accuracy was
// measured on: exported and evaluated again on the test split it gives
// the listed accuracy exactly. Checkpoints every 7 steps never fall on a
// pass's last step (40), where the eval measures. Before, the accuracy was
// attached to the newest periodic checkpoint before the eval (step 35 or
// 75), another model.
func TestCheckpointBestIsEvaluatedVersion(t *testing.T) {
	n := trainingNode(t)
	ep := []string{"--endpoints", n.GRPCAddr(), "--command-timeout", "20s", "-w", "json"}
	ds := filepath.Join(localcluster.DatasetRoot(), "fashion-mnist")
	out, err := runFor(5*time.Minute, append(ep, "train", "--name", "best", "--model", "mlp", "--hidden", "16", "--dataset", ds,
		"--records", "2000", "--records-per-task", "500", "--passes", "2", "--batch-size", "50", "--pservers", "1",
		"--replicas", "1", "--checkpoint-steps", "7", "--target-accuracy", "0", "--optimizer", "sgd", "--lr", "0.1")...)
	if err != nil {
		t.Fatalf("train: %v\n%s", err, out)
	}
	// The checkpoint of the final parameters is committed as the job ends:
	// wait for a version with a metric, at most 60 s.
	var best checkpoint.VersionInfo
	for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(200 * time.Millisecond) {
		out, err = runFor(30*time.Second, append(ep, "checkpoint", "best", "best")...)
		if err == nil {
			if err := json.Unmarshal([]byte(out), &best); err != nil {
				t.Fatalf("checkpoint best -w json: %v\n%s", err, out)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("checkpoint best: %v (no version with a metric within 60 s)", err)
		}
	}
	if best.Metric == nil {
		t.Fatalf("checkpoint best: %+v, no metric", best)
	}
	t.Logf("best: version %d step %d accuracy %v", best.Version, best.Step, *best.Metric)
	file := filepath.Join(t.TempDir(), "best.rpsx")
	if out, err := runFor(60*time.Second, append(ep, "checkpoint", "export", "best", strconv.FormatInt(best.Version, 10), "--out", file)...); err != nil {
		t.Fatalf("export: %v\n%s", err, out)
	}
	h, params := readExport(t, file)
	if h.Version != best.Version || h.Step != best.Step {
		t.Fatalf("export header version %d step %d, want %d %d", h.Version, h.Step, best.Version, best.Step)
	}
	m, err := model.Build(&pb.ModelSpec{Name: "mlp", Hidden: []int32{16}}, 28*28, 10)
	if err != nil {
		t.Fatal(err)
	}
	test, err := dataset.LoadFashionMNIST(ds, "test")
	if err != nil {
		t.Fatal(err)
	}
	_, acc, err := model.Evaluate(m, model.Params{Dense: params}, test)
	if err != nil {
		t.Fatal(err)
	}
	if acc != *best.Metric {
		t.Fatalf("version %d (step %d) is listed at accuracy %v but its parameters evaluate to %v", best.Version, best.Step, *best.Metric, acc)
	}
}
