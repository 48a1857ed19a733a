package agent

import (
	"context"
	"sort"
	"strings"
	"time"

	pb "github.com/raftps/raftps/api/raftpspb"
	"github.com/raftps/raftps/schema"
)

// feedTrainers gives every hosted slot of job the job's live trainers.
func (a *Agent) feedTrainers(ctx context.Context, job string) {
	for _, h := range a.hostedOf(job) {
		a.feedTrainersTo(ctx, h)
	}
}

// hostedOf returns the slots of job this node serves.
func (a *Agent) hostedOf(job string) []*hosted {
	a.mu.Lock()
	defer a.mu.Unlock()
	var hs []*hosted
	for k, h := range a.hosted {
		if k.job == job {
			hs = append(hs, h)
		}
	}
	return hs
}

func (a *Agent) feedTrainersTo(ctx context.Context, h *hosted) {
	key, end := schema.PrefixRange(schema.TrainerPrefix(h.key.job))
	cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	resp, err := a.meta.Range(cctx, &pb.RangeRequest{Key: key, RangeEnd: end, KeysOnly: true, Serializable: true})
	cancel()
	if err != nil {
		return
	}
	ids := make([]string, 0, len(resp.Kvs))
	for _, kv := range resp.Kvs {
		if _, kind, id, ok := schema.ParseJobKey(string(kv.Key)); ok && kind == schema.KindTrainer {
			ids = append(ids, id)
		}
	}
	sort.Strings(ids)
	joined := strings.Join(ids, ",")
	if joined == h.trainers { // only this goroutine writes it
		return
	}
	a.mu.Lock()
	h.trainers = joined
	a.mu.Unlock()
	h.slot.SetTrainers(ids)
	a.log.Info("sync membership", "job", h.key.job, "slot", h.key.slot, "trainers", joined)
}

// reportWaits logs every hosted sync slot of job whose current step has
// waited Config.StepWaitWarn or more, naming the trainers it waits for: a sync
// step waits for every live trainer, so one that is alive but not pushing
// (stuck, or far slower than the others) holds every trainer up.
func (a *Agent) reportWaits(job string) {
	for _, h := range a.hostedOf(job) {
		w, ok := h.slot.Waiting()
		if !ok || w.For < a.cfg.StepWaitWarn || time.Since(h.waitWarned) < a.cfg.StepWaitWarn {
			continue
		}
		h.waitWarned = time.Now()
		a.log.Warn("sync step waiting for trainers", "job", job, "slot", h.key.slot, "step", w.Step,
			"for", w.For.Round(time.Millisecond), "waiting_for", strings.Join(w.Waiting, ","), "pushed", strings.Join(w.Pushed, ","))
	}
}
