package master

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"time"

	pb "github.com/raftps/raftps/api/raftpspb"
	"github.com/raftps/raftps/api/rpctypes"
	"github.com/raftps/raftps/fsm"
	"github.com/raftps/raftps/schema"
)

// Fast detection of a replicated slot's dead primary (issue 34;
// pserver/DESIGN.md, "Replicated slots", "Detection").

// DefaultFailoverTimeout is Suspects' default detection timeout: a
// suspect primary's probe gets this long to answer.
const DefaultFailoverTimeout = 300 * time.Millisecond

// Prober probes addr, the pserver endpoint of the primary of (job,
// slot), within ctx's deadline: nil if it answered, an error if it could
// not be reached (psclient.Probe over the node's mutual TLS dial).
type Prober func(ctx context.Context, addr, job string, slot int32) error

// Verdicts of a report (ReportSuspectResponse.verdict).
const (
	VerdictPromoted      = "promoted"
	VerdictHealthy       = "healthy"
	VerdictMoved         = "moved"
	VerdictPending       = "pending"
	VerdictNotReplicated = "not replicated"
	VerdictNoBackup      = "no alive backup"
)

// Suspects confirms reports of suspect primaries (a trainer's failed
// call, a broken replication stream, gossip's suspicion: FollowGossip)
// before it acts: it probes the
// primary's pserver endpoint with a deadline of Timeout and, only if the
// probe fails, promotes an alive in-sync backup with the one
// epoch-compared Txn of a failover (promoteSlot), which also frees the
// old primary's claim so that the promoted node serves at once. A false
// suspicion (a probe that fails though the primary lives: a pause, a
// partition) costs a spurious failover, never two acknowledging
// primaries: the backups refuse the old epoch (pserver/DESIGN.md).
//
// Reports are cheap and cannot force a failover: a slot is probed at
// most once per Timeout whatever the number of reports (the others get
// VerdictPending), a report naming an address that is not the record's
// primary is answered VerdictMoved without a probe, and a primary that
// answers its probe is left alone. Safe for concurrent use.
type Suspects struct {
	store   Store
	members Members
	probe   Prober
	timeout time.Duration
	log     *slog.Logger

	mu    sync.Mutex
	slots map[slotRef]time.Time // when each slot's last probe started
}

type slotRef struct {
	job  string
	slot int32
}

// NewSuspects returns the report handler of a node (Service.Suspects).
// timeout <= 0 is DefaultFailoverTimeout; a nil log is slog.Default().
func NewSuspects(store Store, members Members, probe Prober, timeout time.Duration, log *slog.Logger) *Suspects {
	if timeout <= 0 {
		timeout = DefaultFailoverTimeout
	}
	if log == nil {
		log = slog.Default()
	}
	return &Suspects{store: store, members: members, probe: probe, timeout: timeout, log: log, slots: map[slotRef]time.Time{}}
}

// Timeout is the detection timeout (--pserver-failover-timeout).
func (s *Suspects) Timeout() time.Duration { return s.timeout }

// Report handles one report (Master.ReportSuspect): reads the slot's
// replica record, probes its primary (at most once per Timeout per
// slot) and promotes a backup if the probe fails. Errors: ErrInvalid for
// an empty job or a negative slot; the store's errors.
func (s *Suspects) Report(ctx context.Context, req *pb.ReportSuspectRequest) (*pb.ReportSuspectResponse, error) {
	out, err := s.report(ctx, req)
	verdict := out.GetVerdict()
	if err != nil {
		verdict = "error"
	}
	metricSuspectReports.WithLabelValues(reportSource(req), verdict).Inc()
	return out, err
}

