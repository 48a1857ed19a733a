package jepsen

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"sync"
	"time"

	pb "github.com/raftps/raftps/api/raftpspb"
	"github.com/raftps/raftps/schema"
)

// WatchEvent is one event a watcher received.
type WatchEvent struct {
	Watcher     int    `json:"watcher"`
	Type        string `json:"type"` // "put" or "delete"
	Key         string `json:"key"`
	Value       string `json:"value,omitempty"`
	ModRevision int64  `json:"mod_revision"`
	Node        string `json:"node"`
}

// WatcherRun is what one watcher saw: the revisions it covered and its events
// in arrival order.
type WatcherRun struct {
	ID            int          `json:"id"`
	StartRevision int64        `json:"start_revision"`
	EndRevision   int64        `json:"end_revision"` // the last revision it is known to have covered
	Events        []WatchEvent `json:"events"`
	Resumes       int          `json:"resumes"`
	Compacted     bool         `json:"compacted,omitempty"`
}

// WatchConfig shapes the watch workload.
type WatchConfig struct {
	Watchers int    // default 3
	Prefix   string // default "/jepsen/"
	// Reconnect: a watcher drops its stream after a random time in
	// [Reconnect, 2*Reconnect) and resumes on a random node, so that resumes
	// happen even without faults (default 8s; <0 disables).
	Reconnect time.Duration
}

// Watchers runs watchers on a prefix. Start them with StartWatchers, stop
// them with Finish, which waits until each covered a fence revision.
type Watchers struct {
	cfg   WatchConfig
	conns Conns
	h     *History

	mu     sync.Mutex
	runs   []*WatcherRun
	cancel context.CancelFunc
	wg     sync.WaitGroup
}

// StartWatchers starts cfg.Watchers watchers on cfg.Prefix from
// startRevision. Each connects to a random node and, on any stream error,
// resumes from its last revision + 1 on another random node.
func StartWatchers(ctx context.Context, cfg WatchConfig, conns Conns, h *History, startRevision int64) *Watchers {
	if cfg.Watchers == 0 {
		cfg.Watchers = 3
	}
	if cfg.Prefix == "" {
		cfg.Prefix = "/jepsen/"
	}
	if cfg.Reconnect == 0 {
		cfg.Reconnect = 8 * time.Second
	}
	ctx, cancel := context.WithCancel(ctx)
	w := &Watchers{cfg: cfg, conns: conns, h: h, cancel: cancel}
	for i := 0; i < cfg.Watchers; i++ {
		run := &WatcherRun{ID: i, StartRevision: startRevision, EndRevision: startRevision - 1}
		w.runs = append(w.runs, run)
		w.wg.Add(1)
		go func() {
			defer w.wg.Done()
			w.loop(ctx, run)
		}()
	}
	return w
}

// prefixEnd is the range end of every key under p.
func prefixEnd(p string) []byte { return schema.PrefixEnd([]byte(p)) }

func (w *Watchers) loop(ctx context.Context, run *WatcherRun) {
	r := rand.New(rand.NewPCG(uint64(run.ID)+100, uint64(time.Now().UnixNano())))
	for ctx.Err() == nil {
		name, nc := w.conns.Random(r)
		w.mu.Lock()
		from := run.EndRevision + 1
		w.mu.Unlock()
		sctx, scancel := ctx, context.CancelFunc(func() {})
		if w.cfg.Reconnect > 0 {
			sctx, scancel = context.WithTimeout(ctx, w.cfg.Reconnect+time.Duration(r.Int64N(int64(w.cfg.Reconnect))))
		}
		err := w.stream(sctx, run, name, nc, from)
		scancel()
		if ctx.Err() != nil {
			return
		}
		w.mu.Lock()
		run.Resumes++
		compacted := run.Compacted
		w.mu.Unlock()
		if compacted {
			return
		}
		w.h.Notef("watcher %d: stream from %s ended: %v; resuming", run.ID, name, err)
		select {
		case <-ctx.Done():
			return
		case <-time.After(200 * time.Millisecond):
		}
	}
}

func (w *Watchers) stream(ctx context.Context, run *WatcherRun, name string, nc *NodeConn, from int64) error {
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	st, err := nc.Watch.Watch(sctx, &pb.WatchRequest{
		Key: []byte(w.cfg.Prefix), RangeEnd: prefixEnd(w.cfg.Prefix), StartRevision: from,
	})
	if err != nil {
		return err
	}
	// A stream that says nothing for long on a dead node must not hang the
	// watcher forever: the caller's context cancels it; a receive error resumes.
	for {
		resp, err := st.Recv()
		if err != nil {
			if errors.Is(err, io.EOF) {
				return fmt.Errorf("stream closed by server")
			}
			return err
		}
		if resp.CompactRevision > 0 {
			w.mu.Lock()
			run.Compacted = true
			w.mu.Unlock()
			return fmt.Errorf("compacted at %d", resp.CompactRevision)
		}
		if resp.Canceled {
			return fmt.Errorf("canceled: %s", resp.CancelReason)
		}
		for _, ev := range resp.Events {
			e := WatchEvent{Watcher: run.ID, Key: string(ev.GetKv().GetKey()), ModRevision: ev.GetKv().GetModRevision(), Node: name}
			if ev.Type == pb.Event_DELETE {
				e.Type = "delete"
			} else {
				e.Type = "put"
				e.Value = string(ev.GetKv().GetValue())
			}
			w.mu.Lock()
			run.Events = append(run.Events, e)
			if e.ModRevision > run.EndRevision {
				run.EndRevision = e.ModRevision
			}
			w.mu.Unlock()
			w.h.Add(Record{Type: "watch", Watch: &e})
		}
	}
}

// covered reports the highest revision each watcher covered.
func (w *Watchers) covered() []int64 {
	w.mu.Lock()
	defer w.mu.Unlock()
	out := make([]int64, len(w.runs))
	for i, r := range w.runs {
		out[i] = r.EndRevision
	}
	return out
}

// Finish waits (up to timeout) until every watcher covered fence, then stops
// them and returns their runs.
func (w *Watchers) Finish(fence int64, timeout time.Duration) []WatcherRun {
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		done := true
		for _, c := range w.covered() {
			if c < fence {
				done = false
			}
		}
		if done {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	w.cancel()
	w.wg.Wait()
	w.mu.Lock()
	defer w.mu.Unlock()
	out := make([]WatcherRun, len(w.runs))
	for i, r := range w.runs {
		out[i] = *r
		out[i].Events = append([]WatchEvent(nil), r.Events...)
	}
	return out
}
