package fsm

import (
	"bytes"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"

	pb "github.com/raftps/raftps/api/raftpspb"
)

// TestConcurrentReadsAndSnapshots runs readers and snapshot persists against
// a stream of applies (meant for -race). Every snapshot taken mid-stream must
// restore to a consistent state.
func TestConcurrentReadsAndSnapshots(t *testing.T) {
	f := newTestFSM(t)
	f.histRevs = 50
	f.SetObserver(&recorder{})
	var stop atomic.Bool
	var wg sync.WaitGroup
	errs := make(chan error, 16)
	reader := func(fn func() error) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for !stop.Load() {
				if err := fn(); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	reader(func() error {
		r, err := f.Range(&pb.RangeRequest{Key: []byte("k"), RangeEnd: []byte("l")})
		if err != nil {
			return err
		}
		for _, kv := range r.Kvs {
			if kv.ModRevision > r.Header.Revision {
				return fmt.Errorf("kv %v newer than header %d", kv, r.Header.Revision)
			}
		}
		return nil
	})
	reader(func() error {
		_, err := f.Events([]byte{0}, []byte{0}, f.CompactRevision()+1, 10)
		if isErr(err, ErrCompacted) {
			return nil // compaction overtook us
		}
		return err
	})
	reader(func() error {
		f.Leases()
		f.Jobs().Jobs()
		f.Jobs().Tasks("mnist")
		return nil
	})
	var snaps [][]byte
	var snapMu sync.Mutex
	reader(func() error {
		s, err := f.Snapshot()
		if err != nil {
			return err
		}
		sink := &bufSink{}
		if err := s.Persist(sink); err != nil {
			return err
		}
		snapMu.Lock()
		if len(snaps) < 20 {
			snaps = append(snaps, bytes.Clone(sink.Bytes()))
		}
		snapMu.Unlock()
		return nil
	})
	lease := f.grant(0, 10)
	f.do(pb.CommandType_COMMAND_SUBMIT_JOB, &pb.SubmitJobRequest{Spec: testJobSpec("mnist")}, nil)
	for i := range 500 {
		switch i % 5 {
		case 0, 1:
			f.put(fmt.Sprint("k", i%37), fmt.Sprint(i))
		case 2:
			f.putLease(fmt.Sprint("k", i%11), "l", lease)
		case 3:
			f.do(pb.CommandType_COMMAND_DELETE_RANGE, &pb.DeleteRangeRequest{Key: []byte(fmt.Sprint("k", i%7))}, nil)
		case 4:
			f.do(pb.CommandType_COMMAND_GET_TASK, &pb.GetTaskRequest{Job: "mnist", Trainer: fmt.Sprint("t", i%3)}, nil)
		}
		if i%100 == 99 {
			f.do(pb.CommandType_COMMAND_LEASE_REVOKE, &pb.LeaseRevokeRequest{Id: lease}, nil)
			lease = f.grant(0, 10)
		}
	}
	stop.Store(true)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	for _, b := range snaps {
		g := New(nil)
		if err := restore(g, b); err != nil {
			t.Fatal(err)
		}
		checkInvariants(t, g)
	}
	checkInvariants(t, f.FSM)
}