// report is Report, uncounted.
func (s *Suspects) report(ctx context.Context, req *pb.ReportSuspectRequest) (*pb.ReportSuspectResponse, error) {
	job, slot := req.GetJob(), req.GetSlot()
	if job == "" || slot < 0 {
		return nil, fmt.Errorf("%w: report names job %q slot %d: job and a slot >= 0 are required", fsm.ErrInvalid, job, slot)
	}
	h, ok, err := s.record(ctx, job, slot)
	if err != nil || !ok {
		return &pb.ReportSuspectResponse{Verdict: VerdictNotReplicated}, err
	}
	out := &pb.ReportSuspectResponse{Epoch: h.rec.Epoch, Primary: h.rec.Primary.Node}
	if a := req.GetAddr(); a != "" && a != h.rec.Primary.Addr {
		out.Verdict, out.Moved = VerdictMoved, true
		return out, nil
	}
	if !s.begin(slotRef{job, slot}) {
		out.Verdict = VerdictPending
		return out, nil
	}
	pctx, cancel := context.WithTimeout(ctx, s.timeout)
	perr := s.probe(pctx, h.rec.Primary.Addr, job, slot)
	cancel()
	if perr == nil {
		out.Verdict = VerdictHealthy
		s.log.Info("suspect primary answered its probe: not failed over", "job", job, "slot", slot, "primary", h.rec.Primary.Node,
			"trainer", req.GetTrainer(), "reason", req.GetReason())
		return out, nil
	}
	s.log.Warn("suspect primary failed its probe: failing over", "job", job, "slot", slot, "primary", h.rec.Primary.Node,
		"addr", h.rec.Primary.Addr, "probe", perr, "trainer", req.GetTrainer(), "reason", req.GetReason())
	to, epoch := promoteSlot(ctx, s.store, s.log, h.rec.Primary.Node, aliveNodes(s.members), h, false, true)
	if to == "" {
		out.Verdict = VerdictNoBackup
		if h2, ok, err := s.record(ctx, job, slot); err == nil && ok && h2.rec.Primary.Node != h.rec.Primary.Node {
			out.Verdict, out.Epoch, out.Primary, out.Moved = VerdictMoved, h2.rec.Epoch, h2.rec.Primary.Node, true
		}
		return out, nil
	}
	out.Verdict, out.Epoch, out.Primary, out.Moved = VerdictPromoted, epoch, to, true
	s.releaseTrainers(ctx, job, h.rec.Primary.Node)
	return out, nil
}

// checkAllParallel bounds CheckAll's reports in flight.
const checkAllParallel = 32

// CheckAll checks the primary of every replicated slot as a report of it
// would (Report, reason given: at most one probe per slot per Timeout, a
// promotion only if the probe fails), all slots at once, and returns the
// verdicts' count by kind. The master's leader loop runs it as it takes
// office (Config.OnLeader): a primary that died with the old leader, or
// while there was none, is failed over within the failover timeout of
// the election, with no report needed (the reports sent meanwhile failed
// for want of a leader, and gossip's node-gone comes about a second
// later). Safety is Report's: the promotion is the epoch-compared Txn.
func (s *Suspects) CheckAll(ctx context.Context, reason string) map[string]int {
	var (
		wg       sync.WaitGroup
		mu       sync.Mutex
		verdicts = map[string]int{}
		sem      = make(chan struct{}, checkAllParallel)
	)
	for _, h := range s.replicaSlots(ctx, func(schema.ReplicaRecord) bool { return true }) {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			out, err := s.Report(ctx, &pb.ReportSuspectRequest{Job: h.job, Slot: h.slot, Reason: reason})
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				verdicts["error"]++
				s.log.Warn("check a replicated slot's primary", "job", h.job, "slot", h.slot, "err", err)
				return
			}
			verdicts[out.GetVerdict()]++
		}()
	}
	wg.Wait()
	return verdicts
}

