package master

import (
	"bytes"
	"context"
	"time"

	"github.com/hashicorp/raft"
	pb "github.com/raftps/raftps/api/raftpspb"
	"github.com/raftps/raftps/gossip"
	"github.com/raftps/raftps/schema"
)

// reconcile brings the Raft configuration and /nodes/ in line with gossip:
// an alive server joins (voter while fewer than MaxVoters voters, unless
// it is held as a learner: schema.LearnerKey, member add --learner), a server
// that left is removed, a failed one is removed only after
// DeadServerTimeout and never below quorum (raft-autopilot's rule). Each
// member is handled by reconcileMember, as Consul's leader does.
func (m *Master) reconcile(ctx context.Context) {
	if !m.store.IsLeader() {
		return
	}
	servers, err := m.store.Configuration()
	if err != nil {
		m.log.Warn("reconcile: read configuration", "err", err)
		return
	}
	r := &reconcileRound{inRaft: map[string]raft.Server{}, self: m.store.Stats().ID, now: time.Now()}
	for _, s := range servers {
		r.inRaft[string(s.ID)] = s
		if s.Suffrage == raft.Voter {
			r.voters++
		}
	}
	// Learners (member add --learner) stay non-voters until member promote.
	r.learners = learnerSet(ctx, m.store)
	for _, mem := range m.members.Members() {
		m.reconcileMember(ctx, r, mem)
	}
}

// reconcileRound is what one reconcile pass knows of the Raft
// configuration; voters is kept current as members are added and removed.
type reconcileRound struct {
	inRaft   map[string]raft.Server
	voters   int
	learners map[string]bool
	self     string
	now      time.Time
}

// reconcileMember brings one gossip member's /nodes/ record and Raft
// membership in line with its status.
func (m *Master) reconcileMember(ctx context.Context, r *reconcileRound, mem gossip.Member) {
	id := mem.Meta.ID
	if m.proven(ctx, r.self, mem, r.inRaft) {
		m.writeNode(ctx, mem)
	}
	// A node that died or left while another node led (or before this
	// leader subscribed to gossip) is released here: its event is gone.
	m.mu.Lock()
	released := m.gone[id]
	if mem.Status == gossip.StatusAlive {
		delete(m.gone, id)
	}
	m.mu.Unlock()
	if (mem.Status == gossip.StatusDead || mem.Status == gossip.StatusLeft) && !released && id != r.self {
		m.nodeGone(ctx, mem)
	}
	if id == r.self || mem.Meta.RaftAddr == "" {
		return
	}
	switch mem.Status {
	case gossip.StatusAlive:
		m.reconcileAlive(ctx, r, mem)
	case gossip.StatusLeft:
		m.reconcileLeft(ctx, r, mem)
	case gossip.StatusDead:
		m.reconcileDead(ctx, r, mem)
	}
}

// reconcileAlive adds an alive member to the Raft configuration once it
// proved its identity, or promotes it to voter. Nodes without the server
// role are non-voters: they replicate the metadata (and serve and forward
// like any node) but never vote, lead, or count toward quorum.
func (m *Master) reconcileAlive(ctx context.Context, r *reconcileRound, mem gossip.Member) {
	id := mem.Meta.ID
	server := mem.Meta.HasRole(gossip.RoleServer)
	srv, present := r.inRaft[id]
	m.mu.Lock()
	delete(m.deadSince, id)
	m.mu.Unlock()
	if !present || srv.Address != raft.ServerAddress(mem.Meta.RaftAddr) {
		// Gossip is not authenticated without a keyring: a node
		// becomes a member only once it proved over its Raft port
		// that it holds the node certificate of its ID.
		if !m.verified(ctx, id, mem.Meta.RaftAddr) {
			return
		}
		voter := server && !r.learners[id] && r.voters < m.cfg.MaxVoters
		if err := m.store.Join(ctx, id, mem.Meta.RaftAddr, voter); err != nil {
			m.log.Warn("reconcile: add server", "id", id, "err", err)
			return
		}
		if voter {
			r.voters++
		}
		m.log.Info("reconcile: server added", "id", id, "addr", mem.Meta.RaftAddr, "voter", voter)
	} else if server && !r.learners[id] && srv.Suffrage != raft.Voter && r.voters < m.cfg.MaxVoters {
		if err := m.store.Join(ctx, id, mem.Meta.RaftAddr, true); err == nil {
			r.voters++
			m.log.Info("reconcile: promoted to voter", "id", id)
		}
	}
}

// reconcileLeft removes a member that left from the Raft configuration.
func (m *Master) reconcileLeft(ctx context.Context, r *reconcileRound, mem gossip.Member) {
	id := mem.Meta.ID
	srv, present := r.inRaft[id]
	if !present {
		return
	}
	if m.removeServer(ctx, r, srv, "left") {
		m.log.Info("reconcile: server left, removed", "id", id)
	}
}

