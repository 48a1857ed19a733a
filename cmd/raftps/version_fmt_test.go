package main

import (
	"bytes"
	"strings"
	"testing"

	pb "github.com/raftps/raftps/api/raftpspb"
)

// TestCheckpointVersionShown (issue 37): a version after a rollback
// (epoch 1, step 3842: 1000003842) reads e1/s3842 where people read it
// (job status, checkpoint list's table), stays raw in -w json, and is
// accepted back in either form.
func TestCheckpointVersionShown(t *testing.T) {
	for v, want := range map[int64]string{0: "0", 3842: "3842", 1000003842: "e1/s3842", 2000000000: "e2/s0"} {
		if got := fmtVersion(v); got != want {
			t.Errorf("fmtVersion(%d) = %q, want %q", v, got, want)
		}
		if back, err := parseVersion(want); err != nil || back != v {
			t.Errorf("parseVersion(%q) = %d, %v; want %d", want, back, err, v)
		}
	}
	if v, err := parseVersion("1000003842"); err != nil || v != 1000003842 {
		t.Errorf("parseVersion of the raw number: %d, %v", v, err)
	}
	for _, bad := range []string{"e1/s", "e1/s1000000000", "-3", "x"} {
		if _, err := parseVersion(bad); err == nil || !strings.Contains(err.Error(), "e1/s3842") {
			t.Errorf("parseVersion(%q): %v; want an error showing both forms", bad, err)
		}
	}
	st := &pb.JobStatus{Name: "j", Checkpoints: []*pb.CheckpointPointer{{Version: 1000003842, Step: 3842}},
		Restores: []*pb.RestoreRecord{{Slot: 0, Version: 1000003800}}}
	var b bytes.Buffer
	printJobStatus(&b, st)
	if !strings.Contains(b.String(), "version e1/s3842, step 3842") || !strings.Contains(b.String(), "version e1/s3800 ") {
		t.Errorf("job status:\n%s\nwant versions e1/s3842 and e1/s3800", b.String())
	}
	b.Reset()
	p, _ := newPrinter("json", &b)
	if err := p.Object(st, nil); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(b.String(), `"version": 1000003842`) {
		t.Errorf("job status -w json does not keep the raw version:\n%s", b.String())
	}
}
