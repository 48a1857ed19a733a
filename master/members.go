package master

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/hashicorp/raft"

	pb "github.com/raftps/raftps/api/raftpspb"
	"github.com/raftps/raftps/api/rpctypes"
	"github.com/raftps/raftps/fsm"
	"github.com/raftps/raftps/gossip"
	"github.com/raftps/raftps/raftstore"
	"github.com/raftps/raftps/schema"
)

func (s *Service) log() *slog.Logger {
	if s.Logger != nil {
		return s.Logger
	}
	return slog.Default()
}

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
	// A removed learner is no longer held: added again, it is added anew.
	// Best effort: a mark left behind only keeps a re-added node a
	// non-voter until promoted.
	if _, err := s.store.DeleteRange(ctx, &pb.DeleteRangeRequest{Key: []byte(schema.LearnerKey(id))}); err != nil {
		s.log().Warn("member remove: delete learner mark", "id", id, "err", err)
	}
	return &pb.MemberRemoveResponse{Header: s.header(), Members: s.configMembers(ctx)}, nil
}

// MemberAdd adds a server to the Raft configuration (etcd's `member add`,
// hashicorp/raft's AddVoter and AddNonvoter): a voter, or with is_learner
// a non-voter held until MemberPromote, recorded under
// schema.LearnerKey so that the leader's reconcile loop (this one or a
// later one) neither makes it a voter nor replaces it while it is held.
// The node is then started with the same --id and --raft-addr and --join;
// until it runs, a voter added this way counts toward quorum while down.
// Errors: InvalidArgument for an empty id or address; AlreadyExists for
// an id or an address already in the configuration; Unavailable (not
// leader) if this node is not the leader (`raftps member add` calls the
// leader).
func (s *Service) MemberAdd(ctx context.Context, req *pb.MemberAddRequest) (*pb.MemberAddResponse, error) {
	id, addr := req.GetId(), req.GetRaftAddr()
	if id == "" || addr == "" {
		return nil, rpctypes.ToStatus(fmt.Errorf("%w: id and raft_addr are required", fsm.ErrInvalid))
	}
	if !s.store.IsLeader() {
		return nil, rpctypes.ToStatus(fmt.Errorf("%w: member add must reach the leader", rpctypes.ErrNotLeader))
	}
	servers, err := s.store.Configuration()
	if err != nil {
		return nil, rpctypes.ToStatus(err)
	}
	for _, srv := range servers {
		if string(srv.ID) == id || string(srv.Address) == addr {
			return nil, rpctypes.ToStatus(fmt.Errorf("%w: member %s at %s is in the Raft configuration already", fsm.ErrExists, srv.ID, srv.Address))
		}
	}
	if req.IsLearner {
		// The mark first: the reconcile loop may see the node in gossip as
		// soon as it is in the configuration.
		if _, err := s.store.Put(ctx, &pb.PutRequest{Key: []byte(schema.LearnerKey(id)), Value: []byte(addr)}); err != nil {
			return nil, rpctypes.ToStatus(err)
		}
	}
	if err := s.store.AddMember(ctx, id, addr, !req.IsLearner); err != nil {
		if req.IsLearner {
			if _, derr := s.store.DeleteRange(ctx, &pb.DeleteRangeRequest{Key: []byte(schema.LearnerKey(id))}); derr != nil {
				s.log().Warn("member add failed: delete learner mark", "id", id, "err", derr)
			}
		}
		return nil, rpctypes.ToStatus(err)
	}
	out := &pb.MemberAddResponse{Header: s.header(), Members: s.configMembers(ctx)}
	for _, m := range out.Members {
		if m.Id == id {
			out.Member = m
		}
	}
	return out, nil
}

// PromoteMaxLag is how many log entries a learner's last log index may
// trail the leader's and still be promoted (Consul autopilot's
// MaxTrailingLogs default): a voter that far behind catches up within a
// heartbeat or two, while one further behind would weaken the quorum it
// joins until it does.
const PromoteMaxLag = 250

