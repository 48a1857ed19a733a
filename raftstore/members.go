package raftstore

import (
	"context"
	"errors"
	"fmt"

	"github.com/hashicorp/raft"

	"github.com/raftps/raftps/fsm"
)

// AddMember adds server id at raftAddr to the Raft configuration through
// this server, which must be the leader (else ErrNotLeader): a voter
// (hashicorp/raft's AddVoter), or with voter false a non-voter
// (AddNonvoter) that replicates the log but neither votes nor counts
// toward quorum. Unlike Join, which the leader's reconcile loop calls on
// every gossip change and which replaces a stale entry, AddMember is the
// operator's explicit `raftps member add` and changes nothing it did not
// ask for: an id or an address already in the configuration is an error
// wrapping fsm.ErrExists (AlreadyExists) naming the present entry.
func (s *Store) AddMember(ctx context.Context, id, raftAddr string, voter bool) error {
	if err := s.checkOpen(); err != nil {
		return err
	}
	if id == "" || raftAddr == "" {
		return fmt.Errorf("%w: member add: id and raft address are required", fsm.ErrInvalid)
	}
	if !s.IsLeader() {
		return ErrNotLeader
	}
	servers, err := s.Configuration()
	if err != nil {
		return err
	}
	for _, srv := range servers {
		if string(srv.ID) == id || string(srv.Address) == raftAddr {
			return fmt.Errorf("%w: member %s at %s is in the Raft configuration (%s)", fsm.ErrExists, srv.ID, srv.Address, suffrageName(srv.Suffrage))
		}
	}
	if err := s.addServer(ctx, id, raftAddr, voter); err != nil {
		return fmt.Errorf("raftstore: member add %s: %w", id, err)
	}
	s.logger.Info("member added", "node", id, "raft_addr", raftAddr, "voter", voter)
	return nil
}

// PromoteMember makes non-voter id a voter (AddVoter on the entry in
// place) through this server, which must be the leader (else
// ErrNotLeader). Whether the non-voter has caught up is the caller's
// judgement (it needs the member's own log index, which the leader's
// hashicorp/raft does not expose). Errors: fsm.ErrNotFound for an id not
// in the configuration; fsm.ErrFailedPrecondition for a voter.
func (s *Store) PromoteMember(ctx context.Context, id string) error {
	if err := s.checkOpen(); err != nil {
		return err
	}
	if !s.IsLeader() {
		return ErrNotLeader
	}
	srv, err := s.member(id)
	if err != nil {
		return err
	}
	if srv.Suffrage == raft.Voter {
		return fmt.Errorf("%w: member %s is already a voter; only a non-voter (learner) can be promoted", fsm.ErrFailedPrecondition, id)
	}
	if err := s.addServer(ctx, id, string(srv.Address), true); err != nil {
		return fmt.Errorf("raftstore: member promote %s: %w", id, err)
	}
	s.logger.Info("member promoted to voter", "node", id)
	return nil
}

// member returns id's entry of the latest configuration, or an error
// wrapping fsm.ErrNotFound.
func (s *Store) member(id string) (raft.Server, error) {
	servers, err := s.Configuration()
	if err != nil {
		return raft.Server{}, err
	}
	for _, srv := range servers {
		if string(srv.ID) == id {
			return srv, nil
		}
	}
	return raft.Server{}, fmt.Errorf("%w: member %s is not in the Raft configuration", fsm.ErrNotFound, id)
}

// suffrageName is voter or nonvoter (staging is hashicorp/raft's
// unused third value, reported as nonvoter).
func suffrageName(s raft.ServerSuffrage) string {
	if s == raft.Voter {
		return "voter"
	}
	return "nonvoter"
}

