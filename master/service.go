package master

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sort"
	"time"

	"google.golang.org/grpc"

	pb "github.com/raftps/raftps/api/raftpspb"
	"github.com/raftps/raftps/api/rpctypes"
	"github.com/raftps/raftps/fsm"
	"github.com/raftps/raftps/internal/version"
	"github.com/raftps/raftps/schema"
)

// Service implements the Master and Cluster gRPC services on every node.
// Commands go through the store's typed methods, which forward to the
// leader, so a client may call any node.
type Service struct {
	pb.UnimplementedMasterServer
	pb.UnimplementedClusterServer

	store   Store
	members Members
	// CheckDataset, if set, checks a job's dataset path on this node (I/O,
	// so it runs here and not in the FSM). Nil skips the check.
	CheckDataset func(spec *pb.DatasetSpec) error
	// TLS is reported by Status (StatusResponse.tls): the node runs
	// mutual TLS (false: --insecure).
	TLS bool
	// Progress asks a node for its Raft progress (Internal.RaftProgress,
	// raftstore/service.Forwarder); MemberPromote needs it. Nil: promote
	// is refused.
	Progress func(ctx context.Context, id string) (*pb.RaftProgressResponse, error)
	// Suspects confirms reports of suspect primaries of replicated slots
	// (ReportSuspect; suspect.go). Nil: reports are refused.
	Suspects *Suspects
	// Logger (nil: slog.Default).
	Logger *slog.Logger
}

// NewService returns the Master and Cluster services.
func NewService(store Store, members Members) *Service {
	return &Service{store: store, members: members, CheckDataset: CheckFashionMNIST}
}

// Register registers the Master and Cluster services on g.
func (s *Service) Register(g *grpc.Server) {
	pb.RegisterMasterServer(g, s)
	pb.RegisterClusterServer(g, s)
}

// CheckFashionMNIST checks that a fashion-mnist dataset directory has its
// four files, each a regular file inside it (a symbolic link may point
// only within the directory).
func CheckFashionMNIST(d *pb.DatasetSpec) error {
	if d == nil || d.Path == "" {
		return fmt.Errorf("dataset.path is empty")
	}
	if d.Format != "" && d.Format != "fashion-mnist" {
		return fmt.Errorf("dataset.format %q is unknown (known: fashion-mnist)", d.Format)
	}
	// Through an os.Root of the directory: a file that is a link out of it
	// is refused here as the trainer's reader refuses it (dataset.ErrOutsideDir).
	root, err := os.OpenRoot(d.Path)
	if err != nil {
		return fmt.Errorf("dataset.path %q: %v", d.Path, err)
	}
	defer root.Close()
	for _, f := range []string{"train-images-idx3-ubyte.gz", "train-labels-idx1-ubyte.gz", "t10k-images-idx3-ubyte.gz", "t10k-labels-idx1-ubyte.gz"} {
		fi, err := root.Stat(f)
		if err != nil {
			return fmt.Errorf("dataset.path %q: %s: %v", d.Path, f, err)
		}
		if !fi.Mode().IsRegular() {
			return fmt.Errorf("dataset.path %q: %s is not a regular file", d.Path, f)
		}
	}
	return nil
}

