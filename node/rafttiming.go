package node

import (
	"fmt"
	"time"
)

// Defaults of Config.HeartbeatInterval and Config.ElectionTimeout (etcd's
// --heartbeat-interval and --election-timeout). See doc.go ("Raft timing")
// for the terms per minute and failover times they were chosen by.
const (
	DefaultHeartbeatInterval = 50 * time.Millisecond
	DefaultElectionTimeout   = 500 * time.Millisecond
)

// Bounds of the Raft timing (etcd's): the election timeout is at least
// MinElectionHeartbeatRatio heartbeat intervals and at most
// MaxElectionTimeout; hashicorp/raft refuses timeouts below 5 ms.
const (
	MinElectionHeartbeatRatio = 5
	MaxElectionTimeout        = 50 * time.Second
	minRaftTimeout            = 10 * time.Millisecond
)

// validRaftTiming checks heartbeat (the heartbeat interval) and election
// (the election timeout) as etcd does; 0 means the default.
func validRaftTiming(heartbeat, election time.Duration) error {
	heartbeat, election = raftTimingDefaults(heartbeat, election)
	ms := func(d time.Duration) int64 { return d.Milliseconds() }
	switch {
	case heartbeat < time.Millisecond || heartbeat%time.Millisecond != 0:
		return fmt.Errorf("--heartbeat-interval %v: want whole milliseconds >= 1", heartbeat)
	case election < minRaftTimeout || election%time.Millisecond != 0:
		return fmt.Errorf("--election-timeout %v: want whole milliseconds >= %d", election, ms(minRaftTimeout))
	case election > MaxElectionTimeout:
		return fmt.Errorf("--election-timeout %d is too long, and should be set less than %d ms", ms(election), ms(MaxElectionTimeout))
	case election < MinElectionHeartbeatRatio*heartbeat:
		return fmt.Errorf("--election-timeout %d ms should be at least %d times --heartbeat-interval %d ms (at least %d ms, or a shorter heartbeat interval)",
			ms(election), MinElectionHeartbeatRatio, ms(heartbeat), MinElectionHeartbeatRatio*ms(heartbeat))
	}
	return nil
}

func raftTimingDefaults(heartbeat, election time.Duration) (time.Duration, time.Duration) {
	if heartbeat == 0 {
		heartbeat = DefaultHeartbeatInterval
	}
	if election == 0 {
		election = DefaultElectionTimeout
	}
	return heartbeat, election
}

// RaftTimeouts maps the heartbeat interval and election timeout (etcd's
// meanings; 0 means the default) onto hashicorp/raft's timeouts, as the
// node configures its raftstore:
//
//   - HeartbeatTimeout = min(10 x HeartbeatInterval, ElectionTimeout).
//     hashicorp/raft has no heartbeat interval of its own: a leader
//     heartbeats each follower every HeartbeatTimeout/10 to /5 (random),
//     and a follower that hears nothing for HeartbeatTimeout (checked
//     every HeartbeatTimeout to 2 x) stands for election. With
//     ElectionTimeout = 10 x HeartbeatInterval (etcd's default ratio and
//     ours) that is etcd's pair exactly: heartbeats every interval (up to
//     2x), a follower stands after ElectionTimeout (up to 2x: etcd
//     randomizes its election timeout over [E, 2E) too). Below 10x the
//     heartbeats come more often than asked; above it followers stand
//     after 10 heartbeat intervals, sooner than ElectionTimeout.
//   - ElectionTimeout = ElectionTimeout: how long a candidate waits for
//     votes before it starts a new term (random, up to 2x).
//   - LeaderLeaseTimeout = HeartbeatTimeout: a leader that has not heard
//     from a quorum for that long steps down, as etcd's CheckQuorum does
//     after an election timeout (hashicorp/raft allows at most
//     HeartbeatTimeout; Consul's raft_multiplier keeps it at half, which
//     under CPU load made a leader step down on its own, see doc.go).
func RaftTimeouts(heartbeatInterval, electionTimeout time.Duration) (heartbeat, election, leaderLease time.Duration) {
	heartbeatInterval, electionTimeout = raftTimingDefaults(heartbeatInterval, electionTimeout)
	heartbeat = min(10*heartbeatInterval, electionTimeout)
	return heartbeat, electionTimeout, heartbeat
}
