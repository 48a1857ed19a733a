package node

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	pb "github.com/raftps/raftps/api/raftpspb"
	"github.com/raftps/raftps/gossip"
	"github.com/raftps/raftps/internal/testing/localcluster"
	"github.com/raftps/raftps/jobspec"
	"github.com/raftps/raftps/schema"
	"github.com/raftps/raftps/trainer/model"
	"github.com/raftps/raftps/trainer/trainertest"
)

// admissionSpec is a sync mlp job on the repository's Fashion-MNIST with
// the given hidden widths and slots (momentum: parameters x 2 on the
// pservers).
func admissionSpec(t *testing.T, name string, pservers int32, hidden ...int32) *pb.JobSpec {
	t.Helper()
	ds, err := filepath.Abs(filepath.Join("..", "datasets", "fashion-mnist"))
	if err != nil {
		t.Fatal(err)
	}
	spec := &pb.JobSpec{Name: name, Mode: pb.UpdateMode_UPDATE_MODE_SYNC, Seed: 1, Passes: 1, BatchSize: 64,
		NumPservers: pservers, NumVirtualShards: 64, DenseBlockSize: 1024,
		Model:   &pb.ModelSpec{Name: "mlp", Hidden: hidden},
		Dataset: &pb.DatasetSpec{Path: ds, Records: 1000}, RecordsPerTask: 500,
		Optimizer: &pb.OptimizerSpec{Name: "momentum", LearningRate: 0.05, Momentum: 0.9},
	}
	m, err := model.Build(spec.Model, 28*28, 10)
	if err != nil {
		t.Fatal(err)
	}
	spec.Params = m.Params()
	return spec
}

func submit(ctx context.Context, t *testing.T, n *Node, spec *pb.JobSpec) error {
	t.Helper()
	_, err := pb.NewMasterClient(dial(t, n.GRPCAddr())).SubmitJob(ctx, &pb.SubmitJobRequest{Spec: spec})
	return err
}

// TestAdmissionAtSubmit (issue 12 item 11): with small memory budgets a
// job whose state does not fit the live pservers' budgets, whose slot share
// does not fit the largest one, or whose model does not fit any trainer's
// is refused at submit with ResourceExhausted naming the need and the
// capacity, and nothing is created; a job that fits is accepted. Before,
// nodes had no budgets and all three were accepted (and the nodes would
// have allocated them).
func TestAdmissionAtSubmit(t *testing.T) {
	cfg := testConfig(t, "n1")
	cfg.Roles = []string{gossip.RoleServer, gossip.RolePServer, gossip.RoleTrainer}
	cfg.DatasetRoots = []string{localcluster.DatasetRoot()}
	// mlp 784-128-10: 101770 parameters, 814160 bytes with momentum.
	cfg.PServerMemoryBudget = 600 << 10
	cfg.TrainerMemoryBudget = 300 << 10
	n := mustOpen(t, cfg)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	need, err := jobspec.Need(admissionSpec(t, "x", 1, 128))
	if err != nil || need.State != 814160 {
		t.Fatalf("jobspec.Need(mlp 128) = %+v, %v; want 814160 state bytes", need, err)
	}
	for _, tc := range []struct {
		spec *pb.JobSpec
		want []string
	}{
		// 814160 > 614400, the only pserver's budget.
		{admissionSpec(t, "total", 1, 128), []string{"814160 bytes", "budgets total 614400 bytes", "--pserver-memory-budget"}},
		// mlp 784-64-10: 50890 parameters, 407120 bytes: fits the pserver
		// but not one trainer's 300 KiB (parameters and gradients).
		{admissionSpec(t, "trainer", 1, 64), []string{"needs 407120 bytes per trainer", "307200 bytes", "--trainer-memory-budget"}},
	} {
		err := submit(ctx, t, n, tc.spec)
		if status.Code(err) != codes.ResourceExhausted {
			t.Fatalf("submit %s: %v, want ResourceExhausted", tc.spec.Name, err)
		}
		for _, w := range tc.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("submit %s: %v, want it to name %q", tc.spec.Name, err, w)
			}
		}
		t.Logf("%s: %v", tc.spec.Name, err)
		if _, ok := n.Store().FSM().Jobs().Job(tc.spec.Name); ok {
			t.Fatalf("job %s exists after a refused submit", tc.spec.Name)
		}
	}
	// mlp 784-8-10: 6370 parameters, 50960 bytes: fits both.
	if err := submit(ctx, t, n, admissionSpec(t, "fits", 1, 8)); err != nil {
		t.Fatalf("submit of a job that fits: %v", err)
	}
}

