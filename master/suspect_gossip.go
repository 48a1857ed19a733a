package master

import (
	"context"
	"sync"

	"github.com/prometheus/client_golang/prometheus"

	pb "github.com/raftps/raftps/api/raftpspb"
	"github.com/raftps/raftps/gossip"
	"github.com/raftps/raftps/schema"
)

// Sources of a report (ReportSuspectRequest.source): what raised the
// suspicion. Each is handled the same way (probe, then promote only if
// the probe fails); the source labels raftps_pserver_suspect_reports_total.
const (
	SourceTrainer     = "trainer"     // a trainer's pull or push failed at the transport
	SourceReplication = "replication" // a backup's replication stream from the primary broke
	SourceGossip      = "gossip"      // memberlist suspects the primary's node (FollowGossip)
)

var metricSuspectReports = prometheus.NewCounterVec(prometheus.CounterOpts{
	Name: "raftps_pserver_suspect_reports_total",
	Help: "Reports of a suspect replicated-slot primary this process's master took, by source (trainer, replication, gossip, other) and verdict (promoted, healthy, moved, pending, not replicated, no alive backup, error).",
}, []string{"source", "verdict"})

// Collectors returns the master's Prometheus collectors (process-wide).
func Collectors() []prometheus.Collector { return []prometheus.Collector{metricSuspectReports} }

// reportSource is req's source label: "trainer" for a report naming a
// trainer (whatever its source says: a trainer certificate reports as
// itself), else its source if known, else "other".
func reportSource(req *pb.ReportSuspectRequest) string {
	switch src := req.GetSource(); {
	case req.GetTrainer() != "":
		return SourceTrainer
	case src == SourceReplication || src == SourceGossip:
		return src
	}
	return "other"
}

// FollowGossip reports, while this node is the Raft leader, every
// replicated slot whose primary's node gossip suspects (an EventSuspect:
// the node missed its probes and may still refute) until ctx ends: the
// third source of fast detection, beside a trainer's failed call and a
// backup's broken stream. Each report goes through Report, so the
// primary is probed before anything is written, and a false suspicion (a
// pause, a slow network) costs at most a spurious failover, never two
// acknowledging primaries (the backups refuse the old epoch). Only the
// leader reports: every node hears the suspicion, and one probe per slot
// is enough. It returns once its reports in flight are done.
func (s *Suspects) FollowGossip(ctx context.Context) {
	events, cancel := s.members.Subscribe()
	defer cancel()
	var wg sync.WaitGroup
	defer wg.Wait()
	for {
		select {
		case <-ctx.Done():
			return
		case ev, ok := <-events:
			if !ok {
				return
			}
			if ev.Type != gossip.EventSuspect || !s.store.IsLeader() {
				continue
			}
			wg.Go(func() { s.ReportNode(ctx, ev.Member.Meta.ID, "gossip suspects node "+ev.Member.Meta.ID) })
		}
	}
}

// ReportNode reports (Report, source gossip) every replicated slot whose
// record names node as its primary, concurrently, and returns the
// answers (nil if node is no slot's primary).
func (s *Suspects) ReportNode(ctx context.Context, node, reason string) []*pb.ReportSuspectResponse {
	slots := s.replicaSlots(ctx, func(r schema.ReplicaRecord) bool { return r.Primary.Node == node })
	out := make([]*pb.ReportSuspectResponse, len(slots))
	var wg sync.WaitGroup
	for i, h := range slots {
		wg.Go(func() {
			v, err := s.Report(ctx, &pb.ReportSuspectRequest{Job: h.job, Slot: h.slot, Addr: h.rec.Primary.Addr, Reason: reason, Source: SourceGossip})
			s.log.Info("gossip suspects a slot primary's node: reported", "job", h.job, "slot", h.slot, "node", node,
				"verdict", v.GetVerdict(), "err", err)
			out[i] = v
		})
	}
	wg.Wait()
	return out
}

// replicaSlots returns the replicated slots of every job whose record
// keep accepts. It reads each job's replica records (serializable: Report
// reads the record it acts on again, linearizably); a failed read is
// logged and skips that job.
func (s *Suspects) replicaSlots(ctx context.Context, keep func(schema.ReplicaRecord) bool) []replicated {
	var slots []replicated
	for _, j := range s.store.Jobs() {
		key, end := schema.PrefixRange(schema.ReplicaPrefix(j.GetName()))
		resp, err := s.store.Range(ctx, &pb.RangeRequest{Serializable: true, Key: key, RangeEnd: end})
		if err != nil {
			s.log.Warn("read a job's replica records", "job", j.GetName(), "err", err)
			continue
		}
		for _, kv := range resp.Kvs {
			if job, slot, rec, ok := schema.ParseReplicaKV(kv); ok && keep(rec) {
				slots = append(slots, replicated{job: job, slot: slot, rec: rec})
			}
		}
	}
	return slots
}