// MemberPromote makes a learner a voter once it has caught up (etcd's
// `member promote`: "can only promote a learner member which is in sync
// with leader"): it must answer Internal.RaftProgress in this leader's
// term with a last log index at most PromoteMaxLag behind the leader's.
// Errors: InvalidArgument for an empty id; NotFound for an id not in the
// configuration; FailedPrecondition for a voter, or a learner that is
// unreachable, in another term or too far behind (the message gives the
// indexes; retry once it has caught up); Unavailable (not leader).
func (s *Service) MemberPromote(ctx context.Context, req *pb.MemberPromoteRequest) (*pb.MemberPromoteResponse, error) {
	id := req.GetId()
	if id == "" {
		return nil, rpctypes.ToStatus(fmt.Errorf("%w: id is required", fsm.ErrInvalid))
	}
	if !s.store.IsLeader() {
		return nil, rpctypes.ToStatus(fmt.Errorf("%w: member promote must reach the leader", rpctypes.ErrNotLeader))
	}
	servers, err := s.store.Configuration()
	if err != nil {
		return nil, rpctypes.ToStatus(err)
	}
	var srv *raft.Server
	for i := range servers {
		if string(servers[i].ID) == id {
			srv = &servers[i]
		}
	}
	switch {
	case srv == nil:
		return nil, rpctypes.ToStatus(fmt.Errorf("%w: member %s is not in the Raft configuration", fsm.ErrNotFound, id))
	case srv.Suffrage == raft.Voter:
		return nil, rpctypes.ToStatus(fmt.Errorf("%w: member %s is already a voter; only a learner (non-voter) can be promoted", fsm.ErrFailedPrecondition, id))
	}
	if err := s.caughtUp(ctx, id); err != nil {
		return nil, rpctypes.ToStatus(err)
	}
	if err := s.store.PromoteMember(ctx, id); err != nil {
		return nil, rpctypes.ToStatus(err)
	}
	// Promoted: the mark no longer holds anything back (a mark left behind
	// by a failed delete names a voter and is ignored).
	if _, err := s.store.DeleteRange(ctx, &pb.DeleteRangeRequest{Key: []byte(schema.LearnerKey(id))}); err != nil {
		s.log().Warn("member promote: delete learner mark", "id", id, "err", err)
	}
	return &pb.MemberPromoteResponse{Header: s.header(), Members: s.configMembers(ctx)}, nil
}

// caughtUp asks learner id for its progress and compares it with this
// leader's: an error wrapping fsm.ErrFailedPrecondition if it cannot tell
// or the learner lags.
func (s *Service) caughtUp(ctx context.Context, id string) error {
	if s.Progress == nil {
		return fmt.Errorf("%w: this node cannot ask %s for its progress", fsm.ErrFailedPrecondition, id)
	}
	alive := false
	for _, m := range s.members.Members() {
		alive = alive || (m.Meta.ID == id && m.Status == gossip.StatusAlive)
	}
	if !alive {
		return fmt.Errorf("%w: can only promote a learner that is in sync with the leader: %s is not alive in gossip (start it with --id %s, its --raft-addr and --join)",
			fsm.ErrFailedPrecondition, id, id)
	}
	leader := s.store.Stats()
	pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	p, err := s.Progress(pctx, id)
	if err != nil {
		return fmt.Errorf("%w: can only promote a learner that is in sync with the leader: %s did not report its progress (is it running, started with --join?): %v",
			fsm.ErrFailedPrecondition, id, err)
	}
	if !inSync(leader.Term, leader.LastLogIndex, p) {
		return fmt.Errorf("%w: can only promote a learner that is in sync with the leader: %s is at term %d, last log index %d; the leader at term %d, index %d (at most %d behind); retry once it has caught up",
			fsm.ErrFailedPrecondition, id, p.Term, p.LastLogIndex, leader.Term, leader.LastLogIndex, PromoteMaxLag)
	}
	return nil
}

// inSync: a member's progress p is in the leader's term and its last log
// index at most PromoteMaxLag behind the leader's (leaderLast).
func inSync(leaderTerm, leaderLast uint64, p *pb.RaftProgressResponse) bool {
	return p.Term == leaderTerm && (p.LastLogIndex >= leaderLast || leaderLast-p.LastLogIndex <= PromoteMaxLag)
}

// configMembers is the Raft configuration as Members (id, raft address,
// suffrage, is_learner).
func (s *Service) configMembers(ctx context.Context) []*pb.Member {
	servers, err := s.store.Configuration()
	if err != nil {
		return nil
	}
	learners := learnerSet(ctx, s.store)
	out := make([]*pb.Member, 0, len(servers))
	for _, srv := range servers {
		m := &pb.Member{Id: string(srv.ID), RaftAddr: string(srv.Address), Suffrage: "voter"}
		if srv.Suffrage != raft.Voter {
			m.Suffrage, m.IsLearner = "nonvoter", learners[m.Id]
		}
		out = append(out, m)
	}
	return out
}

// learnerSet returns the ids held as learners (schema.LearnerKey) in f's
// state as this replica has applied it.
func learnerSet(ctx context.Context, kv raftstore.KV) map[string]bool {
	key, end := schema.PrefixRange(schema.LearnersPrefix)
	resp, err := kv.Range(ctx, &pb.RangeRequest{Key: key, RangeEnd: end, KeysOnly: true, Serializable: true})
	out := map[string]bool{}
	if err != nil {
		return out
	}
	for _, kv := range resp.Kvs {
		if id, ok := schema.ParseLearnerKey(string(kv.Key)); ok {
			out[id] = true
		}
	}
	return out
}
