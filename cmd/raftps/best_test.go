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
	"github.com/raftps/raftps/internal/testing/localcluster"
	"github.com/raftps/raftps/pserver/checkpoint"
	"github.com/raftps/raftps/schema"
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

// TestCheckpointBestIsEvaluatedVersion (issue 33, checkpoint best): every
// pass's metric names a checkpoint version holding the parameters its
// accuracy was measured on, and each of them, `checkpoint best` first,
// exported and evaluated again on the test split gives the listed accuracy
// exactly. Checkpoints every 7 steps never fall on a pass's last step (40,
// 80, 120), where the eval measures: the eval's pull checkpoints them
// (PullRequest.checkpoint). Before, the accuracy was attached to the
// newest periodic checkpoint before the eval (step 35 or 75), another
// model; then only the last pass, checkpointed as the job ended, had a
// version.
func TestCheckpointBestIsEvaluatedVersion(t *testing.T) {
	n := trainingNode(t)
	ep := []string{"--endpoints", n.GRPCAddr(), "--command-timeout", "20s", "-w", "json"}
	ds := filepath.Join(localcluster.DatasetRoot(), "fashion-mnist")
	const passes = 3
	out, err := runFor(5*time.Minute, append(ep, "train", "--name", "best", "--model", "mlp", "--hidden", "16", "--dataset", ds,
		"--records", "2000", "--records-per-task", "500", "--passes", strconv.Itoa(passes), "--batch-size", "50", "--pservers", "2",
		"--replicas", "1", "--checkpoint-steps", "7", "--keep-max", "0", "--target-accuracy", "0", "--optimizer", "sgd", "--lr", "0.1")...)
	if err != nil {
		t.Fatalf("train: %v\n%s", err, out)
	}
	// The checkpoints of the evaluated parameters are committed while the
	// job goes on (the last one maybe after it ended): wait until every
	// pass's metric names a version, at most 60 s.
	var metrics []*pb.PassMetric
	for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(200 * time.Millisecond) {
		metrics = nil
		for _, j := range n.Store().FSM().Jobs().Jobs() {
			if j.Name == "best" {
				metrics = j.Metrics
			}
		}
		named := 0
		for _, m := range metrics {
			if m.CheckpointVersion != 0 {
				named++
			}
		}
		if len(metrics) == passes && named == passes {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("pass metrics %v: want %d, each naming a checkpoint version", metrics, passes)
		}
	}
	m, err := model.Build(&pb.ModelSpec{Name: "mlp", Hidden: []int32{16}}, 28*28, 10)
	if err != nil {
		t.Fatal(err)
	}
	test, err := dataset.LoadFashionMNIST(ds, "test")
	if err != nil {
		t.Fatal(err)
	}
	// evaluate exports version and returns the accuracy of its parameters.
	evaluate := func(version, step int64) float64 {
		t.Helper()
		file := filepath.Join(t.TempDir(), "v.rpsx")
		if out, err := runFor(60*time.Second, append(ep, "checkpoint", "export", "best", strconv.FormatInt(version, 10), "--out", file)...); err != nil {
			t.Fatalf("export %d: %v\n%s", version, err, out)
		}
		h, params := readExport(t, file)
		if h.Version != version || h.Step != step {
			t.Fatalf("export header version %d step %d, want %d %d", h.Version, h.Step, version, step)
		}
		_, acc, err := model.Evaluate(m, model.Params{Dense: params}, test)
		if err != nil {
			t.Fatal(err)
		}
		return acc
	}
	var best checkpoint.VersionInfo
	out, err = runFor(30*time.Second, append(ep, "checkpoint", "best", "best")...)
	if err != nil {
		t.Fatalf("checkpoint best: %v\n%s", err, out)
	}
	if err := json.Unmarshal([]byte(out), &best); err != nil {
		t.Fatalf("checkpoint best -w json: %v\n%s", err, out)
	}
	if best.Metric == nil {
		t.Fatalf("checkpoint best: %+v, no metric", best)
	}
	t.Logf("best: version %d step %d accuracy %v", best.Version, best.Step, *best.Metric)
	if acc := evaluate(best.Version, best.Step); acc != *best.Metric {
		t.Fatalf("best version %d (step %d) is listed at accuracy %v but its parameters evaluate to %v", best.Version, best.Step, *best.Metric, acc)
	}
	for _, pm := range metrics {
		if pm.CheckpointVersion%schema.EpochStride != pm.Step {
			t.Fatalf("pass %d: metric of step %d names version %d", pm.Pass, pm.Step, pm.CheckpointVersion)
		}
		if acc := evaluate(pm.CheckpointVersion, pm.Step); acc != pm.TestAccuracy {
			t.Fatalf("pass %d: version %d (step %d) is listed at accuracy %v but its parameters evaluate to %v",
				pm.Pass, pm.CheckpointVersion, pm.Step, pm.TestAccuracy, acc)
		}
	}
}