// SubmitJob validates a job spec and creates the job. A rejection of the
// spec is InvalidArgument naming the field (a duplicate name too); a valid
// job that does not fit in the live nodes' memory budgets is
// ResourceExhausted naming the need and the capacity (admission.go).
func (s *Service) SubmitJob(ctx context.Context, req *pb.SubmitJobRequest) (*pb.SubmitJobResponse, error) {
	if req.Spec == nil {
		return nil, rpctypes.ToStatus(fmt.Errorf("%w: spec is missing", fsm.ErrInvalid))
	}
	if s.CheckDataset != nil {
		if err := s.CheckDataset(req.Spec.Dataset); err != nil {
			return nil, rpctypes.ToStatus(fmt.Errorf("%w: %w", fsm.ErrInvalid, err))
		}
	}
	if spec := s.defaultReplicas(req.Spec); spec != req.Spec { // admission.go
		req = &pb.SubmitJobRequest{Spec: spec}
	}
	if err := s.admit(req.Spec); err != nil { // admission.go
		return nil, rpctypes.ToStatus(err) // wraps ErrNoCapacity: ResourceExhausted
	}
	ctx, err := rpctypes.IncomingRequestID(ctx)
	if err != nil {
		return nil, rpctypes.ToStatus(err)
	}
	out, err := s.store.SubmitJob(ctx, req)
	if errors.Is(err, fsm.ErrExists) {
		// A spec naming an existing job is a bad spec: its name field.
		return nil, rpctypes.ToStatus(fmt.Errorf("%w: name: job %q already exists (%v)", fsm.ErrInvalid, req.Spec.GetName(), err))
	}
	return out, rpctypes.ToStatus(err)
}

// GetJob returns a job's status, with its trainers, pservers and
// checkpoint pointers read from the metadata keys. Linearizable.
func (s *Service) GetJob(ctx context.Context, req *pb.GetJobRequest) (*pb.GetJobResponse, error) {
	if err := s.store.LinearizableRead(ctx); err != nil {
		return nil, rpctypes.ToStatus(err)
	}
	j, ok := s.store.JobQueue().Job(req.Name)
	if !ok {
		return nil, rpctypes.ToStatus(fmt.Errorf("%w: job %q", fsm.ErrNotFound, req.Name))
	}
	s.fillMembership(ctx, j)
	j.PendingTasks = s.store.JobQueue().Pending(req.Name)
	return &pb.GetJobResponse{Status: j}, nil
}

// ListJobs returns every job, sorted by name. Linearizable.
func (s *Service) ListJobs(ctx context.Context, _ *pb.ListJobsRequest) (*pb.ListJobsResponse, error) {
	if err := s.store.LinearizableRead(ctx); err != nil {
		return nil, rpctypes.ToStatus(err)
	}
	jobs := s.store.JobQueue().Jobs()
	for _, j := range jobs {
		s.fillMembership(ctx, j)
	}
	return &pb.ListJobsResponse{Jobs: jobs}, nil
}

// fillMembership adds trainers, pservers (with their replica records'
// backups and epoch), checkpoints and restores from the job's keys
// (schema's records; a record that does not parse is skipped).
func (s *Service) fillMembership(ctx context.Context, j *pb.JobStatus) {
	key, end := schema.PrefixRange(schema.JobPrefix(j.Name))
	resp, err := s.store.Range(ctx, &pb.RangeRequest{Serializable: true, Key: key, RangeEnd: end})
	if err != nil {
		return
	}
	replicas := map[int32]schema.ReplicaRecord{}
	for _, kv := range resp.Kvs {
		_, kind, id, ok := schema.ParseJobKey(string(kv.Key))
		if !ok {
			continue
		}
		switch kind {
		case schema.KindReplicas:
			slot, err := schema.ParseSlot(id)
			if err != nil {
				continue
			}
			if rec, err := schema.ParseReplicaRecord(kv.Value, kv.ModRevision); err == nil {
				replicas[slot] = rec
			}
		case schema.KindTrainer:
			j.Trainers = append(j.Trainers, id)
		case schema.KindSlot:
			slot, err := schema.ParseSlot(id)
			if err != nil {
				continue
			}
			if rec, err := schema.ParseSlotRecord(kv.Value); err == nil {
				j.Pservers = append(j.Pservers, &pb.PServerSlot{Index: slot, Node: rec.Node, Addr: rec.Addr, Incarnation: rec.Incarnation})
			}
		case schema.KindCheckpoint:
			if p, err := schema.ParsePointer(kv.Value); err == nil {
				j.Checkpoints = append(j.Checkpoints, p)
			}
		case schema.KindRestore:
			if r, err := schema.ParseRestore(kv.Value); err == nil {
				j.Restores = append(j.Restores, r)
			}
		}
	}
	sort.Slice(j.Pservers, func(a, b int) bool { return j.Pservers[a].Index < j.Pservers[b].Index })
	for _, p := range j.Pservers {
		if rec, ok := replicas[p.Index]; ok && rec.Primary.Node == p.Node {
			p.ReplicaEpoch = rec.Epoch
			for _, b := range rec.Backups {
				p.Backups = append(p.Backups, b.Node)
			}
		}
	}
}

