package fsm

import (
	"fmt"
	"strings"
	"testing"

	pb "github.com/raftps/raftps/api/raftpspb"
	"github.com/raftps/raftps/schema"
)

// restoredCopy returns a new FSM restored from a snapshot of f.
func restoredCopy(t *testing.T, f *testFSM) *testFSM {
	t.Helper()
	g := newTestFSM(t)
	if err := restore(g.FSM, mustSnapshot(t, f.FSM)); err != nil {
		t.Fatal(err)
	}
	g.index = f.index
	return g
}

func putErr(f *testFSM, k, v string) error {
	_, err := f.do(pb.CommandType_COMMAND_PUT, &pb.PutRequest{Key: []byte(k), Value: []byte(v)}, nil)
	return err
}

// TestJobQuota is issue 32 hole 6 (per job): a trainer wrote unlimited
// 1.4 MB values under /jobs/<job>/trainers/<name>-<anything>. A job's
// keys now hold at most MaxJobKeyBytes and MaxJobKeys; past them a write
// is refused (ErrQuotaExceeded, naming the job), other jobs are not
// affected, the usage survives a snapshot and restore, and deleting frees
// room.
func TestJobQuota(t *testing.T) {
	f := newTestFSM(t)
	big := strings.Repeat("x", 1400<<10)
	var err error
	for n := 0; err == nil; n++ {
		if n > 100 {
			t.Fatalf("%d puts of 1.4 MB under one job, none refused", n)
		}
		err = putErr(f, fmt.Sprintf("/jobs/a/trainers/t-%d", n), big)
	}
	wantErr(t, err, ErrQuotaExceeded)
	if !strings.Contains(err.Error(), `job "a"`) {
		t.Fatalf("error %q does not name the job", err)
	}
	keys, bytes := f.JobUsage("a")
	if bytes > MaxJobKeyBytes || bytes < MaxJobKeyBytes-int64(len(big))-64 {
		t.Fatalf("job a holds %d keys of %d bytes, want just under %d", keys, bytes, MaxJobKeyBytes)
	}
	f.put("/jobs/b/trainers/t", "1")
	f.put("/elsewhere", big)

	g := restoredCopy(t, f)
	if k, b := g.JobUsage("a"); k != keys || b != bytes {
		t.Fatalf("restored usage %d keys %d bytes, want %d and %d", k, b, keys, bytes)
	}
	wantErr(t, putErr(g, "/jobs/a/trainers/t-x", big), ErrQuotaExceeded)
	if _, err := g.do(pb.CommandType_COMMAND_DELETE_RANGE, &pb.DeleteRangeRequest{Key: []byte("/jobs/a/trainers/t-0")}, nil); err != nil {
		t.Fatal(err)
	}
	if err := putErr(g, "/jobs/a/trainers/t-x", big); err != nil {
		t.Fatalf("put after a delete freed room: %v", err)
	}

	// Keys: MaxJobKeys small keys fill job c, in txns of 1000 puts.
	for i := 0; i < MaxJobKeys/1000; i++ {
		txn := &pb.TxnRequest{}
		for j := range 1000 {
			txn.Success = append(txn.Success, &pb.RequestOp{Request: &pb.RequestOp_RequestPut{
				RequestPut: &pb.PutRequest{Key: fmt.Appendf(nil, "/jobs/c/trainers/%d-%d", i, j)}}})
		}
		if _, err := f.do(pb.CommandType_COMMAND_TXN, txn, nil); err != nil {
			t.Fatalf("txn %d: %v", i, err)
		}
	}
	wantErr(t, putErr(f, "/jobs/c/trainers/one-more", ""), ErrQuotaExceeded)
	f.put("/jobs/c/trainers/0-0", "overwrite") // no new key
}

// TestNoSpaceAlarm: while schema.NoSpaceAlarmKey exists every write that
// adds keys or bytes is refused (ErrNoSpace) on every replica, deletes go
// on, it survives a snapshot and restore, and deleting the key disarms it.
func TestNoSpaceAlarm(t *testing.T) {
	f := newTestFSM(t)
	f.put("/x", "1")
	f.put(schema.NoSpaceAlarmKey, "NOSPACE")
	wantErr(t, putErr(f, "/y", "1"), ErrNoSpace)
	_, err := f.do(pb.CommandType_COMMAND_TXN, &pb.TxnRequest{Success: []*pb.RequestOp{opPut("/y", "1")}}, nil)
	wantErr(t, err, ErrNoSpace)
	if _, err := f.do(pb.CommandType_COMMAND_DELETE_RANGE, &pb.DeleteRangeRequest{Key: []byte("/x")}, nil); err != nil {
		t.Fatalf("delete under the alarm: %v", err)
	}
	g := restoredCopy(t, f)
	wantErr(t, putErr(g, "/y", "1"), ErrNoSpace)
	if _, err := g.do(pb.CommandType_COMMAND_DELETE_RANGE, &pb.DeleteRangeRequest{Key: []byte(schema.NoSpaceAlarmKey)}, nil); err != nil {
		t.Fatal(err)
	}
	if err := putErr(g, "/y", "1"); err != nil {
		t.Fatalf("put after the alarm was disarmed: %v", err)
	}
}

// TestLeaseCap: a trainer could grant any number of leases; past the
// store's cap (MaxLeases, shrunk here) a grant is refused with
// ErrQuotaExceeded, and a revoke makes room.
func TestLeaseCap(t *testing.T) {
	f := newTestFSM(t)
	f.maxLeases = 3
	for range 3 {
		f.grant(0, 10)
	}
	_, err := f.do(pb.CommandType_COMMAND_LEASE_GRANT, &pb.LeaseGrantRequest{Ttl: 10}, nil)
	wantErr(t, err, ErrQuotaExceeded)
	if _, err := f.do(pb.CommandType_COMMAND_LEASE_REVOKE, &pb.LeaseRevokeRequest{Id: 1}, nil); err != nil {
		t.Fatal(err)
	}
	f.grant(0, 10)
}
