package jepsen

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"time"

	pb "github.com/raftps/raftps/api/raftpspb"
	"github.com/raftps/raftps/schema"
)

// Fault kinds the nemesis knows.
const (
	FaultKillRandom      = "kill-random"
	FaultKillLeader      = "kill-leader"
	FaultPauseRandom     = "pause-random"
	FaultPauseLeader     = "pause-leader"
	FaultPartitionLeader = "partition-leader"  // isolate the leader from every other node
	FaultPartitionHalves = "partition-halves"  // random minority | majority
	FaultPartitionRing   = "partition-ring"    // majority ring: each node sees only its ring neighbours (5 nodes); "bridge" with 3
	FaultPartitionOneWay = "partition-one-way" // the leader's packets to the others are dropped, theirs to it pass
	FaultLoss            = "loss"              // random packet loss on a random node
	FaultPartitionHeal   = "partition-heal"    // isolate a follower under concurrent writes, heal, repeat quickly (hashicorp/raft #695)
	FaultKillPServer     = "kill-pserver"      // SIGKILL the node serving pserver slot 0 of a running job (random node if none), restart
	FaultMembership      = "membership"        // a follower leaves gracefully (removed from Raft), then rejoins with the same command line
)

// AllFaults lists every fault kind.
var AllFaults = []string{
	FaultKillRandom, FaultKillLeader, FaultPauseRandom, FaultPauseLeader,
	FaultPartitionLeader, FaultPartitionHalves, FaultPartitionRing,
	FaultPartitionOneWay, FaultLoss, FaultPartitionHeal, FaultKillPServer, FaultMembership,
}

// Fault is one fault the nemesis applied, healed at End (ns since the run's
// start).
type Fault struct {
	Type   string `json:"type"`
	Target string `json:"target"`
	Start  int64  `json:"start"`
	End    int64  `json:"end"`
	Detail string `json:"detail,omitempty"`
	Err    string `json:"err,omitempty"`
}

// NemesisConfig is the nemesis's schedule: Faults run in order, one at a
// time, each held for Hold then healed, with Quiet between faults (and
// before the first one). The loop stops after the last fault or when ctx
// ends, whichever comes first, and always heals.
type NemesisConfig struct {
	Faults []string
	Hold   time.Duration // how long a fault lasts (default 4s); pauses last 1.5-3 s
	Quiet  time.Duration // healthy time between faults (default 5s)
	Seed   uint64
}

// Nemesis injects faults into Hosts.
type Nemesis struct {
	cfg   NemesisConfig
	hosts *Hosts
	conns ConnSet
	h     *History
	r     *rand.Rand
}

// NewNemesis returns a nemesis over hs; conns find the leader.
func NewNemesis(cfg NemesisConfig, hs *Hosts, conns ConnSet, h *History) *Nemesis {
	if cfg.Hold == 0 {
		cfg.Hold = 4 * time.Second
	}
	if cfg.Quiet == 0 {
		cfg.Quiet = 5 * time.Second
	}
	return &Nemesis{cfg: cfg, hosts: hs, conns: conns, h: h, r: rand.New(rand.NewPCG(cfg.Seed, cfg.Seed^0x9e3779b9))}
}

// Run runs the schedule and returns the faults applied.
func (n *Nemesis) Run(ctx context.Context) []Fault {
	var out []Fault
	for _, kind := range n.cfg.Faults {
		if !sleepCtx(ctx, n.cfg.Quiet) {
			break
		}
		f := n.apply(ctx, kind)
		out = append(out, f)
		n.h.Add(Record{Type: "fault", At: f.Start, Fault: &f})
	}
	_ = n.hosts.Heal()
	return out
}

func (n *Nemesis) leader(ctx context.Context) *Host {
	if id := n.conns.Leader(ctx, time.Second); id != "" {
		if h := n.hosts.Host(id); h != nil {
			return h
		}
	}
	return nil
}

func (n *Nemesis) randomHost() *Host { return n.hosts.Nodes[n.r.IntN(len(n.hosts.Nodes))] }

func (n *Nemesis) others(h *Host) []*Host {
	var o []*Host
	for _, x := range n.hosts.Nodes {
		if x != h {
			o = append(o, x)
		}
	}
	return o
}

func names(hs []*Host) string {
	var s []string
	for _, h := range hs {
		s = append(s, h.Name)
	}
	return strings.Join(s, ",")
}