// CancelJob cancels a job; its trainers get JOB_OVER.
func (s *Service) CancelJob(ctx context.Context, req *pb.CancelJobRequest) (*pb.CancelJobResponse, error) {
	ctx, err := rpctypes.IncomingRequestID(ctx)
	if err != nil {
		return nil, rpctypes.ToStatus(err)
	}
	out, err := s.store.CancelJob(ctx, req)
	return out, rpctypes.ToStatus(err)
}

// DeleteJob removes a job that is not running (else FailedPrecondition:
// cancel it first) with its tasks and events, then its keys under
// schema.JobPrefix (slots, trainers, checkpoint pointers, restores).
func (s *Service) DeleteJob(ctx context.Context, req *pb.DeleteJobRequest) (*pb.DeleteJobResponse, error) {
	if req.GetName() == "" {
		return nil, rpctypes.ToStatus(fmt.Errorf("%w: name is empty", fsm.ErrInvalid))
	}
	// The request id (exactly-once) is the DeleteJob command's only: the
	// key deletion below is a command of its own.
	wctx, err := rpctypes.IncomingRequestID(ctx)
	if err != nil {
		return nil, rpctypes.ToStatus(err)
	}
	out, err := s.store.DeleteJob(wctx, req)
	if err != nil && !errors.Is(err, fsm.ErrNotFound) {
		return nil, rpctypes.ToStatus(err)
	}
	// Also for a job that is gone already: a retry after a failed key
	// deletion cleans up.
	key, end := schema.PrefixRange(schema.JobPrefix(req.Name))
	if _, kerr := s.store.DeleteRange(ctx, &pb.DeleteRangeRequest{Key: key, RangeEnd: end}); kerr != nil {
		return nil, rpctypes.ToStatus(fmt.Errorf("job %q: its keys were not deleted (delete again to retry): %w", req.Name, kerr))
	}
	return out, rpctypes.ToStatus(err)
}

// GetTask hands a task to a trainer (Paddle's GetTask).
func (s *Service) GetTask(ctx context.Context, req *pb.GetTaskRequest) (*pb.GetTaskResponse, error) {
	if req.Trainer == "" {
		return nil, rpctypes.ToStatus(fmt.Errorf("%w: trainer is empty", fsm.ErrInvalid))
	}
	ctx, err := rpctypes.IncomingRequestID(ctx)
	if err != nil {
		return nil, rpctypes.ToStatus(err)
	}
	out, err := s.store.GetTask(ctx, req)
	return out, rpctypes.ToStatus(err)
}

// TaskFinished reports a finished task; stale finishes are accepted=false.
func (s *Service) TaskFinished(ctx context.Context, req *pb.TaskFinishedRequest) (*pb.TaskFinishedResponse, error) {
	ctx, err := rpctypes.IncomingRequestID(ctx)
	if err != nil {
		return nil, rpctypes.ToStatus(err)
	}
	out, err := s.store.TaskFinished(ctx, req)
	return out, rpctypes.ToStatus(err)
}

// TaskFailed reports a failed task.
func (s *Service) TaskFailed(ctx context.Context, req *pb.TaskFailedRequest) (*pb.TaskFailedResponse, error) {
	ctx, err := rpctypes.IncomingRequestID(ctx)
	if err != nil {
		return nil, rpctypes.ToStatus(err)
	}
	out, err := s.store.TaskFailed(ctx, req)
	return out, rpctypes.ToStatus(err)
}

// watchPoll is how often WatchJob looks for new events in the local FSM.
const watchPoll = 50 * time.Millisecond

