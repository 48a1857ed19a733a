package raftstore

import (
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/raft"
)

// corruptBarriers is a log store that reads every barrier entry back with
// other bytes than were written (the FSM never sees barriers, so only the
// verifier can notice): a store that does not give back what Raft gave it.
type corruptBarriers struct{ raft.LogStore }

func (c corruptBarriers) GetLog(index uint64, l *raft.Log) error {
	if err := c.LogStore.GetLog(index, l); err != nil {
		return err
	}
	if l.Type == raft.LogBarrier {
		l.Data = []byte("corrupt")
	}
	return nil
}

// With LogVerifyInterval, checkpoints reach every server and each checks
// its log store against the leader's checksum: the servers whose stores
// read back what was written verify ranges and fail none; the server whose
// store corrupts entries on read reports failures, wherever the leader is.
func TestLogVerification(t *testing.T) {
	forEachLogStore(t, func(t *testing.T) {
		nc := mustNetCluster(t, 3, func(s *Store) {
			s.cfg.LogVerifyInterval = 50 * time.Millisecond
			if s.cfg.ID == "n3" {
				s.wrapLogs = func(l raft.LogStore) raft.LogStore { return corruptBarriers{l} }
			}
		})
		ctx := ctxT(t, 30*time.Second)
		for i := 0; ; i++ {
			mustPut(ctx, t, nc.leader(ctx), "/v", "x")
			done := true
			for _, s := range nc.live() {
				st := s.LogVerification()
				if s.ID() == "n3" {
					done = done && st.Failed >= 2
				} else {
					done = done && st.Verified >= 2
				}
			}
			if done {
				break
			}
			if ctx.Err() != nil {
				for _, s := range nc.live() {
					t.Logf("%s: %+v", s.ID(), s.LogVerification())
				}
				t.Fatal("no verification reports within 30 s")
			}
			time.Sleep(20 * time.Millisecond)
		}
		for _, s := range nc.live() {
			st := s.LogVerification()
			t.Logf("%s: %+v", s.ID(), st)
			if s.ID() != "n3" && st.Failed != 0 {
				t.Fatalf("%s: a sound log store failed verification: %+v", s.ID(), st)
			}
			if s.ID() == "n3" && !strings.Contains(st.LastError, "checksum") {
				t.Fatalf("n3: last error %q does not name the checksum", st.LastError)
			}
		}
	})
}
