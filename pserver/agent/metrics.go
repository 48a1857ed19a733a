package agent

import "github.com/prometheus/client_golang/prometheus"

// Checkpoint metrics of the pserver agents of this process (a node's
// /metrics registers Collectors): how long a checkpoint took from the
// slot's snapshot to the committed pointer (encoding, local write,
// replication, fenced pointer Txn), and the bytes committed.
var (
	checkpointSeconds = prometheus.NewHistogram(prometheus.HistogramOpts{
		Name:    "raftps_checkpoint_duration_seconds",
		Help:    "Time from a pserver slot's snapshot to its committed checkpoint pointer (encode, write, replicate, commit).",
		Buckets: prometheus.ExponentialBuckets(0.005, 2, 14),
	})
	metricFailovers = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "raftps_pserver_failovers_total",
		Help: "Replicated pserver slots this process's agents started serving as a promoted backup (issue 34).",
	})
	metricReplicationLag = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "raftps_pserver_replication_lag_updates",
		Help: "Updates a replicated primary slot applied that its in-sync backups have not all acknowledged yet (pushes waiting for their replication).",
	}, []string{"job", "slot"})
	metricRereplications = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "raftps_pserver_rereplications_total",
		Help: "New backups of replicated pserver slots this process's agents built from a primary's snapshot and joined to the in-sync set (issue 34).",
	})
	checkpointBytes = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "raftps_checkpoint_written_bytes_total",
		Help: "Bytes of the checkpoints this process's pserver slots committed (blobs, before replication).",
	})
)

// Collectors returns the agents' Prometheus collectors (process-wide).
func Collectors() []prometheus.Collector {
	return []prometheus.Collector{checkpointSeconds, checkpointBytes, metricFailovers, metricReplicationLag, metricRereplications}
}
