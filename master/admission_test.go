package master

import (
	"errors"
	"strings"
	"testing"

	pb "github.com/raftps/raftps/api/raftpspb"
	"github.com/raftps/raftps/gossip"
	"github.com/raftps/raftps/jobspec"
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
