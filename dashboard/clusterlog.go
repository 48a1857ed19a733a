package dashboard

import (
	"context"
	"fmt"
	"sync"
	"time"

	pb "github.com/raftps/raftps/api/raftpspb"
)

// clusterEvent is a change of the cluster seen by the watcher: a member's
// gossip status ("member") or the Raft leader ("leader").
type clusterEvent struct {
	Seq     int64  `json:"seq"`
	Time    int64  `json:"time"` // Unix ms when this node saw it
	Kind    string `json:"kind"` // "member" or "leader"
	Node    string `json:"node"` // the member, or the new leader ("" while there is none)
	Status  string `json:"status,omitempty"`
	Term    uint64 `json:"term,omitempty"`
	Message string `json:"message"`
}

// clusterLog keeps the last max cluster events and fans new ones out.
type clusterLog struct {
	mu   sync.Mutex
	max  int
	seq  int64
	log  []clusterEvent
	subs map[chan clusterEvent]struct{}
}

func newClusterLog(max int) *clusterLog {
	return &clusterLog{max: max, subs: map[chan clusterEvent]struct{}{}}
}

func (l *clusterLog) add(ev clusterEvent) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.seq++
	ev.Seq = l.seq
	l.log = append(l.log, ev)
	if len(l.log) > l.max {
		l.log = l.log[len(l.log)-l.max:]
	}
	for ch := range l.subs {
		select {
		case ch <- ev:
		default: // a slow stream misses it; it re-reads the log on reconnect
		}
	}
}

// since returns the retained events after seq.
func (l *clusterLog) since(seq int64) []clusterEvent {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := []clusterEvent{}
	for _, ev := range l.log {
		if ev.Seq > seq {
			out = append(out, ev)
		}
	}
	return out
}

// subscribe returns the retained events and a channel of the next ones.
func (l *clusterLog) subscribe() ([]clusterEvent, chan clusterEvent, func()) {
	ch := make(chan clusterEvent, 64)
	l.mu.Lock()
	past := append([]clusterEvent(nil), l.log...)
	l.subs[ch] = struct{}{}
	l.mu.Unlock()
	return past, ch, func() {
		l.mu.Lock()
		delete(l.subs, ch)
		l.mu.Unlock()
	}
}

// watchCluster polls Members and Status and logs every change of a
// member's gossip status and of the leader until ctx ends. The first poll
// sets the baseline (its state is not logged as changes).
func (d *Dashboard) watchCluster(ctx context.Context) {
	t := time.NewTicker(watchInterval)
	defer t.Stop()
	first := true
	leader := ""
	status := map[string]string{}
	for {
		pctx, cancel := context.WithTimeout(ctx, 2*watchInterval)
		st, serr := d.cl.Cluster.Status(pctx, &pb.StatusRequest{})
		mr, merr := d.cl.Cluster.Members(pctx, &pb.MembersRequest{})
		cancel()
		if serr == nil && merr == nil {
			now := time.Now().UnixMilli()
			if !first && st.Leader != leader {
				msg := fmt.Sprintf("leader changed %s -> %s (term %d)", leader, st.Leader, st.Term)
				switch {
				case st.Leader == "":
					msg = fmt.Sprintf("no leader (term %d; was %s)", st.Term, leader)
				case leader == "":
					msg = fmt.Sprintf("leader %s (term %d)", st.Leader, st.Term)
				}
				d.events.add(clusterEvent{Time: now, Kind: "leader", Node: st.Leader, Term: st.Term, Message: msg})
			}
			leader = st.Leader
			for _, m := range mr.Members {
				prev, seen := status[m.Id]
				if !first && prev != m.Status {
					msg := fmt.Sprintf("node %s %s", m.Id, m.Status)
					if seen {
						msg = fmt.Sprintf("node %s %s (was %s)", m.Id, m.Status, prev)
					}
					d.events.add(clusterEvent{Time: now, Kind: "member", Node: m.Id, Status: m.Status, Message: msg})
				}
				status[m.Id] = m.Status
			}
			first = false
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}