// addServer adds (or, for a non-voter already present and voter true,
// promotes in place) server id at raftAddr: hashicorp/raft's AddVoter, or
// AddNonvoter with voter false. It waits for the configuration change to
// commit.
func (s *Store) addServer(ctx context.Context, id, raftAddr string, voter bool) error {
	var f raft.IndexFuture
	if voter {
		f = s.raft.AddVoter(raft.ServerID(id), raft.ServerAddress(raftAddr), 0, s.timeout(ctx))
	} else {
		f = s.raft.AddNonvoter(raft.ServerID(id), raft.ServerAddress(raftAddr), 0, s.timeout(ctx))
	}
	return s.futureErr(ctx, f)
}

// Configuration returns the latest Raft configuration (voters and non-voters).
func (s *Store) Configuration() ([]raft.Server, error) {
	if err := s.checkOpen(); err != nil {
		return nil, err
	}
	f := s.raft.GetConfiguration()
	if err := f.Error(); err != nil {
		return nil, fmt.Errorf("raftstore: get configuration: %w", err)
	}
	return f.Configuration().Servers, nil
}

// Join adds server id at raftAddr as a voter (or non-voter) through this
// server, which must be the leader (else ErrNotLeader). It is idempotent: a
// server already present with the same address and suffrage is a no-op; one
// with the same ID or address but a different address or ID is removed first.
// It refuses as Apply does while Config.Disk is below its reserve.
func (s *Store) Join(ctx context.Context, id, raftAddr string, voter bool) error {
	if err := s.checkOpen(); err != nil {
		return err
	}
	if err := s.checkDisk(); err != nil {
		return err
	}
	if id == "" || raftAddr == "" {
		return errors.New("raftstore: join: id and raft address are required")
	}
	if !s.IsLeader() {
		return ErrNotLeader
	}
	servers, err := s.Configuration()
	if err != nil {
		return err
	}
	for _, srv := range servers {
		sameID, sameAddr := string(srv.ID) == id, string(srv.Address) == raftAddr
		if !sameID && !sameAddr {
			continue
		}
		if sameID && sameAddr && (srv.Suffrage == raft.Voter) == voter {
			s.logger.Info("join: already a member", "node", id, "raft_addr", raftAddr)
			return nil
		}
		if sameID && sameAddr && voter {
			break // non-voter → voter: AddVoter promotes in place
		}
		if sameID && sameAddr {
			if err := s.futureErr(ctx, s.raft.DemoteVoter(srv.ID, 0, s.timeout(ctx))); err != nil {
				return fmt.Errorf("raftstore: join %s as non-voter: demote: %w", id, err)
			}
			s.logger.Info("join: demoted to non-voter", "node", id)
			return nil
		}
		if err := s.futureErr(ctx, s.raft.RemoveServer(srv.ID, 0, s.timeout(ctx))); err != nil {
			return fmt.Errorf("raftstore: join %s: remove stale %s@%s: %w", id, srv.ID, srv.Address, err)
		}
	}
	if err := s.addServer(ctx, id, raftAddr, voter); err != nil {
		return fmt.Errorf("raftstore: join %s@%s: %w", id, raftAddr, err)
	}
	s.logger.Info("joined", "node", id, "raft_addr", raftAddr, "voter", voter)
	return nil
}

// Remove removes server id through this server, which must be the leader
// (else ErrNotLeader). Removing an absent server is a no-op. It refuses
// as Apply does while Config.Disk is below its reserve.
func (s *Store) Remove(ctx context.Context, id string) error {
	if err := s.checkOpen(); err != nil {
		return err
	}
	if err := s.checkDisk(); err != nil {
		return err
	}
	if !s.IsLeader() {
		return ErrNotLeader
	}
	servers, err := s.Configuration()
	if err != nil {
		return err
	}
	for _, srv := range servers {
		if string(srv.ID) == id {
			if err := s.futureErr(ctx, s.raft.RemoveServer(srv.ID, 0, s.timeout(ctx))); err != nil {
				return fmt.Errorf("raftstore: remove %s: %w", id, err)
			}
			s.logger.Info("removed", "node", id)
			return nil
		}
	}
	return nil
}