// TestSlotOverBudgetNotClaimed (issue 12 item 11): a job that passes
// submit (its state fits the pservers' total budget) but not what this
// node's budget has left after another job's slot is not claimed: no slot
// record, and a SLOT_NOT_CLAIMED event on the job names the need, the
// budget and what is left; once the first job ends, the slot fits and is
// claimed. Before, the node claimed every slot whatever its memory.
func TestSlotOverBudgetNotClaimed(t *testing.T) {
	cfg := testConfig(t, "n1")
	cfg.Roles = []string{gossip.RoleServer, gossip.RolePServer}
	cfg.DatasetRoots = []string{localcluster.DatasetRoot()}
	cfg.PServerMemoryBudget = 600 << 10 // 614400
	n := mustOpen(t, cfg)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	claimed := func(job string) bool {
		key := []byte(schema.SlotKey(job, 0))
		resp, err := n.Store().FSM().Range(&pb.RangeRequest{Key: key})
		return err == nil && len(resp.Kvs) == 1
	}
	waitFor := func(what string, cond func() bool) {
		t.Helper()
		for deadline := time.Now().Add(30 * time.Second); !cond(); time.Sleep(50 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("not within 30 s: %s", what)
			}
		}
	}
	// mlp 784-64-10 with momentum: 407120 bytes in its one slot.
	if err := submit(ctx, t, n, admissionSpec(t, "a", 1, 64)); err != nil {
		t.Fatalf("submit a: %v", err)
	}
	waitFor("slot 0 of a claimed", func() bool { return claimed("a") })
	if err := submit(ctx, t, n, admissionSpec(t, "b", 1, 64)); err != nil {
		t.Fatalf("submit b (fits the total budget): %v", err)
	}
	var msg string
	waitFor("a SLOT_NOT_CLAIMED event on b", func() bool {
		evs, err := n.Store().FSM().Jobs().Events("b", 0, 0)
		for _, e := range evs {
			if e.Type == pb.JobEvent_SLOT_NOT_CLAIMED {
				msg = e.Message
			}
		}
		return err == nil && msg != ""
	})
	t.Logf("event: %s", msg)
	for _, w := range []string{"slot 0 not claimed by n1", "needs 407120 bytes", "budget of 614400 bytes has 207280 left"} {
		if !strings.Contains(msg, w) {
			t.Errorf("event %q does not say %q", msg, w)
		}
	}
	if claimed("b") {
		t.Fatal("slot 0 of b claimed over the budget")
	}
	if _, err := pb.NewMasterClient(dial(t, n.GRPCAddr())).CancelJob(ctx, &pb.CancelJobRequest{Name: "a"}); err != nil {
		t.Fatalf("cancel a: %v", err)
	}
	waitFor("slot 0 of b claimed once a ended", func() bool { return claimed("b") })
}

// TestTrainerOverBudgetNotStarted (issue 12 item 11): a trainer node
// whose --trainer-memory-budget holds one trainer of a job starts it, and
// for a second job of the same size (admitted: one trainer fits the
// budget) starts none and records a TRAINER_NOT_STARTED event naming the
// need, the budget and what is left. Before, it started a trainer (and
// allocated its model) for every running job.
func TestTrainerOverBudgetNotStarted(t *testing.T) {
	cfg := testConfig(t, "n1")
	cfg.Roles = []string{gossip.RoleServer, gossip.RoleTrainer}
	// The refusal of b waits for a's trainer, which the agent starts only
	// after loading the dataset: the 60000 records of Fashion-MNIST took
	// over 90 s under the race detector beside CPU hogs. The 1000 records
	// the jobs use, in the same layout, load at once.
	ds := t.TempDir()
	if err := trainertest.WriteSynthetic(ds, 1000, 100, 1); err != nil {
		t.Fatal(err)
	}
	cfg.DatasetRoots = []string{ds}
	cfg.TrainerMemoryBudget = 500 << 10 // 512000
	n := mustOpen(t, cfg)
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	trainers := func(job string) int {
		key, end := schema.PrefixRange(schema.TrainerPrefix(job))
		resp, err := n.Store().FSM().Range(&pb.RangeRequest{Key: key, RangeEnd: end})
		if err != nil {
			return -1
		}
		return len(resp.Kvs)
	}
	waitFor := func(what string, cond func() bool) {
		t.Helper()
		for deadline := time.Now().Add(90 * time.Second); !cond(); time.Sleep(50 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("not within 90 s: %s", what)
			}
		}
	}
	// mlp 784-64-10: 50890 parameters, 407120 bytes per trainer. The
	// agent starts trainers job by job in name order, so a's first (after
	// loading the dataset, slow under the race detector: hence no wait on
	// its registration, only on the refusal that needs it).
	for _, name := range []string{"a", "b"} {
		spec := admissionSpec(t, name, 1, 64)
		spec.Dataset.Path = ds
		if err := submit(ctx, t, n, spec); err != nil {
			t.Fatalf("submit %s (one trainer fits the budget): %v", name, err)
		}
	}
	var msg string
	waitFor("a TRAINER_NOT_STARTED event on b", func() bool {
		evs, err := n.Store().FSM().Jobs().Events("b", 0, 0)
		for _, e := range evs {
			if e.Type == pb.JobEvent_TRAINER_NOT_STARTED {
				msg = e.Message
			}
		}
		return err == nil && msg != ""
	})
	t.Logf("event: %s", msg)
	for _, w := range []string{"no trainer started on n1", "needs 407120 bytes", "budget of 512000 bytes has 104880 left"} {
		if !strings.Contains(msg, w) {
			t.Errorf("event %q does not say %q", msg, w)
		}
	}
	if got := trainers("b"); got != 0 {
		t.Fatalf("%d trainers of b registered over the budget", got)
	}
}