// reconcileDead removes a dead member from the Raft configuration: a
// non-voter at once, a voter after DeadServerTimeout and never below 3
// voters.
func (m *Master) reconcileDead(ctx context.Context, r *reconcileRound, mem gossip.Member) {
	id, now := mem.Meta.ID, r.now
	srv, present := r.inRaft[id]
	if !present {
		return
	}
	m.mu.Lock()
	since, ok := m.deadSince[id]
	if !ok {
		since = now
		m.deadSince[id] = now
	}
	m.mu.Unlock()
	if now.Sub(since) < m.cfg.DeadServerTimeout && srv.Suffrage == raft.Voter {
		return // a dead non-voter goes at once: it holds no quorum
	}
	// Never below quorum: removing a dead voter must leave a majority of
	// the remaining voters alive and at least 3 voters when we had 3.
	if srv.Suffrage == raft.Voter && r.voters-1 < 3 {
		return
	}
	if m.removeServer(ctx, r, srv, "dead") {
		m.log.Warn("reconcile: dead server removed", "id", id, "dead_for", now.Sub(since))
	}
}

// removeServer removes srv (a member that is why: left, dead) from the
// Raft configuration and counts a removed voter out of r; it reports
// whether the removal committed.
func (m *Master) removeServer(ctx context.Context, r *reconcileRound, srv raft.Server, why string) bool {
	id := string(srv.ID)
	if err := m.store.Remove(ctx, id); err != nil {
		m.log.Warn("reconcile: remove "+why+" server", "id", id, "err", err)
		return false
	}
	if srv.Suffrage == raft.Voter {
		r.voters--
	}
	return true
}

// Bounds of the identity checks of nodes that gossip reports (verified).
const (
	// verifyWait is how long reconcile waits for a check it started before
	// it goes on (a TLS handshake on a LAN takes milliseconds); a slower
	// check completes in the background and counts on a later round.
	verifyWait = 200 * time.Millisecond
	// verifyRetry is how long a failed check stands before it is tried
	// again.
	verifyRetry = 10 * time.Second
	// maxVerifying bounds the checks in flight: peers that never answer
	// cannot make reconcile wait for each of them.
	maxVerifying = 8
)

// peerCheck is the latest identity check of one node ID.
type peerCheck struct {
	addr string
	done chan struct{} // closed when err is set
	err  error
	at   time.Time // when it completed
}

// verified reports whether the node id at raftAddr proved its identity
// (Store.VerifyPeer). A node gossip reports is checked once per address
// (a failure again after verifyRetry), at most maxVerifying at a time, in
// the background: reconcile waits verifyWait for a check it starts, so a
// peer that never answers delays it by that much at most. A failure is
// logged once per ID and address.
func (m *Master) verified(ctx context.Context, id, raftAddr string) bool {
	m.mu.Lock()
	c := m.checks[id]
	if c != nil && c.addr == raftAddr {
		select {
		case <-c.done:
			ok := c.err == nil
			stale := !ok && time.Since(c.at) >= verifyRetry
			if !stale {
				m.mu.Unlock()
				return ok
			}
		default:
			m.mu.Unlock()
			return false // under way
		}
	}
	if m.verifying >= maxVerifying {
		m.mu.Unlock()
		return false
	}
	logged := c != nil && c.addr == raftAddr // this failure was logged
	c = &peerCheck{addr: raftAddr, done: make(chan struct{})}
	m.checks[id] = c
	m.verifying++
	m.mu.Unlock()
	go func() {
		err := m.store.VerifyPeer(ctx, id, raftAddr)
		m.mu.Lock()
		c.err, c.at = err, time.Now()
		m.verifying--
		m.mu.Unlock()
		close(c.done)
		if err != nil && !logged {
			m.log.Warn("reconcile: not adding a node that did not prove its identity", "id", id, "addr", raftAddr, "err", err)
		}
	}()
	select {
	case <-c.done:
		return c.err == nil
	case <-time.After(verifyWait):
		return false
	}
}

// proven reports whether gossip's member mem proved that it is the node
// of its ID, so that its schema.NodeRecord may be written: this node
// itself, a Raft member at the Raft address gossip reports (added after
// its check, or bootstrapped), or an alive member that passed verified.
// Gossip without a keyring is not authenticated (--insecure-gossip): a
// process that never proved an identity writes no /nodes/ key.
func (m *Master) proven(ctx context.Context, self string, mem gossip.Member, inRaft map[string]raft.Server) bool {
	id := mem.Meta.ID
	if id == self {
		return true
	}
	if srv, ok := inRaft[id]; ok && srv.Address == raft.ServerAddress(mem.Meta.RaftAddr) {
		return true
	}
	return mem.Status == gossip.StatusAlive && mem.Meta.RaftAddr != "" && m.verified(ctx, id, mem.Meta.RaftAddr)
}

// writeNode writes the node's schema.NodeRecord when it differs from gossip.
func (m *Master) writeNode(ctx context.Context, mem gossip.Member) {
	rec := schema.NodeRecord{ID: mem.Meta.ID, Roles: mem.Meta.Roles, GRPCAddr: mem.Meta.GRPCAddr,
		RaftAddr: mem.Meta.RaftAddr, HTTPAddr: mem.Meta.HTTPAddr, Status: mem.Status.String()}
	val := rec.Marshal()
	key := []byte(schema.NodeKey(rec.ID))
	cur, err := m.store.Range(ctx, &pb.RangeRequest{Serializable: true, Key: key})
	if err == nil && len(cur.Kvs) == 1 && bytes.Equal(cur.Kvs[0].Value, val) {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, applyTimeout)
	defer cancel()
	if _, err := m.store.Put(ctx, &pb.PutRequest{Key: key, Value: val}); err != nil {
		m.log.Debug("write node record", "id", rec.ID, "err", err)
	}
}
