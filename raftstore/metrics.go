package raftstore

import (
	"strings"
	"sync/atomic"

	"github.com/hashicorp/raft"
	"github.com/prometheus/client_golang/prometheus"
)

// storeMetrics are the store's Prometheus metrics; gauges are read from
// Raft and the FSM at scrape time.
type storeMetrics struct {
	s            *Store
	applyLatency prometheus.Histogram
	batchSize    prometheus.Histogram
	entries      atomic.Uint64 // log entries proposed by the batcher
	commands     atomic.Uint64 // commands in those entries

	state, term, commit, applied, lastIndex, revision, leases, entriesDesc, commandsDesc *prometheus.Desc
}

func newStoreMetrics(s *Store) *storeMetrics {
	c := prometheus.Labels{"node": s.cfg.ID}
	d := func(name, help string) *prometheus.Desc {
		return prometheus.NewDesc("raftps_raft_"+name, help, nil, c)
	}
	return &storeMetrics{
		s: s,
		applyLatency: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "raftps_raft_apply_seconds", Help: "Time from proposal to applied result of a command on the leader.",
			ConstLabels: c, Buckets: prometheus.ExponentialBuckets(0.0001, 2, 18),
		}),
		batchSize: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "raftps_raft_batch_commands", Help: "Commands per proposed Raft log entry.",
			ConstLabels: c, Buckets: prometheus.ExponentialBuckets(1, 2, 10),
		}),
		state:        prometheus.NewDesc("raftps_raft_state", "Raft state of this server: 1 for its state (follower, candidate, leader, shutdown), 0 for the others.", []string{"state"}, c),
		term:         d("term", "Current Raft term."),
		commit:       d("commit_index", "Raft commit index."),
		applied:      d("applied_index", "Last log index applied to the FSM."),
		lastIndex:    d("last_log_index", "Last Raft log index."),
		revision:     d("revision", "Key/value store revision."),
		leases:       d("leases", "Leases with a timer on this leader (0 on followers)."),
		entriesDesc:  d("proposed_entries_total", "Raft log entries proposed by this server's batcher."),
		commandsDesc: d("proposed_commands_total", "Commands carried by those entries."),
	}
}

// Collector returns the store's Prometheus collector: raft state, term,
// commit/applied/last log index, revision, lease count, apply latency
// (seconds) and batch size (commands per entry). Register it once.
func (s *Store) Collector() prometheus.Collector { return s.metrics }

// BatchStats returns the number of log entries the batcher proposed and
// the number of commands they carried (commands/entries is the coalescing factor).
func (s *Store) BatchStats() (entries, commands uint64) {
	return s.metrics.entries.Load(), s.metrics.commands.Load()
}

func (m *storeMetrics) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{m.state, m.term, m.commit, m.applied, m.lastIndex, m.revision, m.leases, m.entriesDesc, m.commandsDesc} {
		ch <- d
	}
	m.applyLatency.Describe(ch)
	m.batchSize.Describe(ch)
}

func (m *storeMetrics) Collect(ch chan<- prometheus.Metric) {
	st := m.s.Stats()
	state := raft.Shutdown
	if m.s.raft != nil {
		state = m.s.raft.State()
	}
	for _, s := range []raft.RaftState{raft.Follower, raft.Candidate, raft.Leader, raft.Shutdown} {
		v := 0.0
		if s == state {
			v = 1
		}
		ch <- prometheus.MustNewConstMetric(m.state, prometheus.GaugeValue, v, strings.ToLower(s.String()))
	}
	g := func(d *prometheus.Desc, v float64) { ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v) }
	g(m.term, float64(st.Term))
	g(m.commit, float64(st.CommitIndex))
	g(m.applied, float64(st.AppliedIndex))
	g(m.lastIndex, float64(st.LastLogIndex))
	g(m.revision, float64(st.Revision))
	g(m.leases, float64(m.s.leases.count()))
	ch <- prometheus.MustNewConstMetric(m.entriesDesc, prometheus.CounterValue, float64(m.entries.Load()))
	ch <- prometheus.MustNewConstMetric(m.commandsDesc, prometheus.CounterValue, float64(m.commands.Load()))
	m.applyLatency.Collect(ch)
	m.batchSize.Collect(ch)
}
