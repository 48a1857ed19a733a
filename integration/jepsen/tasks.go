package jepsen

import (
	"context"
	"fmt"
	"sync"
	"time"

	pb "github.com/raftps/raftps/api/raftpspb"
	"github.com/raftps/raftps/schema"
)

// PointerRecord is a checkpoint pointer (/jobs/<job>/checkpoints/<slot>) as
// committed through Raft, observed by the training workload.
type PointerRecord struct {
	Slot    int32  `json:"slot"`
	Version int64  `json:"version"`
	MD5     string `json:"md5"`
	// Kept are the older versions the pointer still keeps, newest first.
	Kept []int64 `json:"kept,omitempty"`
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

// RunTraining submits spec through m and follows the job (FollowJob). It is
// the training workload of the suite; nemesis faults run beside it.
func RunTraining(ctx context.Context, m pb.MasterClient, w pb.WatchClient, spec *pb.JobSpec) (TrainingHistory, error) {
	if _, err := m.SubmitJob(ctx, &pb.SubmitJobRequest{Spec: spec}); err != nil {
		return TrainingHistory{Job: spec.GetName()}, fmt.Errorf("jepsen: submit job %q: %w", spec.GetName(), err)
	}
	return FollowJob(ctx, m, w, spec.GetName())
}

// FollowJob follows job until it ends or ctx ends: its event stream
// (WatchJob from seq 1, resumed from the last seq + 1 on any stream error),
// every checkpoint pointer committed under /jobs/<job>/checkpoints/ (a KV
// watch from revision 1, resumed likewise; w may be nil to skip), and
// GetJob every 500ms for the restore records and the final status.
func FollowJob(ctx context.Context, m pb.MasterClient, w pb.WatchClient, job string) (TrainingHistory, error) {
	th := TrainingHistory{Job: job}
	fctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var (
		wg       sync.WaitGroup
		mu       sync.Mutex
		evs      []*pb.JobEvent
		pointers []PointerRecord
	)
	wg.Add(1)
	go func() {
		defer wg.Done()
		next := int64(1)
		for fctx.Err() == nil {
			st, err := m.WatchJob(fctx, &pb.WatchJobRequest{Name: job, FromSeq: next})
			for err == nil {
				var ev *pb.JobEvent
				if ev, err = st.Recv(); err == nil {
					mu.Lock()
					evs = append(evs, ev)
					mu.Unlock()
					next = ev.GetSeq() + 1
					if ev.GetType() == pb.JobEvent_JOB_ENDED {
						return
					}
				}
			}
			sleepCtx(fctx, 200*time.Millisecond)
		}
	}()
	if w != nil {
		wg.Add(1)
		go func() {
			defer wg.Done()
			key, end := schema.PrefixRange(schema.CheckpointPrefix(job))
			next := int64(1)
			for fctx.Err() == nil {
				st, err := w.Watch(fctx, &pb.WatchRequest{Key: key, RangeEnd: end, StartRevision: next})
				for err == nil {
					var resp *pb.WatchResponse
					if resp, err = st.Recv(); err != nil {
						break
					}
					for _, ev := range resp.GetEvents() {
						next = ev.GetKv().GetModRevision() + 1
						if ev.GetType() != pb.Event_PUT {
							continue
						}
						_, kind, id, ok := schema.ParseJobKey(string(ev.GetKv().GetKey()))
						if !ok || kind != schema.KindCheckpoint {
							continue
						}
						slot, serr := schema.ParseSlot(id)
						p, perr := schema.ParsePointer(ev.GetKv().GetValue())
						if serr != nil || perr != nil {
							continue
						}
						mu.Lock()
						pointers = append(pointers, PointerRecord{Slot: slot, Version: p.GetVersion(), MD5: p.GetMd5(), Kept: p.GetKeptVersions()})
						mu.Unlock()
					}
				}
				sleepCtx(fctx, 200*time.Millisecond)
			}
		}()
	}
	for ctx.Err() == nil {
		octx, ocancel := context.WithTimeout(ctx, 2*time.Second)
		resp, err := m.GetJob(octx, &pb.GetJobRequest{Name: job})
		ocancel()
		if err == nil {
			st := resp.GetStatus()
			th.Final = st
			th.TasksPerPass = st.GetTotalTasks()
			th.Restores = st.GetRestores()
			if s := st.GetState(); s == pb.JobState_JOB_SUCCEEDED || s == pb.JobState_JOB_FAILED || s == pb.JobState_JOB_CANCELLED {
				break
			}
		}
		sleepCtx(ctx, 500*time.Millisecond)
	}
	// Let the streams catch up with the end, then stop them.
	time.AfterFunc(5*time.Second, cancel)
	wg.Wait()
	mu.Lock()
	th.Events, th.Pointers = evs, pointers
	mu.Unlock()
	return th, ctx.Err()
}
