package master

import (
	"context"
	"fmt"

	"github.com/hashicorp/raft"

	pb "github.com/raftps/raftps/api/raftpspb"
	"github.com/raftps/raftps/api/rpctypes"
	"github.com/raftps/raftps/fsm"
	"github.com/raftps/raftps/gossip"
)

// MemberRemove removes a server that is gone for good from the Raft
// configuration (Consul's `operator raft remove-peer`). The leader
// removes dead servers by itself, but never below 3 voters; when a
// machine will not come back, an operator removes it here (and a
// replacement joins with --join). Errors: InvalidArgument for an empty
// id; NotFound for an id not in the configuration; FailedPrecondition for
// a member alive in gossip (stop it: SIGTERM leaves and is removed) or
// this node itself; Unavailable (not leader) if this node is not the
// leader: call the leader (`raftps member remove` does).
func (s *Service) MemberRemove(ctx context.Context, req *pb.MemberRemoveRequest) (*pb.MemberRemoveResponse, error) {
	id := req.GetId()
	if id == "" {
		return nil, rpctypes.ToStatus(fmt.Errorf("%w: id is required", fsm.ErrInvalid))
	}
	if !s.store.IsLeader() {
		return nil, rpctypes.ToStatus(fmt.Errorf("%w: member remove must reach the leader", rpctypes.ErrNotLeader))
	}
	if id == s.store.Stats().ID {
		return nil, rpctypes.ToStatus(fmt.Errorf("%w: %s is the leader serving this call; stop it (SIGTERM hands leadership over and leaves) instead", fsm.ErrFailedPrecondition, id))
	}
	servers, err := s.store.Configuration()
	if err != nil {
		return nil, rpctypes.ToStatus(err)
	}
	var found bool
	for _, srv := range servers {
		found = found || string(srv.ID) == id
	}
	if !found {
		return nil, rpctypes.ToStatus(fmt.Errorf("%w: %s is not in the Raft configuration", fsm.ErrNotFound, id))
	}
	for _, m := range s.members.Members() {
		if m.Meta.ID == id && m.Status == gossip.StatusAlive {
			return nil, rpctypes.ToStatus(fmt.Errorf("%w: %s is alive (gossip %s); the leader would add it back: stop it (SIGTERM leaves and is removed) instead",
				fsm.ErrFailedPrecondition, id, m.GossipAddr))
		}
	}
	if err := s.store.Remove(ctx, id); err != nil {
		return nil, rpctypes.ToStatus(err)
	}
	out := &pb.MemberRemoveResponse{Header: s.header()}
	if servers, err = s.store.Configuration(); err == nil {
		for _, srv := range servers {
			sf := "voter"
			if srv.Suffrage != raft.Voter {
				sf = "nonvoter"
			}
			out.Members = append(out.Members, &pb.Member{Id: string(srv.ID), RaftAddr: string(srv.Address), Suffrage: sf})
		}
	}
	return out, nil
}
