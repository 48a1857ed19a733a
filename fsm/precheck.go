package fsm

import (
	"fmt"

	"google.golang.org/protobuf/proto"

	pb "github.com/raftps/raftps/api/raftpspb"
	"github.com/raftps/raftps/jobspec"
)

// MaxCommandSize is the largest encoded command payload a store proposes,
// in bytes (4 MiB: a Txn of a few maximal values, far above any command
// raftps itself sends). Larger requests are refused before they reach the
// Raft log.
const MaxCommandSize = 4 << 20

// Precheck refuses, before anything is proposed, a request that Apply
// would reject whatever the state: sizes of keys, values and the whole
// command, empty keys, malformed compares and ops of a Txn (both branches,
// since the branch taken depends on the state), and job specs
// (jobspec.ValidateSpec). A request that passes may still be rejected by
// Apply for reasons that depend on the state (a lease that does not exist,
// a job name in use). Errors wrap ErrTooLarge or ErrInvalid, as Apply's.
//
// Checking here keeps oversized or invalid writes out of the Raft log:
// they would otherwise be appended, replicated and fsynced on every voter
// and only then refused (etcd checks request sizes in its gRPC layer for
// the same reason).
func Precheck(t pb.CommandType, req proto.Message) error {
	if n := proto.Size(req); n > MaxCommandSize {
		return fmt.Errorf("%w: %v request of %d bytes (max %d)", ErrTooLarge, t, n, MaxCommandSize)
	}
	switch r := req.(type) {
	case *pb.PutRequest:
		return precheckPut(r)
	case *pb.DeleteRangeRequest:
		return validateDelete(r)
	case *pb.TxnRequest:
		for i, c := range r.GetCompare() {
			if err := validateCompare(c); err != nil {
				return fmt.Errorf("txn compare %d: %w", i, err)
			}
		}
		for _, ops := range [][]*pb.RequestOp{r.GetSuccess(), r.GetFailure()} {
			for i, op := range ops {
				var err error
				switch o := op.GetRequest().(type) {
				case *pb.RequestOp_RequestRange:
					err = validateTxnRange(o.RequestRange)
				case *pb.RequestOp_RequestPut:
					err = precheckPut(o.RequestPut)
				case *pb.RequestOp_RequestDeleteRange:
					err = validateDelete(o.RequestDeleteRange)
				default:
					err = fmt.Errorf("%w: empty request op", ErrInvalid)
				}
				if err != nil {
					return fmt.Errorf("txn op %d: %w", i, err)
				}
			}
		}
	case *pb.SubmitJobRequest:
		if _, err := jobspec.ValidateSpec(r.GetSpec()); err != nil {
			return err
		}
	}
	return nil
}

// precheckPut is validatePut without the state-dependent lease check.
func precheckPut(req *pb.PutRequest) error {
	switch {
	case len(req.GetKey()) == 0:
		return fmt.Errorf("%w: put: empty key", ErrInvalid)
	case len(req.GetKey()) > MaxKeySize:
		return fmt.Errorf("%w: put: key of %d bytes (max %d)", ErrTooLarge, len(req.GetKey()), MaxKeySize)
	case len(req.GetValue()) > MaxValueSize:
		return fmt.Errorf("%w: put: value of %d bytes (max %d)", ErrTooLarge, len(req.GetValue()), MaxValueSize)
	}
	return nil
}
