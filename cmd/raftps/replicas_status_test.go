package main

import (
	"bytes"
	"strings"
	"testing"

	pb "github.com/raftps/raftps/api/raftpspb"
)

// TestJobStatusShowsReplicasDefault (issue 34): job status says how many
// copies each pserver slot has and, when the master chose it
// (replicas_default), why; an explicit replicas has no reason.
func TestJobStatusShowsReplicasDefault(t *testing.T) {
	for _, tc := range []struct {
		spec *pb.JobSpec
		want string
	}{
		{&pb.JobSpec{Replicas: 2, ReplicasDefault: "capacity for 2"}, "replicas: 2 per pserver slot (default: capacity for 2)\n"},
		{&pb.JobSpec{Replicas: 1, ReplicasDefault: "only 1 pserver node"}, "replicas: 1 per pserver slot (default: only 1 pserver node)\n"},
		{&pb.JobSpec{Replicas: 3}, "replicas: 3 per pserver slot\n"},
	} {
		var b bytes.Buffer
		printJobStatus(&b, &pb.JobStatus{Name: "j", Spec: tc.spec,
			Pservers: []*pb.PServerSlot{{Index: 0, Node: "n1", Addr: "n1:7001", Backups: []string{"n2"}, ReplicaEpoch: 9}}})
		if !strings.Contains(b.String(), tc.want) || !strings.Contains(b.String(), "backups [n2], replica epoch 9") {
			t.Errorf("job status of %v:\n%s\nwant %q and the slot's backups and epoch", tc.spec, b.String(), tc.want)
		}
	}
}