// releaseTrainers requeues the tasks of job's trainers registered from
// node (schema.TrainerRecord.Node), whose pserver just failed its probe,
// and revokes their leases, as nodeGone does when gossip declares node
// dead. A sync step waits for every registered trainer, so without this
// a dead node's trainer held the job's step until gossip's detection
// (about 1.1 s) after the slot was already served again. A trainer's
// lease is its agent's own session (never a slot claim's), so the revoke
// touches nothing else; a trainer that lives after all (a false
// suspicion) finds its lease lost and registers again, and its task is
// retaken by epoch (fsm/jobq). Failures are logged: gossip's nodeGone
// remains the backstop.
func (s *Suspects) releaseTrainers(ctx context.Context, job, node string) {
	key, end := schema.PrefixRange(schema.TrainerPrefix(job))
	resp, err := s.store.Range(ctx, &pb.RangeRequest{Serializable: true, Key: key, RangeEnd: end})
	if err != nil {
		s.log.Warn("release a failed primary's trainers: read", "job", job, "node", node, "err", err)
		return
	}
	revoked := map[int64]bool{}
	for _, kv := range resp.Kvs {
		if holder, ok := schema.NodeOf(kv.Value); !ok || holder != node {
			continue
		}
		_, _, id, _ := schema.ParseJobKey(string(kv.Key))
		actx, cancel := context.WithTimeout(ctx, applyTimeout)
		out, err := s.store.RequeueTrainer(actx, &pb.RequeueTrainerRequest{Job: job, Trainer: id, Reason: "its node " + node + " failed a pserver probe"})
		if err == nil && kv.Lease != 0 && !revoked[kv.Lease] {
			revoked[kv.Lease] = true
			_, err = s.store.LeaseRevoke(actx, &pb.LeaseRevokeRequest{Id: kv.Lease})
		}
		cancel()
		if err != nil {
			s.log.Warn("release a failed primary's trainer", "job", job, "trainer", id, "node", node, "err", err)
			continue
		}
		s.log.Info("trainer of a failed primary's node released: tasks requeued, lease revoked", "job", job, "trainer", id,
			"node", node, "requeued", out.Requeued)
	}
}

// begin starts a probe of r unless one started within Timeout.
func (s *Suspects) begin(r slotRef) bool {
	now := time.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	if at, ok := s.slots[r]; ok && now.Sub(at) < s.timeout {
		return false
	}
	for k, at := range s.slots { // bounded by the slots probed within a Timeout
		if now.Sub(at) >= s.timeout {
			delete(s.slots, k)
		}
	}
	s.slots[r] = now
	return true
}

// record reads (job, slot)'s replica record (linearizable).
func (s *Suspects) record(ctx context.Context, job string, slot int32) (replicated, bool, error) {
	resp, err := s.store.Range(ctx, &pb.RangeRequest{Key: []byte(schema.ReplicaKey(job, slot))})
	if err != nil {
		return replicated{}, false, err
	}
	if len(resp.Kvs) == 0 {
		return replicated{}, false, nil
	}
	rec, err := schema.ParseReplicaRecord(resp.Kvs[0].Value, resp.Kvs[0].ModRevision)
	if err != nil {
		return replicated{}, false, fmt.Errorf("%w: job %q slot %d: %v", fsm.ErrFailedPrecondition, job, slot, err)
	}
	return replicated{job: job, slot: slot, rec: rec}, true, nil
}

// ReportSuspect implements Master.ReportSuspect: Suspects.Report on this
// node (the probe is this node's; the promotion is the leader's Txn, as
// every write). Errors: FailedPrecondition if the node takes no reports
// (no Suspects), InvalidArgument, and the store's (Unavailable without a
// leader). A trainer certificate reports only for its jobs, as itself
// (security's table).
func (s *Service) ReportSuspect(ctx context.Context, req *pb.ReportSuspectRequest) (*pb.ReportSuspectResponse, error) {
	if s.Suspects == nil {
		return nil, rpctypes.ToStatus(fmt.Errorf("%w: this node takes no suspect reports", fsm.ErrFailedPrecondition))
	}
	out, err := s.Suspects.Report(ctx, req)
	if err != nil {
		return nil, rpctypes.ToStatus(err)
	}
	return out, nil
}