// pserverHost is the node serving pserver slot 0 of some job, from the
// slot's key /jobs/<job>/ps/0 (nil if none is served).
func (n *Nemesis) pserverHost(ctx context.Context) *Host {
	for _, c := range n.conns.All() {
		cctx, cancel := context.WithTimeout(ctx, time.Second)
		key, end := schema.PrefixRange(schema.JobsPrefix)
		resp, err := c.KV.Range(cctx, &pb.RangeRequest{Key: key, RangeEnd: end})
		cancel()
		if err != nil {
			continue
		}
		for _, kv := range resp.Kvs {
			_, kind, id, ok := schema.ParseJobKey(string(kv.Key))
			if !ok || kind != schema.KindSlot || id != "0" {
				continue
			}
			if v, err := schema.ParseSlotRecord(kv.Value); err == nil {
				if h := n.hosts.Host(v.Node); h != nil {
					return h
				}
			}
		}
		return nil
	}
	return nil
}

// waitMember waits until t is (in) or is not (!in) in the Raft
// configuration as another node reports it; false if not seen within d.
func (n *Nemesis) waitMember(ctx context.Context, t *Host, in bool, d time.Duration) bool {
	deadline := time.Now().Add(d)
	for time.Now().Before(deadline) && ctx.Err() == nil {
		for _, c := range n.conns.All() {
			if c.Name == t.Name {
				continue
			}
			cctx, cancel := context.WithTimeout(ctx, time.Second)
			st, err := c.Cluster.Status(cctx, &pb.StatusRequest{})
			cancel()
			if err != nil || st.Leader == "" {
				continue
			}
			if slices.Contains(st.Voters, t.Name) || slices.Contains(st.Nonvoters, t.Name) {
				if in {
					return true
				}
			} else if !in {
				return true
			}
			break
		}
		sleepCtx(ctx, 200*time.Millisecond)
	}
	return false
}

// apply injects one fault, holds it, heals it and returns its record.
func (n *Nemesis) apply(ctx context.Context, kind string) (f Fault) {
	f = Fault{Type: kind}
	leaderOr := func() *Host {
		if l := n.leader(ctx); l != nil {
			return l
		}
		f.Detail = "no leader found; random node"
		return n.randomHost()
	}
	hold := n.cfg.Hold
	fail := func(err error) {
		if err != nil && f.Err == "" {
			f.Err = err.Error()
		}
	}
	var heal func()
	switch kind {
	case FaultKillRandom, FaultKillLeader:
		t := n.randomHost()
		if kind == FaultKillLeader {
			t = leaderOr()
		}
		f.Target = t.Name
		f.Start = n.h.Now()
		t.Kill()
		heal = func() { fail(t.Restart()) }
	case FaultPauseRandom, FaultPauseLeader:
		t := n.randomHost()
		if kind == FaultPauseLeader {
			t = leaderOr()
		}
		f.Target = t.Name
		hold = 1500*time.Millisecond + time.Duration(n.r.Int64N(int64(1500*time.Millisecond)))
		f.Start = n.h.Now()
		fail(t.Pause())
		heal = func() { fail(t.Resume()) }
	case FaultPartitionLeader:
		t := leaderOr()
		f.Target = t.Name
		f.Start = n.h.Now()
		fail(n.hosts.Partition([]*Host{t}, n.others(t)))
	case FaultPartitionHalves:
		n.partitionHalves(&f, fail)
	case FaultPartitionRing:
		n.partitionRing(&f, fail)
	case FaultPartitionOneWay:
		t := leaderOr()
		f.Target = t.Name + "->*"
		f.Start = n.h.Now()
		for _, o := range n.others(t) {
			fail(n.hosts.Block(t, o))
		}
	case FaultLoss:
		t := n.randomHost()
		pct := 20 + n.r.IntN(21)
		f.Target = t.Name
		f.Detail = fmt.Sprintf("%d%% loss in and out", pct)
		f.Start = n.h.Now()
		fail(n.hosts.Loss(t, pct))
	case FaultPartitionHeal:
		// A follower isolated long enough to campaign (its term climbs),
		// healed while writes go on, then isolated and healed again quickly.
		t := n.randomFollower(ctx)
		f.Target = t.Name
		f.Start = n.h.Now()
		fail(n.hosts.Partition([]*Host{t}, n.others(t)))
		sleepCtx(context.Background(), hold)
		fail(n.hosts.Heal())
		sleepCtx(context.Background(), 700*time.Millisecond)
		fail(n.hosts.Partition([]*Host{t}, n.others(t)))
		hold = 1200 * time.Millisecond
	case FaultKillPServer:
		t := n.pserverHost(ctx)
		if t == nil {
			f.Detail = "no pserver slot served; random node"
			t = n.randomHost()
		}
		f.Target = t.Name
		f.Start = n.h.Now()
		t.Kill()
		heal = func() { fail(t.Restart()) }
	case FaultMembership:
		// Removing and adding a node under load: a follower stops gracefully
		// (it leaves gossip and the leader removes it from the Raft
		// configuration), then restarts and is added back.
		heal = n.membership(ctx, &f, fail)
	default:
		f.Err = "unknown fault kind"
		f.Start = n.h.Now()
	}
	n.h.Notef("nemesis: %s on %s started %s", f.Type, f.Target, f.Detail)
	// Hold the fault (not cut short by ctx: a fault always gets healed, and
	// the schedule is bounded by the caller's fault count).
	sleepCtx(context.Background(), hold)
	if heal != nil {
		heal()
	}
	fail(n.hosts.Heal())
	f.End = n.h.Now()
	n.h.Notef("nemesis: %s on %s healed", f.Type, f.Target)
	return f
}

