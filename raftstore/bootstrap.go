package raftstore

import (
	"errors"
	"fmt"

	"github.com/hashicorp/raft"
)

// ErrHasState: Bootstrap found Raft state in the data dir (a restarted
// server, or one already added to a cluster); nothing was changed.
var ErrHasState = errors.New("raftstore: raft state exists; not bootstrapping")

// Bootstrap forms a new cluster whose first configuration is servers
// (rqlite's cluster/bootstrap.go, Consul's bootstrap_expect): every server
// of the list may call it with the same list, and each of them then starts
// with the same log entry 1 and so the same cluster ID. It is for servers
// opened without Config.Bootstrap; a store that has Raft state returns
// ErrHasState. Errors: ErrNotOpen, ErrHasState, or hashicorp/raft's
// bootstrap error (an invalid configuration).
func (s *Store) Bootstrap(servers []raft.Server) error {
	if err := s.checkOpen(); err != nil {
		return err
	}
	if len(servers) == 0 {
		return errors.New("raftstore: bootstrap with no servers")
	}
	err := s.raft.BootstrapCluster(raft.Configuration{Servers: servers}).Error()
	switch {
	case errors.Is(err, raft.ErrCantBootstrap):
		return ErrHasState
	case err != nil:
		return fmt.Errorf("raftstore: bootstrap: %w", err)
	}
	s.logger.Info("bootstrapped cluster", "servers", len(servers))
	return nil
}
