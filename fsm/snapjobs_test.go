package fsm

import (
	"encoding/binary"
	"testing"

	"google.golang.org/protobuf/encoding/protowire"

	pb "github.com/raftps/raftps/api/raftpspb"
	"github.com/raftps/raftps/fsm/jobq"
)

// snapshotRecords returns the tag and length of each record of a snapshot.
func snapshotRecords(tb testing.TB, b []byte) (tags []byte, lens []uint64) {
	tb.Helper()
	b = b[len(snapMagic):]
	for len(b) > 0 && b[0] != tagEnd {
		n, m := binary.Uvarint(b[1:])
		if m <= 0 || uint64(len(b)) < 1+uint64(m)+n {
			tb.Fatalf("bad record at %d bytes from the end", len(b))
		}
		tags, lens = append(tags, b[0]), append(lens, n)
		b = b[1+m+int(n):]
	}
	return tags, lens
}

// TestSnapshotOneRecordPerJob is issue 12 item 8: the whole job queue was
// one snapshot record capped at 2 GiB, so enough jobs made every snapshot
// fail. Each job is now its own record, bounded by jobq.MaxJobRecordBytes.
// Before the fix the snapshot below held one tagJobs record.
func TestSnapshotOneRecordPerJob(t *testing.T) {
	f := newTestFSM(t)
	for _, name := range []string{"b", "a", "c"} {
		if _, err := f.do(pb.CommandType_COMMAND_SUBMIT_JOB, &pb.SubmitJobRequest{Spec: testJobSpec(name)}, nil); err != nil {
			t.Fatal(err)
		}
	}
	snap := mustSnapshot(t, f.FSM)
	tags, lens := snapshotRecords(t, snap)
	var jobs int
	for i, tag := range tags {
		switch tag {
		case tagJobs:
			t.Fatal("the job queue is one whole-queue record")
		case tagJob:
			jobs++
			if lens[i] > maxRecord(tagJob) || maxRecord(tagJob) > jobq.MaxJobRecordBytes+16 {
				t.Fatalf("job record of %d bytes, bound %d", lens[i], maxRecord(tagJob))
			}
		}
	}
	if jobs != 3 {
		t.Fatalf("%d job records for 3 jobs (tags %v)", jobs, tags)
	}
	g := New(nil)
	if err := restore(g, snap); err != nil {
		t.Fatal(err)
	}
	if again := mustSnapshot(t, g); string(again) != string(snap) {
		t.Fatal("restored state snapshots differently")
	}
}

// TestRestoreOlderSnapshotForm: a snapshot written before the clock and the
// per-job records (4-varint meta, one whole-queue record) still restores.
func TestRestoreOlderSnapshotForm(t *testing.T) {
	q := jobq.New()
	if _, err := q.Submit(1e18, &pb.SubmitJobRequest{Spec: testJobSpec("old")}); err != nil {
		t.Fatal(err)
	}
	blob, err := q.MarshalBinary()
	if err != nil {
		t.Fatal(err)
	}
	var body []byte
	meta := protowire.AppendVarint(nil, 7) // applied
	meta = protowire.AppendVarint(meta, 1) // revision
	meta = protowire.AppendVarint(meta, 0) // compact
	meta = protowire.AppendVarint(meta, 1) // next lease
	body = append(append(append(body, tagMeta), protowire.AppendVarint(nil, uint64(len(meta)))...), meta...)
	body = append(append(append(body, tagJobs), protowire.AppendVarint(nil, uint64(len(blob)))...), blob...)
	f := New(nil)
	if err := restore(f, seal(body)); err != nil {
		t.Fatalf("older snapshot: %v", err)
	}
	if _, ok := f.Jobs().Job("old"); !ok || f.AppliedIndex() != 7 || f.Clock() != 0 {
		t.Fatalf("older snapshot restored to applied %d clock %d", f.AppliedIndex(), f.Clock())
	}
	// Both forms at once are refused.
	rec := append(append([]byte{tagJob}, protowire.AppendVarint(nil, 1)...), 1)
	if err := restore(New(nil), seal(append(append([]byte{}, body...), rec...))); err == nil {
		t.Fatal("a snapshot with both job forms restored")
	}
}

// TestDeleteAndPruneThroughApply: job delete and prune as commands, with
// the deleted jobs named in the Notification (watchers re-read them), and
// prune ages judged in cluster time.
func TestDeleteAndPruneThroughApply(t *testing.T) {
	f := newTestFSM(t)
	rec := &recorder{}
	f.SetObserver(rec)
	const s = int64(1e9)
	for _, name := range []string{"a", "b", "c"} {
		f.applyAt(1, 100*s, 1, mustCmd(t, pb.CommandType_COMMAND_SUBMIT_JOB, &pb.SubmitJobRequest{Spec: testJobSpec(name)}))
		f.applyAt(1, 100*s, 1, mustCmd(t, pb.CommandType_COMMAND_CANCEL_JOB, &pb.CancelJobRequest{Name: name}))
	}
	r := f.applyAt(1, 0, 1, mustCmd(t, pb.CommandType_COMMAND_DELETE_JOB, &pb.DeleteJobRequest{Name: "b"}))[0]
	if decodeResult(t, r, &pb.DeleteJobResponse{}).Status.GetName() != "b" {
		t.Fatal("delete did not return the job")
	}
	if n := rec.notes[len(rec.notes)-1]; len(n.JobsChanged) != 1 || n.JobsChanged[0] != "b" {
		t.Fatalf("delete notified %v", n.JobsChanged)
	}
	// 10 s of cluster time later, prune what finished more than 5 s ago.
	r = f.applyAt(1, 0, 1+10*s, mustCmd(t, pb.CommandType_COMMAND_PRUNE_JOBS, &pb.PruneJobsRequest{MaxAgeMs: 5000}))[0]
	if got := decodeResult(t, r, &pb.PruneJobsResponse{}).Deleted; len(got) != 2 || got[0] != "a" || got[1] != "c" {
		t.Fatalf("prune deleted %v, want [a c]", got)
	}
	if n := rec.notes[len(rec.notes)-1]; len(n.JobsChanged) != 2 {
		t.Fatalf("prune notified %v", n.JobsChanged)
	}
	if js := f.Jobs().Jobs(); len(js) != 0 {
		t.Fatalf("%d jobs left", len(js))
	}
}
