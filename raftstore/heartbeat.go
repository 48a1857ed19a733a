package raftstore

import (
	"github.com/hashicorp/raft"
)

// serialTransport is a raft.NetworkTransport without its heartbeat fast
// path: heartbeats go through Raft's main loop like every other RPC.
//
// NetworkTransport hands a heartbeat (an AppendEntries with no entries,
// no previous log and no commit index) to Raft.processHeartbeat on the
// connection's goroutine, concurrently with the main loop, so that disk
// latency on the main loop cannot delay it. But a heartbeat of a newer
// term makes the node a follower of that term there and then, while a
// leader's main loop may be between its group commit and dispatchLogs,
// which stamps the entries it appends with the current term: the deposed
// leader then writes its entries with the new leader's term, at indexes
// the new leader also uses, and later takes the new leader's entries at
// those indexes for duplicates of its own and applies its own. Two
// different entries share one (index, term): the Log Matching property is
// broken and the replicas' state machines diverge (hashicorp/raft#695,
// still open upstream in v1.8.0; the Jepsen suite's watch checker caught
// it here: integration/jepsen/testdata/watch-divergence-20261128).
//
// Serial heartbeats also close hashicorp/raft#717 (a heartbeat on a
// connection goroutine reaching the stable store after Close closed it):
// Raft.Shutdown waits for the main loop. The price is the fast path's
// purpose: a heartbeat waits while the main loop writes the log, so a
// follower whose log store stalls for longer than the heartbeat timeout
// starts an election (as etcd's raft, whose heartbeats share the loop).
type serialTransport struct {
	*raft.NetworkTransport // every other method, and the optional interfaces (WithClose, WithPreVote)
}

// SetHeartbeatHandler keeps the fast path off: see serialTransport.
func (serialTransport) SetHeartbeatHandler(func(raft.RPC)) {}