// WatchJob streams a job's events in seq order, gap-free, from from_seq
// (0: from the next). It serves from the local FSM after a linearizable
// read, so a stream opened after an event was acknowledged includes it.
func (s *Service) WatchJob(req *pb.WatchJobRequest, stream pb.Master_WatchJobServer) error {
	ctx := stream.Context()
	if err := s.store.LinearizableRead(ctx); err != nil {
		return rpctypes.ToStatus(err)
	}
	jobs := s.store.JobQueue()
	if _, ok := jobs.Job(req.Name); !ok {
		return rpctypes.ToStatus(fmt.Errorf("%w: job %q", fsm.ErrNotFound, req.Name))
	}
	next := req.FromSeq
	if next <= 0 {
		next = jobs.EventSeq(req.Name) + 1
	}
	t := time.NewTicker(watchPoll)
	defer t.Stop()
	for {
		evs, err := jobs.Events(req.Name, next, 1000)
		if err != nil {
			return rpctypes.ToStatus(err) // events dropped: ErrCompacted, OutOfRange
		}
		for _, ev := range evs {
			if err := stream.Send(ev); err != nil {
				return err
			}
			next = ev.Seq + 1
			if ev.Type == pb.JobEvent_JOB_ENDED {
				return nil
			}
		}
		if len(evs) > 0 {
			continue
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

// Members lists gossip members with their Raft suffrage.
func (s *Service) Members(ctx context.Context, _ *pb.MembersRequest) (*pb.MembersResponse, error) {
	suffrage := map[string]string{}
	if servers, err := s.store.Configuration(); err == nil {
		for _, srv := range servers {
			if srv.Suffrage == 0 {
				suffrage[string(srv.ID)] = "voter"
			} else {
				suffrage[string(srv.ID)] = "nonvoter"
			}
		}
	}
	learners := learnerSet(ctx, s.store)
	out := &pb.MembersResponse{Header: s.header()}
	seen := map[string]bool{}
	for _, m := range s.members.Members() {
		sf := suffrage[m.Meta.ID]
		if sf == "" {
			sf = "none"
		}
		seen[m.Meta.ID] = true
		out.Members = append(out.Members, &pb.Member{Id: m.Meta.ID, Roles: m.Meta.Roles,
			GrpcAddr: m.Meta.GRPCAddr, RaftAddr: m.Meta.RaftAddr, GossipAddr: m.GossipAddr,
			HttpAddr: m.Meta.HTTPAddr, Status: m.Status.String(), Suffrage: sf,
			IsLearner: sf == "nonvoter" && learners[m.Meta.ID]})
	}
	// Members of the Raft configuration that gossip does not know (added
	// with `member add` and not started yet, or long gone): status unknown.
	for _, m := range s.configMembers(ctx) {
		if !seen[m.Id] {
			m.Status = "unknown"
			out.Members = append(out.Members, m)
		}
	}
	return out, nil
}

// Status reports this node's view of Raft.
func (s *Service) Status(ctx context.Context, _ *pb.StatusRequest) (*pb.StatusResponse, error) {
	st := s.store.Stats()
	out := &pb.StatusResponse{Header: s.header(), Id: st.ID, Leader: st.LeaderID, LeaderAddr: st.Leader,
		Term: st.Term, CommitIndex: st.CommitIndex, AppliedIndex: st.AppliedIndex,
		RaftState: st.State, Revision: st.Revision, LastLogIndex: st.LastLogIndex, Version: version.Get().Version,
		Tls: s.TLS}
	if d, ok := s.store.(interface{ DBSize() int64 }); ok {
		out.DbSize = d.DBSize()
	}
	if servers, err := s.store.Configuration(); err == nil {
		for _, srv := range servers {
			if srv.Suffrage == 0 {
				out.Voters = append(out.Voters, string(srv.ID))
			} else {
				out.Nonvoters = append(out.Nonvoters, string(srv.ID))
			}
		}
	}
	return out, nil
}

func (s *Service) header() *pb.ResponseHeader {
	st := s.store.Stats()
	return &pb.ResponseHeader{Revision: st.Revision, RaftTerm: st.Term, MemberId: st.ID}
}
