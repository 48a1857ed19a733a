package jepsen

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	pb "github.com/raftps/raftps/api/raftpspb"
)

// PointerRecord is a checkpoint pointer (/jobs/<job>/checkpoints/<slot>) as
// committed through Raft, observed by the training workload.
type PointerRecord struct {
	Slot    int32  `json:"slot"`
	Version int64  `json:"version"`
	MD5     string `json:"md5"`
}

// TrainingHistory is what the training workload saw of one job.
type TrainingHistory struct {
	Job string `json:"job"`
	// Events is the job's event stream (WatchJob), in seq order.
	Events []*pb.JobEvent `json:"events"`
	// TasksPerPass is the number of train tasks a pass has (JobStatus.total_tasks);
	// 0 lets the checker take the union of the ids seen over all passes.
	TasksPerPass int64 `json:"tasks_per_pass"`
	// Pointers are every checkpoint pointer seen committed.
	Pointers []PointerRecord `json:"pointers"`
	// Restores are the pserver restore records (JobStatus.restores).
	Restores []*pb.RestoreRecord `json:"restores"`
	// Final is the job's last status.
	Final *pb.JobStatus `json:"final,omitempty"`
}

// RunTraining submits spec through m, follows the job's event stream
// (resuming from the last seq + 1 on any stream error) and polls GetJob for
// checkpoint pointers and restore records until the job ends or ctx ends.
// It is the training workload of the suite; nemesis faults run beside it.
func RunTraining(ctx context.Context, m pb.MasterClient, spec *pb.JobSpec) (TrainingHistory, error) {
	th := TrainingHistory{Job: spec.GetName()}
	if _, err := m.SubmitJob(ctx, &pb.SubmitJobRequest{Spec: spec}); err != nil {
		return th, fmt.Errorf("jepsen: submit job %q: %w", spec.GetName(), err)
	}
	evCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	evDone := make(chan []*pb.JobEvent, 1)
	go func() {
		var evs []*pb.JobEvent
		next := int64(1)
		for evCtx.Err() == nil {
			st, err := m.WatchJob(evCtx, &pb.WatchJobRequest{Name: spec.GetName(), FromSeq: next})
			for err == nil {
				var ev *pb.JobEvent
				ev, err = st.Recv()
				if err == nil {
					evs = append(evs, ev)
					next = ev.GetSeq() + 1
					if ev.GetType() == pb.JobEvent_JOB_ENDED {
						evDone <- evs
						return
					}
				}
			}
			if errors.Is(err, io.EOF) || evCtx.Err() != nil {
				if evCtx.Err() != nil {
					break
				}
			}
			sleepCtx(evCtx, 200*time.Millisecond)
		}
		evDone <- evs
	}()
	seen := map[PointerRecord]bool{}
	for ctx.Err() == nil {
		resp, err := m.GetJob(ctx, &pb.GetJobRequest{Name: spec.GetName()})
		if err == nil {
			st := resp.GetStatus()
			th.Final = st
			th.TasksPerPass = st.GetTotalTasks()
			for _, p := range pointersFromStatus(st) {
				if !seen[p] {
					seen[p] = true
					th.Pointers = append(th.Pointers, p)
				}
			}
			th.Restores = st.GetRestores()
			if s := st.GetState(); s == pb.JobState_JOB_SUCCEEDED || s == pb.JobState_JOB_FAILED || s == pb.JobState_JOB_CANCELLED {
				break
			}
		}
		sleepCtx(ctx, 500*time.Millisecond)
	}
	select {
	case th.Events = <-evDone:
	case <-time.After(10 * time.Second):
		cancel()
		th.Events = <-evDone
	}
	return th, ctx.Err()
}

// pointersFromStatus reads the checkpoint pointers of a status; slot i is the
// i-th pointer (JobStatus.checkpoints is indexed by slot).
func pointersFromStatus(st *pb.JobStatus) []PointerRecord {
	var out []PointerRecord
	for i, cp := range st.GetCheckpoints() {
		if cp == nil || cp.GetVersion() == 0 {
			continue
		}
		out = append(out, PointerRecord{Slot: int32(i), Version: cp.GetVersion(), MD5: cp.GetMd5()})
	}
	return out
}
