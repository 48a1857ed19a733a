package raftstore

import (
	"errors"
	"sync/atomic"
	"time"

	"github.com/hashicorp/raft"
	"github.com/hashicorp/raft-wal/metrics"
	"github.com/hashicorp/raft-wal/verifier"
)

// Log verification (Config.LogVerifyInterval) is Consul's raft-wal
// verifier (hashicorp/raft-wal/verifier) over either log store: every
// Raft barrier entry is a checkpoint. When the leader stores one, the
// verifier puts in it the checksum of the entries it stored since the last
// checkpoint; each follower, storing the replicated checkpoint, reads those
// entries back from its own log store and compares its checksum with the
// leader's. A mismatch is a log store that does not give back what Raft
// gave it (a corrupt disk, a store bug): the follower logs it at error
// level and counts it (LogVerification). The leader appends a barrier every
// LogVerifyInterval; the store's read barrier after each election is one too.

// LogVerifyStats counts this server's checkpoint verifications (Store.LogVerification).
type LogVerifyStats struct {
	// Verified counts ranges whose checksum read back matched the leader's.
	Verified uint64
	// Failed counts ranges that did not match, or could not be read back
	// (not counted: ranges already truncated by a snapshot).
	Failed uint64
	// LastError is the last failure's message ("" if none).
	LastError string
}

// isCheckpoint: barrier entries are the verifier's checkpoints (hashicorp/raft
// stores and replicates them but never hands them to the FSM).
func isCheckpoint(l *raft.Log) (bool, error) { return l.Type == raft.LogBarrier, nil }

// verifyLogs wraps logs in the verifier when Config.LogVerifyInterval is set.
func (s *Store) verifyLogs(logs raft.LogStore) raft.LogStore {
	if s.cfg.LogVerifyInterval <= 0 {
		return logs
	}
	s.verifier = verifier.NewLogStore(logs, isCheckpoint, s.reportVerification, &metrics.NoOpCollector{})
	return s.verifier
}

// reportVerification is the verifier's ReportFn (never called concurrently).
func (s *Store) reportVerification(r verifier.VerificationReport) {
	switch {
	case r.Err == nil:
		if r.ExpectedSum != 0 && r.ReadSum == r.ExpectedSum {
			s.verified.Add(1)
			s.logger.Debug("raft log range verified", "range", r.Range.String(), "sum", r.ReadSum)
		}
	case errors.Is(r.Err, verifier.ErrRangeMismatch):
		s.logger.Warn("raft log range not verifiable: already truncated here", "range", r.Range.String())
	default:
		s.verifyFailed.Add(1)
		msg := r.Err.Error()
		s.verifyErr.Store(&msg)
		s.logger.Error("raft log verification failed: this server's log store does not hold what the leader wrote",
			"range", r.Range.String(), "error", r.Err)
	}
}

// LogVerification returns the counts of this server's log verifications.
func (s *Store) LogVerification() LogVerifyStats {
	st := LogVerifyStats{Verified: s.verified.Load(), Failed: s.verifyFailed.Load()}
	if p := s.verifyErr.Load(); p != nil {
		st.LastError = *p
	}
	return st
}

// runCheckpoints appends a barrier (a verifier checkpoint) every
// LogVerifyInterval while this server leads, until Close.
func (s *Store) runCheckpoints(every time.Duration) {
	defer s.wg.Done()
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-s.stopping:
			return
		case <-t.C:
			if s.raft.State() == raft.Leader {
				if err := s.raft.Barrier(every).Error(); err != nil {
					s.logger.Debug("log verification checkpoint", "error", err)
				}
			}
		}
	}
}

// verifyState is the Store's verifier and its counts.
type verifyState struct {
	verifier     *verifier.LogStore // nil unless Config.LogVerifyInterval > 0
	verified     atomic.Uint64
	verifyFailed atomic.Uint64
	verifyErr    atomic.Pointer[string]
}
