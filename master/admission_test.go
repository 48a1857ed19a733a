package master

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"
	"time"

	pb "github.com/raftps/raftps/api/raftpspb"
	"github.com/raftps/raftps/fsm"
	"github.com/raftps/raftps/gossip"
	"github.com/raftps/raftps/jobspec"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// pserverMember is a live pserver node announcing budget bytes.
func pserverMember(id string, budget uint64) gossip.Member {
	m := member(id, gossip.StatusAlive, id+":7001", gossip.RoleServer, gossip.RolePServer)
	m.Meta.PServerBudget = budget
	return m
}

// TestAdmitPacksSlots (issue 33 defect 5): slots are never split and each
// agent claims only whole slots that fit its budget, so a 3-slot job on two
// nodes whose budgets hold 1.5 slots each (3 slots of bytes in all, each
// slot under the largest budget) is refused with ErrNoCapacity saying 2
// slots fit; with a third node's budget it is admitted. Before, the sum
// and the largest budget were checked and the job was admitted, its third
// slot never claimed.
func TestAdmitPacksSlots(t *testing.T) {
	spec := jobSpec("packed")
	spec.NumPservers = 3
	spec.Model = &pb.ModelSpec{Name: jobspec.ModelExternal}
	spec.Params = []*pb.ParamSpec{{Name: "w", Shape: []int64{3, 1000}}}
	v, err := jobspec.ValidateSpec(spec)
	if err != nil {
		t.Fatal(err)
	}
	need, err := jobspec.Need(v)
	if err != nil || need.Slot != 4000 { // 3000 float32 with sgd over 3 slots
		t.Fatalf("jobspec.Need = %+v, %v; want 4000 bytes per slot", need, err)
	}
	oneAndHalf := uint64(need.Slot) * 3 / 2
	mem := &fakeMembers{members: []gossip.Member{pserverMember("n1", oneAndHalf), pserverMember("n2", oneAndHalf)}}
	svc := NewService(nil, mem)
	err = svc.admit(spec)
	if !errors.Is(err, ErrNoCapacity) {
		t.Fatalf("admit 3 slots of %d bytes into two budgets of %d: %v, want ErrNoCapacity", need.Slot, oneAndHalf, err)
	}
	t.Logf("refused: %v", err)
	for _, w := range []string{"3 slots", "hold only 2 whole slots", "--pserver-memory-budget"} {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("refusal %q does not say %q", err, w)
		}
	}
	mem.members = append(mem.members, pserverMember("n3", uint64(need.Slot)))
	if err := svc.admit(spec); err != nil {
		t.Fatalf("admit with a third node holding one slot: %v", err)
	}
}

// TestAdmitReplicas (issue 34): a job with replicas R needs R copies of
// each slot on R distinct nodes: replicas 2 on one live pserver node is
// refused naming both counts; on two nodes whose budgets hold one slot
// each, a 2-slot job with replicas 2 (4 slot copies) is refused, and
// admitted with budgets of two slots each.
func TestAdmitReplicas(t *testing.T) {
	spec := jobSpec("replicated")
	spec.NumPservers = 2
	spec.Replicas = 2
	spec.Model = &pb.ModelSpec{Name: jobspec.ModelExternal}
	spec.Params = []*pb.ParamSpec{{Name: "w", Shape: []int64{2, 1000}}}
	v, err := jobspec.ValidateSpec(spec)
	if err != nil {
		t.Fatal(err)
	}
	need, err := jobspec.Need(v)
	if err != nil || need.Slot != 4000 {
		t.Fatalf("jobspec.Need = %+v, %v; want 4000 bytes per slot", need, err)
	}
	one := uint64(need.Slot)
	mem := &fakeMembers{members: []gossip.Member{pserverMember("n1", 8*one)}}
	svc := NewService(nil, mem)
	err = svc.admit(spec)
	if !errors.Is(err, ErrNoCapacity) || !strings.Contains(err.Error(), "2 replicas") || !strings.Contains(err.Error(), "only 1 live pserver nodes") {
		t.Fatalf("admit replicas 2 on one node: %v, want ErrNoCapacity naming 2 replicas and 1 node", err)
	}
	mem.members = []gossip.Member{pserverMember("n1", one), pserverMember("n2", one)}
	err = svc.admit(spec)
	if !errors.Is(err, ErrNoCapacity) || !strings.Contains(err.Error(), "4 slots") || !strings.Contains(err.Error(), "hold only 2 whole slots") {
		t.Fatalf("admit 2x2 slot copies into two one-slot budgets: %v, want ErrNoCapacity (4 slots, 2 fit)", err)
	}
	mem.members = []gossip.Member{pserverMember("n1", 2*one), pserverMember("n2", 2*one)}
	if err := svc.admit(spec); err != nil {
		t.Fatalf("admit 2x2 slot copies into two two-slot budgets: %v", err)
	}
}

