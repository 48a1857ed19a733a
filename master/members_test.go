package master

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/hashicorp/raft"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	pb "github.com/raftps/raftps/api/raftpspb"
	"github.com/raftps/raftps/gossip"
	"github.com/raftps/raftps/schema"
)

func suffrageIn(t *testing.T, svc *Service, id string) (raft.ServerSuffrage, bool) {
	t.Helper()
	servers, err := svc.store.Configuration()
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range servers {
		if string(s.ID) == id {
			return s.Suffrage, true
		}
	}
	return 0, false
}

// TestMemberPromoteCaughtUp: a learner is promoted only when it answers
// in the leader's term within PromoteMaxLag entries of the leader's last
// index; every other answer is FailedPrecondition and changes nothing.
// The reconcile loop keeps an alive learner with the server role a
// non-voter (it would promote a plain one: room for 5 voters). Remove
// deletes the learner mark.
func TestMemberPromoteCaughtUp(t *testing.T) {
	s := openStore(t)
	mem := &fakeMembers{members: []gossip.Member{member("n1", gossip.StatusAlive, s.Addr(), gossip.RoleServer)}}
	svc := NewService(s, mem)
	ctx := ctxT(t, 20*time.Second)
	// An address nobody listens on: the non-voter never answers Raft,
	// which a single voter's quorum does not need.
	const addr = "127.0.0.1:1"
	if _, err := svc.MemberAdd(ctx, &pb.MemberAddRequest{Id: "n2", RaftAddr: addr, IsLearner: true}); err != nil {
		t.Fatal(err)
	}
	if sf, ok := suffrageIn(t, svc, "n2"); !ok || sf != raft.Nonvoter {
		t.Fatalf("n2 after member add --learner: in configuration %v, suffrage %v", ok, sf)
	}
	mem.members = append(mem.members, member("n2", gossip.StatusAlive, addr, gossip.RoleServer))
	newMaster(s, mem).reconcile(ctx)
	if sf, _ := suffrageIn(t, svc, "n2"); sf != raft.Nonvoter {
		t.Fatalf("reconcile promoted learner n2: %v", sf)
	}
	ms, err := svc.Members(ctx, &pb.MembersRequest{})
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range ms.Members {
		if m.Id == "n2" && (!m.IsLearner || m.Suffrage != "nonvoter") {
			t.Fatalf("Members: n2 %+v, want a nonvoter learner", m)
		}
	}

	for i := 0; s.Stats().LastLogIndex <= PromoteMaxLag+10; i++ {
		put(t, s, "/fill", []byte{byte(i)}, 0)
	}
	last := s.Stats().LastLogIndex
	term := s.Stats().Term
	for _, tc := range []struct {
		name string
		p    *pb.RaftProgressResponse
		err  error
	}{
		{"unreachable", nil, errors.New("connection refused")},
		{"far behind", &pb.RaftProgressResponse{Id: "n2", Term: term, LastLogIndex: 1}, nil},
		{"lagging by one more than allowed", &pb.RaftProgressResponse{Id: "n2", Term: term, LastLogIndex: last - PromoteMaxLag - 1}, nil},
		{"older term", &pb.RaftProgressResponse{Id: "n2", Term: term - 1, LastLogIndex: last}, nil},
	} {
		svc.Progress = func(context.Context, string) (*pb.RaftProgressResponse, error) { return tc.p, tc.err }
		_, err := svc.MemberPromote(ctx, &pb.MemberPromoteRequest{Id: "n2"})
		if status.Code(err) != codes.FailedPrecondition {
			t.Fatalf("%s: %v, want FailedPrecondition", tc.name, err)
		}
		if sf, _ := suffrageIn(t, svc, "n2"); sf != raft.Nonvoter {
			t.Fatalf("%s: refused promote changed n2 to %v", tc.name, sf)
		}
	}
	// Gossip no longer sees it alive: refused before asking.
	mem.members[1].Status = gossip.StatusDead
	asked := false
	svc.Progress = func(context.Context, string) (*pb.RaftProgressResponse, error) {
		asked = true
		return &pb.RaftProgressResponse{Term: term, LastLogIndex: last}, nil
	}
	if _, err := svc.MemberPromote(ctx, &pb.MemberPromoteRequest{Id: "n2"}); status.Code(err) != codes.FailedPrecondition || asked {
		t.Fatalf("promote of a learner dead in gossip: %v (asked %v)", err, asked)
	}

	if _, err := svc.MemberRemove(ctx, &pb.MemberRemoveRequest{Id: "n2"}); err != nil {
		t.Fatal(err)
	}
	if exists(t, s, schema.LearnerKey("n2")) {
		t.Fatal("member remove left the learner mark")
	}
	if _, ok := suffrageIn(t, svc, "n2"); ok {
		t.Fatal("n2 still in the configuration after member remove")
	}
}

func TestInSync(t *testing.T) {
	for _, tc := range []struct {
		term, last uint64
		p          *pb.RaftProgressResponse
		want       bool
	}{
		{5, 1000, &pb.RaftProgressResponse{Term: 5, LastLogIndex: 1000}, true},
		{5, 1000, &pb.RaftProgressResponse{Term: 5, LastLogIndex: 1000 - PromoteMaxLag}, true},
		{5, 1000, &pb.RaftProgressResponse{Term: 5, LastLogIndex: 1000 - PromoteMaxLag - 1}, false},
		{5, 10, &pb.RaftProgressResponse{Term: 5, LastLogIndex: 0}, true},      // a young log: no underflow
		{5, 1000, &pb.RaftProgressResponse{Term: 5, LastLogIndex: 1003}, true}, // appended since the leader's reading
		{5, 1000, &pb.RaftProgressResponse{Term: 4, LastLogIndex: 1000}, false},
		{5, 1000, &pb.RaftProgressResponse{Term: 6, LastLogIndex: 1000}, false},
	} {
		if got := inSync(tc.term, tc.last, tc.p); got != tc.want {
			t.Errorf("inSync(term %d, last %d, %v) = %v, want %v", tc.term, tc.last, tc.p, got, tc.want)
		}
	}
}
