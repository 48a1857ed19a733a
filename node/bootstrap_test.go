package node

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/hashicorp/raft"

	pb "github.com/raftps/raftps/api/raftpspb"
)

// TestPeersInCluster: bootstrap-expect bootstraps only when every other
// expected server answered that it has no cluster. A server that cannot be
// asked leaves the state unknown (an error, and no bootstrap this round):
// before, a node whose peers did not answer within a second bootstrapped
// beside their cluster, with an entry 1 of its own.
func TestPeersInCluster(t *testing.T) {
	servers := []raft.Server{{ID: "n1"}, {ID: "n2"}, {ID: "n3"}}
	empty := &pb.StatusResponse{}
	inCluster := &pb.StatusResponse{Voters: []string{"n1", "n2"}}
	leaderOnly := &pb.StatusResponse{Leader: "n2"}
	down := errors.New("connection refused")
	cases := []struct {
		name    string
		answers map[string]*pb.StatusResponse // a missing id: the call fails
		in      bool
		unknown string // "" if no error; else a part of it
	}{
		{"all fresh", map[string]*pb.StatusResponse{"n2": empty, "n3": empty}, false, ""},
		{"one has voters", map[string]*pb.StatusResponse{"n2": empty, "n3": inCluster}, true, ""},
		{"one knows a leader", map[string]*pb.StatusResponse{"n2": leaderOnly, "n3": empty}, true, ""},
		{"one does not answer", map[string]*pb.StatusResponse{"n2": empty}, false, "n3"},
		{"none answers", map[string]*pb.StatusResponse{}, false, "n2"},
		{"an answer that a cluster exists outweighs one that fails", map[string]*pb.StatusResponse{"n3": inCluster}, true, ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var asked []string
			status := func(_ context.Context, id string) (*pb.StatusResponse, error) {
				asked = append(asked, id)
				if st, ok := c.answers[id]; ok {
					return st, nil
				}
				return nil, down
			}
			in, err := peersInCluster(context.Background(), "n1", servers, status)
			if in != c.in {
				t.Errorf("in cluster %v, want %v", in, c.in)
			}
			switch {
			case c.unknown == "" && err != nil:
				t.Errorf("error %v, want none", err)
			case c.unknown != "" && (err == nil || !errors.Is(err, down) || !strings.Contains(err.Error(), c.unknown)):
				t.Errorf("error %v, want one naming %s and wrapping %v", err, c.unknown, down)
			}
			for _, id := range asked {
				if id == "n1" {
					t.Errorf("asked itself: %v", asked)
				}
			}
		})
	}
}
