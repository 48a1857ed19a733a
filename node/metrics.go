package node

import (
	"strings"

	"github.com/prometheus/client_golang/prometheus"

	pb "github.com/raftps/raftps/api/raftpspb"

	"github.com/raftps/raftps/gossip"
)

// nodeCollector exports what the Raft store's collector does not: gossip
// membership and jobs, read at scrape time.
type nodeCollector struct {
	n             *Node
	members, jobs *prometheus.Desc
}

func newNodeCollector(n *Node) *nodeCollector {
	return &nodeCollector{n: n,
		members: prometheus.NewDesc("raftps_gossip_members", "Gossip members by status.", []string{"status"}, nil),
		jobs:    prometheus.NewDesc("raftps_jobs", "Training jobs in the FSM by state.", []string{"state"}, nil),
	}
}

func (c *nodeCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.members
	ch <- c.jobs
}

func (c *nodeCollector) Collect(ch chan<- prometheus.Metric) {
	counts := map[string]int{}
	for _, m := range c.n.gossip.Members() {
		counts[m.Status.String()]++
	}
	for _, s := range []gossip.Status{gossip.StatusAlive, gossip.StatusSuspect, gossip.StatusDead, gossip.StatusLeft} {
		ch <- prometheus.MustNewConstMetric(c.members, prometheus.GaugeValue, float64(counts[s.String()]), s.String())
	}
	jobs := map[string]int{}
	for _, j := range c.n.fsm.Jobs().Jobs() {
		jobs[jobState(j.State)]++
	}
	for st, k := range jobs {
		ch <- prometheus.MustNewConstMetric(c.jobs, prometheus.GaugeValue, float64(k), st)
	}
}

// jobState is s in lower case without its prefix ("running").
func jobState(s pb.JobState) string {
	return strings.ToLower(strings.TrimPrefix(s.String(), "JOB_"))
}