// randomFollower is a random node other than the leader (any node if no
// leader is found).
func (n *Nemesis) randomFollower(ctx context.Context) *Host {
	l := n.leader(ctx)
	var t *Host
	for _, x := range n.r.Perm(len(n.hosts.Nodes)) {
		if n.hosts.Nodes[x] != l {
			t = n.hosts.Nodes[x]
			break
		}
	}
	return t
}

// partitionHalves splits the nodes into two random halves (FaultPartitionHalves).
func (n *Nemesis) partitionHalves(f *Fault, fail func(error)) {
	perm := n.r.Perm(len(n.hosts.Nodes))
	var a, b []*Host
	for i, p := range perm {
		if i < len(perm)/2 {
			a = append(a, n.hosts.Nodes[p])
		} else {
			b = append(b, n.hosts.Nodes[p])
		}
	}
	f.Target = names(a) + "|" + names(b)
	f.Start = n.h.Now()
	fail(n.hosts.Partition(a, b))
}

// partitionRing lets each node talk only to its neighbours in a random
// ring (FaultPartitionRing).
func (n *Nemesis) partitionRing(f *Fault, fail func(error)) {
	// Each node talks only to its neighbours in a random ring: with 5
	// nodes every node sees a majority (itself + 2) but no two agree on
	// which; with 3 it is a bridge: one node sees both, they not each other.
	perm := n.r.Perm(len(n.hosts.Nodes))
	k := len(perm)
	var desc []string
	if k <= 3 {
		a, bridge, c := n.hosts.Nodes[perm[0]], n.hosts.Nodes[perm[1]], n.hosts.Nodes[perm[2%k]]
		f.Target = fmt.Sprintf("%s<-%s->%s", a.Name, bridge.Name, c.Name)
		f.Start = n.h.Now()
		fail(n.hosts.Partition([]*Host{a}, []*Host{c}))
	} else {
		pos := map[int]int{}
		for i, p := range perm {
			pos[p] = i
			desc = append(desc, n.hosts.Nodes[p].Name)
		}
		f.Target = "ring " + strings.Join(desc, "-")
		f.Start = n.h.Now()
		for i := 0; i < k; i++ {
			for j := 0; j < k; j++ {
				d := (pos[i] - pos[j] + k) % k
				if i != j && d != 1 && d != k-1 {
					fail(n.hosts.Block(n.hosts.Nodes[i], n.hosts.Nodes[j]))
				}
			}
		}
	}
}

// membership stops a follower gracefully (it leaves gossip and the leader
// removes it from the Raft configuration); the returned heal restarts it
// and checks that it is added back (FaultMembership).
func (n *Nemesis) membership(ctx context.Context, f *Fault, fail func(error)) (heal func()) {
	t := n.randomFollower(ctx)
	f.Target = t.Name
	f.Start = n.h.Now()
	t.Stop(10 * time.Second)
	removed := n.waitMember(ctx, t, false, 15*time.Second)
	heal = func() {
		fail(t.Restart())
		back := n.waitMember(ctx, t, true, 20*time.Second)
		f.Detail = fmt.Sprintf("removed from the Raft configuration: %v; added back: %v", removed, back)
		if !removed || !back {
			fail(fmt.Errorf("membership change not observed (removed %v, added back %v)", removed, back))
		}
	}
	return heal
}
