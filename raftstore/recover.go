package raftstore

import (
	"fmt"
	"log/slog"

	"github.com/hashicorp/raft"

	"github.com/raftps/raftps/fsm"
)

// forceNewCluster rewrites this server's Raft state as a cluster of one
// voter, itself (etcd's --force-new-cluster; Consul's peers.json): for when
// a majority of the servers is gone for good. hashicorp/raft's
// RecoverCluster replays every entry of the local log over the latest
// snapshot, writes a snapshot of the result with the new configuration and
// compacts the log, so nothing this server had applied (or even only
// logged) is lost. The store then starts from that snapshot and elects
// itself; new servers join it as usual.
//
// It is run on every start with Config.ForceNewCluster: like etcd's flag,
// take it off once the server is up, or a later restart drops the members
// that joined since.
func (s *Store) forceNewCluster(rc *raft.Config, logs raft.LogStore, stable raft.StableStore, snaps raft.SnapshotStore, trans raft.Transport) error {
	addr := trans.LocalAddr()
	if s.cfg.AdvertiseAddr != "" {
		addr = raft.ServerAddress(s.cfg.AdvertiseAddr)
	}
	conf := raft.Configuration{Servers: []raft.Server{{Suffrage: raft.Voter, ID: raft.ServerID(s.cfg.ID), Address: addr}}}
	// A scratch FSM: RecoverCluster replays into it, and the store's FSM
	// is then restored from the snapshot it writes.
	scratch := fsm.New(slog.New(slog.DiscardHandler))
	if err := raft.RecoverCluster(rc, scratch, logs, stable, snaps, trans, conf); err != nil {
		return fmt.Errorf("raftstore: force new cluster: %w", err)
	}
	s.logger.Warn("forced a new cluster of this server alone from its own state; remove --force-new-cluster before the next restart",
		"applied_index", scratch.AppliedIndex(), "revision", scratch.Revision())
	return nil
}
