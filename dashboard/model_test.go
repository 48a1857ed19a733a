package dashboard

import (
	"testing"

	pb "github.com/raftps/raftps/api/raftpspb"
)

// TestModelText (issue 37): the job's model reads as a person would write
// it; a PyTorch job's (external) showed as "external []".
func TestModelText(t *testing.T) {
	for _, c := range []struct {
		spec *pb.JobSpec
		want string
	}{
		{&pb.JobSpec{Model: &pb.ModelSpec{Name: "mlp", Hidden: []int32{128, 64}}}, "mlp, hidden 128-64"},
		{&pb.JobSpec{Model: &pb.ModelSpec{Name: "softmax"}}, "softmax"},
		{&pb.JobSpec{Model: &pb.ModelSpec{Name: "hashed_lr", EmbeddingDim: 16, HashBuckets: 1 << 20}}, "hashed_lr, embedding 16 x 1048576 buckets"},
		{&pb.JobSpec{Model: &pb.ModelSpec{Name: "external"}, Params: []*pb.ParamSpec{
			{Name: "conv.w", Shape: []int64{32, 1, 3, 3}}, {Name: "conv.b", Shape: []int64{32}}, {Name: "fc.w", Shape: []int64{10, 5408}}}},
			"external: 3 tensors, 54400 parameters"},
		{&pb.JobSpec{}, ""},
	} {
		if got := modelText(c.spec); got != c.want {
			t.Errorf("modelText(%v) = %q, want %q", c.spec.GetModel(), got, c.want)
		}
	}
}
