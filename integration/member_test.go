package integration

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	pb "github.com/raftps/raftps/api/raftpspb"
)

// memberJSON is one member of `member list -w json` and of the member
// commands' configurations.
type memberJSON struct {
	ID        string `json:"id"`
	Status    string `json:"status"`
	Suffrage  string `json:"suffrage"`
	RaftAddr  string `json:"raft_addr"`
	IsLearner bool   `json:"is_learner"`
}

func memberList(t *testing.T, c *Cluster, p *Proc) map[string]memberJSON {
	t.Helper()
	var out struct {
		Members []memberJSON `json:"members"`
	}
	if err := json.Unmarshal([]byte(mustCLI(t, c, p, "member", "list", "-w", "json")), &out); err != nil {
		t.Fatalf("member list -w json: %v", err)
	}
	m := map[string]memberJSON{}
	for _, x := range out.Members {
		m[x.ID] = x
	}
	return m
}

// onLeader runs fn against the current leader's client, again on the
// next leader while the answer is Unavailable (the leader moved).
func onLeader(t *testing.T, c *Cluster, fn func(ctx context.Context, cl pb.ClusterClient) error) error {
	t.Helper()
	var err error
	for range 5 {
		l := mustLeader(t, c, 20*time.Second)
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		err = fn(ctx, c.Client(l).Cluster)
		cancel()
		if status.Code(err) != codes.Unavailable {
			return err
		}
	}
	return err
}

// TestMemberAddLearnerPromote: `member add --learner` (through a
// follower's endpoint) adds a non-voter that member list shows as a
// learner; the leader does not make it a voter by itself once it runs,
// though the cluster has room for 5 voters; promote is refused while the
// learner has not started (FailedPrecondition) and succeeds once it is in
// sync; with 4 voters, killing the leader leaves a quorum (3 of 4) that
// elects a leader and takes writes. Refusals: an existing id or address
// is AlreadyExists, an unknown id NotFound, promoting a voter
// FailedPrecondition.
func TestMemberAddLearnerPromote(t *testing.T) {
	c := NewCluster(t, binPath, 3)
	c.StartAll()
	leader := mustLeader(t, c, 20*time.Second)
	var follower *Proc
	for _, p := range c.Procs {
		if p != leader {
			follower = p
		}
	}
	n4 := c.AddProc()

	var added struct {
		Member  memberJSON   `json:"member"`
		Members []memberJSON `json:"members"`
	}
	out := mustCLI(t, c, follower, "member", "add", n4.ID, "--peer-urls", n4.Raft, "--learner", "-w", "json")
	if err := json.Unmarshal([]byte(out), &added); err != nil {
		t.Fatalf("member add -w json: %v\n%s", err, out)
	}
	if m := added.Member; m.ID != n4.ID || m.RaftAddr != n4.Raft || m.Suffrage != "nonvoter" || !m.IsLearner || len(added.Members) != 4 {
		t.Fatalf("member add --learner: %s", out)
	}

	// Refusals, with their codes.
	for _, tc := range []struct {
		what string
		call func(ctx context.Context, cl pb.ClusterClient) error
		want codes.Code
	}{
		{"add an existing id", func(ctx context.Context, cl pb.ClusterClient) error {
			_, err := cl.MemberAdd(ctx, &pb.MemberAddRequest{Id: n4.ID, RaftAddr: "127.0.0.1:1", IsLearner: true})
			return err
		}, codes.AlreadyExists},
		{"add an existing address", func(ctx context.Context, cl pb.ClusterClient) error {
			_, err := cl.MemberAdd(ctx, &pb.MemberAddRequest{Id: "n9", RaftAddr: c.Procs[0].Raft})
			return err
		}, codes.AlreadyExists},
		{"promote an unknown id", func(ctx context.Context, cl pb.ClusterClient) error {
			_, err := cl.MemberPromote(ctx, &pb.MemberPromoteRequest{Id: "n9"})
			return err
		}, codes.NotFound},
		{"promote a voter", func(ctx context.Context, cl pb.ClusterClient) error {
			_, err := cl.MemberPromote(ctx, &pb.MemberPromoteRequest{Id: c.Procs[0].ID})
			return err
		}, codes.FailedPrecondition},
		{"promote a learner not started", func(ctx context.Context, cl pb.ClusterClient) error {
			_, err := cl.MemberPromote(ctx, &pb.MemberPromoteRequest{Id: n4.ID})
			return err
		}, codes.FailedPrecondition},
	} {
		err := onLeader(t, c, tc.call)
		if status.Code(err) != tc.want {
			t.Fatalf("%s: %v, want %s", tc.what, err, tc.want)
		}
		t.Logf("%s: %v", tc.what, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if _, errOut, err := c.CLI(ctx, follower, "member", "promote", n4.ID); err == nil || !strings.Contains(errOut, "FailedPrecondition") {
		t.Fatalf("raftps member promote of a learner not started: %v %q", err, errOut)
	}

	// Started, it replicates as a learner and stays one: the leader's
	// reconcile loop (every second) would make a plain server a voter.
	c.Start(n4)
	waitFor(t, 30*time.Second, n4.ID+" alive as a learner", func() bool {
		m := memberList(t, c, follower)[n4.ID]
		return m.Status == "alive" && m.Suffrage == "nonvoter" && m.IsLearner
	})
	mustCLI(t, c, leader, "kv", "put", "/learner/a", "1")
	waitFor(t, 20*time.Second, n4.ID+" applied the put", func() bool {
		out, _, err := c.CLI(ctx, n4, "kv", "get", "/learner/a", "--serializable")
		return err == nil && strings.TrimSpace(out) == "1"
	})
	time.Sleep(3 * time.Second) // three reconcile rounds
	if st := nodeStatus(t, c, follower); len(st.Voters) != 3 || !contains(st.Nonvoters, n4.ID) {
		t.Fatalf("learner %s after 3 s: voters %v, nonvoters %v", n4.ID, st.Voters, st.Nonvoters)
	}
	table := mustCLI(t, c, follower, "member", "list", "-w", "table")
	t.Logf("member list -w table:\n%s", table)
	if !strings.Contains(table, "| learner ") {
		t.Fatalf("member list -w table shows no learner:\n%s", table)
	}

	// Promote (retried while it is not yet in sync), through a follower.
	var promoted string
	waitFor(t, 30*time.Second, "member promote "+n4.ID, func() bool {
		out, errOut, err := c.CLI(ctx, follower, "member", "promote", n4.ID)
		promoted = out + errOut
		return err == nil
	})
	t.Logf("member promote: %s", strings.TrimSpace(promoted))
	st := nodeStatus(t, c, follower)
	if len(st.Voters) != 4 || !contains(st.Voters, n4.ID) {
		t.Fatalf("voters after promote: %v", st.Voters)
	}
	if m := memberList(t, c, follower)[n4.ID]; m.Suffrage != "voter" || m.IsLearner {
		t.Fatalf("member list after promote: %+v", m)
	}

	// 4 voters, one killed (the leader): 3 of 4 is a quorum.
	leader = mustLeader(t, c, 20*time.Second)
	c.Kill(leader)
	next := mustLeader(t, c, 30*time.Second)
	t.Logf("killed leader %s; new leader %s", leader.ID, next.ID)
	mustCLI(t, c, n4, "kv", "put", "/learner/b", "2")
	if got := strings.TrimSpace(mustCLI(t, c, next, "kv", "get", "/learner/b")); got != "2" {
		t.Fatalf("write after the leader's kill: %q", got)
	}
}