// TestDefaultReplicasByCapacity (issue 34): a submission that leaves
// replicas 0 gets CapacitySlotReplicas (2) when two live pserver nodes can
// hold two copies of every slot, else 1 with the reason, and the choice is
// stored in the job's spec (replicas_default): a snapshot restored into a
// new FSM and a restart of the store keep it, and a later change of the
// members does not recompute it. An explicit replicas is kept as given
// (with a submitted replicas_default cleared), and out of range is
// InvalidArgument.
func TestDefaultReplicasByCapacity(t *testing.T) {
	dir := t.TempDir()
	s := openStoreAt(t, dir)
	mem := &fakeMembers{}
	svc := NewService(s, mem)
	svc.CheckDataset = nil
	ctx := ctxT(t, 30*time.Second)
	spec := func(name string, replicas int32) *pb.JobSpec {
		sp := jobSpec(name)
		sp.NumPservers = 2
		sp.Replicas = replicas
		sp.Model = &pb.ModelSpec{Name: jobspec.ModelExternal}
		sp.Params = []*pb.ParamSpec{{Name: "w", Shape: []int64{2, 1000}}}
		return sp
	}
	const slot = 4000 // 1000 float32 with sgd per slot (TestAdmitReplicas)
	for _, tc := range []struct {
		name     string
		members  []gossip.Member
		replicas int32 // submitted
		want     int32
		reason   string
	}{
		{"none", nil, 0, 1, "no live pserver node"},
		{"one-node", []gossip.Member{pserverMember("n1", 100*slot)}, 0, 1, "only 1 pserver node"},
		{"one-copy", []gossip.Member{pserverMember("n1", slot), pserverMember("n2", slot)}, 0, 1, "pserver budgets hold fewer than 2 copies of each slot"},
		{"dead-peer", []gossip.Member{pserverMember("n1", 100*slot), {Status: gossip.StatusDead, Meta: pserverMember("n2", 100*slot).Meta}}, 0, 1, "only 1 pserver node"},
		{"capacity", []gossip.Member{pserverMember("n1", 2*slot), pserverMember("n2", 2*slot)}, 0, 2, "capacity for 2"},
		{"explicit-1", []gossip.Member{pserverMember("n1", 100*slot), pserverMember("n2", 100*slot)}, 1, 1, ""},
		{"explicit-3", []gossip.Member{pserverMember("n1", 100*slot), pserverMember("n2", 100*slot), pserverMember("n3", 100*slot)}, 3, 3, ""},
	} {
		mem.mu.Lock()
		mem.members = tc.members
		mem.mu.Unlock()
		sp := spec(tc.name, tc.replicas)
		if tc.replicas != 0 {
			sp.ReplicasDefault = "capacity for 2" // the master's to write: cleared
		}
		resp, err := svc.SubmitJob(ctx, &pb.SubmitJobRequest{Spec: sp})
		if err != nil {
			t.Fatalf("%s: submit: %v", tc.name, err)
		}
		if got := resp.Status.GetSpec(); got.GetReplicas() != tc.want || got.GetReplicasDefault() != tc.reason {
			t.Errorf("%s: replicas %d (%q), want %d (%q)", tc.name, got.GetReplicas(), got.GetReplicasDefault(), tc.want, tc.reason)
		}
		if sp.GetReplicas() != tc.replicas {
			t.Errorf("%s: the caller's spec was changed to replicas %d", tc.name, sp.GetReplicas())
		}
	}
	for _, r := range []int32{-1, jobspec.MaxSlotReplicas + 1} {
		_, err := svc.SubmitJob(ctx, &pb.SubmitJobRequest{Spec: spec(fmt.Sprintf("bad%d", r), r)})
		if status.Code(err) != codes.InvalidArgument || !strings.Contains(status.Convert(err).Message(), "replicas") {
			t.Errorf("replicas %d: %v, want InvalidArgument naming replicas", r, err)
		}
	}

	// Not recomputed: with one node left, the job keeps its 2 and its reason.
	mem.mu.Lock()
	mem.members = []gossip.Member{pserverMember("n1", 100*slot)}
	mem.mu.Unlock()
	check := func(where string, spec *pb.JobSpec) {
		t.Helper()
		if spec.GetReplicas() != 2 || spec.GetReplicasDefault() != "capacity for 2" {
			t.Fatalf("%s: job capacity has replicas %d (%q), want 2 (capacity for 2)", where, spec.GetReplicas(), spec.GetReplicasDefault())
		}
	}
	got, err := svc.GetJob(ctx, &pb.GetJobRequest{Name: "capacity"})
	if err != nil {
		t.Fatal(err)
	}
	check("GetJob", got.Status.GetSpec())

	snap, err := s.FSM().Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	var buf memSink
	if err := snap.Persist(&buf); err != nil {
		t.Fatal(err)
	}
	restored := fsm.New(nil)
	if err := restored.Restore(io.NopCloser(&buf.Buffer)); err != nil {
		t.Fatal(err)
	}
	j, ok := restored.Jobs().Job("capacity")
	if !ok {
		t.Fatal("job lost in the snapshot")
	}
	check("restored snapshot", j.GetSpec())

	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s = openStoreAt(t, dir)
	j, ok = s.FSM().Jobs().Job("capacity")
	if !ok {
		t.Fatal("job lost over the restart")
	}
	check("restart", j.GetSpec())
}

type memSink struct{ bytes.Buffer }

func (*memSink) ID() string    { return "test" }
func (*memSink) Cancel() error { return nil }
func (*memSink) Close() error  { return nil }
