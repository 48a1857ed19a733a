package service

import (
	"context"

	pb "github.com/raftps/raftps/api/raftpspb"
	"github.com/raftps/raftps/api/rpctypes"
)

// RaftProgress reports this node's Raft term, last log index and applied
// index. Unlike the rest of Internal it needs no leader: the leader asks a
// learner before promoting it (Consul's autopilot asks every server for
// its stats the same way).
func (in *internal) RaftProgress(context.Context, *pb.RaftProgressRequest) (*pb.RaftProgressResponse, error) {
	st := in.s.store.Stats()
	return &pb.RaftProgressResponse{Id: st.ID, Term: st.Term, LastLogIndex: st.LastLogIndex, AppliedIndex: st.AppliedIndex}, nil
}

// RaftProgress asks node nodeID (resolved like the leader, from gossip)
// for its Raft progress over the Internal service. Errors are the node's
// status mapped back (rpctypes.FromStatus), or a resolution failure when
// gossip has no node-to-node address for it.
func (f *Forwarder) RaftProgress(ctx context.Context, nodeID string) (*pb.RaftProgressResponse, error) {
	c, err := f.client(nodeID)
	if err != nil {
		return nil, err
	}
	ctx, cancel := withDefaultTimeout(ctx)
	defer cancel()
	resp, err := c.RaftProgress(ctx, &pb.RaftProgressRequest{})
	if err != nil {
		return nil, rpctypes.FromStatus(err)
	}
	return resp, nil
}
