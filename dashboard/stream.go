package dashboard

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	pb "github.com/raftps/raftps/api/raftpspb"
	"github.com/raftps/raftps/jobspec"
)

// eventView is a JobEvent as the page reads it.
type eventView struct {
	Seq      int64   `json:"seq"`
	Type     string  `json:"type"` // "task_done", "pserver_restored", ...
	Time     int64   `json:"time"` // Unix ms (the leader's clock at apply)
	Pass     int32   `json:"pass"`
	Task     int64   `json:"task,omitempty"`
	Epoch    int64   `json:"epoch,omitempty"`
	Trainer  string  `json:"trainer,omitempty"`
	Message  string  `json:"message,omitempty"`
	Loss     float64 `json:"loss,omitempty"`
	Accuracy float64 `json:"accuracy,omitempty"`
	Examples int64   `json:"examples,omitempty"`
	Version  int64   `json:"version,omitempty"`
}

func newEventView(ev *pb.JobEvent) eventView {
	return eventView{Seq: ev.Seq, Type: lowerEnum(ev.Type.String(), ""), Time: ms(ev.UnixNano), Pass: ev.Pass,
		Task: ev.TaskId, Epoch: ev.Epoch, Trainer: ev.Trainer, Message: ev.Message, Loss: ev.Loss,
		Accuracy: ev.Accuracy, Examples: ev.Examples, Version: ev.Version}
}

// Stream timing: how often the job's status is re-read (sent only when it
// changed), the keep-alive comment, the retry the browser is told, and the
// bounds of the re-open backoff after a broken WatchJob.
const (
	statusInterval    = time.Second
	heartbeatInterval = 15 * time.Second
	retryMS           = 1000
	minBackoff        = 100 * time.Millisecond
	maxBackoff        = 2 * time.Second
)

// sse writes server-sent events and flushes each.
type sse struct {
	w  http.ResponseWriter
	rc *http.ResponseController
}

func (s sse) send(event, id string, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	var buf bytes.Buffer
	fmt.Fprintf(&buf, "event: %s\n", event)
	if id != "" {
		fmt.Fprintf(&buf, "id: %s\n", id)
	}
	fmt.Fprintf(&buf, "data: %s\n\n", b)
	if _, err := s.w.Write(buf.Bytes()); err != nil {
		return err
	}
	return s.rc.Flush()
}

func (s sse) comment(text string) error {
	if _, err := fmt.Fprintf(s.w, ": %s\n\n", text); err != nil {
		return err
	}
	return s.rc.Flush()
}

// handleEvents streams a job's events, its status when it changes and the
// cluster's changes as server-sent events until the client goes, the job
// is deleted or the dashboard closes.
func (d *Dashboard) handleEvents(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("job")
	job, err := d.getJob(r.Context(), name)
	if err != nil {
		writeRPCError(w, err)
		return
	}
	from := int64(1)
	if id := r.Header.Get("Last-Event-ID"); id != "" {
		if seq, err := strconv.ParseInt(id, 10, 64); err == nil && seq >= 0 {
			from = seq + 1
		}
	}
	ctx, cancel := context.WithCancel(r.Context())
	defer cancel()
	stop := context.AfterFunc(d.ctx, cancel)
	defer stop()

	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-store")
	h.Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	out := sse{w: w, rc: http.NewResponseController(w)}
	if _, err := fmt.Fprintf(w, "retry: %d\n\n", retryMS); err != nil {
		return
	}
	lastStatus, _ := json.Marshal(job)
	if out.send("status", "", job) != nil {
		return
	}
	past, clusterCh, unsubscribe := d.events.subscribe()
	defer unsubscribe()
	for _, ev := range past {
		if out.send("cluster", "", ev) != nil {
			return
		}
	}
	jobEvents := make(chan *pb.JobEvent, 256)
	go d.followJob(ctx, name, from, jobEvents)

	statusTick := time.NewTicker(statusInterval)
	defer statusTick.Stop()
	heartbeat := time.NewTicker(heartbeatInterval)
	defer heartbeat.Stop()
	for {
		var err error
		select {
		case <-ctx.Done():
			return
		case ev, ok := <-jobEvents:
			if !ok {
				jobEvents = nil // the job's events ended (JOB_ENDED); status and cluster go on
				continue
			}
			err = out.send("job", strconv.FormatInt(ev.Seq, 10), newEventView(ev))
		case ev := <-clusterCh:
			err = out.send("cluster", "", ev)
		case <-statusTick.C:
			v, gerr := d.getJob(ctx, name)
			if status.Code(gerr) == codes.NotFound {
				_ = out.send("gone", "", apiError{Error: status.Convert(gerr).Message(), Code: codes.NotFound.String()})
				return
			}
			if gerr != nil {
				continue // a leader change or a slow read: the next tick tries again
			}
			b, _ := json.Marshal(v)
			if !bytes.Equal(b, lastStatus) {
				lastStatus = b
				err = out.send("status", "", v)
			}
		case <-heartbeat.C:
			err = out.comment("keep-alive")
		}
		if err != nil {
			return
		}
	}
}

// handleClusterEvents streams the cluster's changes (node status, leader)
// as server-sent "cluster" events as the cluster watcher sees them, so the
// cluster page shows a new leader without waiting for its next poll.
func (d *Dashboard) handleClusterEvents(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := context.WithCancel(r.Context())
	defer cancel()
	stop := context.AfterFunc(d.ctx, cancel)
	defer stop()
	var after int64
	if id := r.Header.Get("Last-Event-ID"); id != "" {
		after, _ = strconv.ParseInt(id, 10, 64)
	}
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-store")
	h.Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	out := sse{w: w, rc: http.NewResponseController(w)}
	if _, err := fmt.Fprintf(w, "retry: %d\n\n", retryMS); err != nil {
		return
	}
	past, ch, unsubscribe := d.events.subscribe()
	defer unsubscribe()
	for _, ev := range past {
		if ev.Seq > after && out.send("cluster", strconv.FormatInt(ev.Seq, 10), ev) != nil {
			return
		}
	}
	if out.comment("live") != nil {
		return
	}
	heartbeat := time.NewTicker(heartbeatInterval)
	defer heartbeat.Stop()
	for {
		var err error
		select {
		case <-ctx.Done():
			return
		case ev := <-ch:
			err = out.send("cluster", strconv.FormatInt(ev.Seq, 10), ev)
		case <-heartbeat.C:
			err = out.comment("keep-alive")
		}
		if err != nil {
			return
		}
	}
}

// followJob sends the job's events from seq from to ch, gap-free, and
// re-opens WatchJob (with backoff) when it breaks, until ctx ends or the
// job ends (JOB_ENDED; ch is then closed) or is deleted.
func (d *Dashboard) followJob(ctx context.Context, name string, from int64, ch chan<- *pb.JobEvent) {
	next := from
	backoff := minBackoff
	for ctx.Err() == nil {
		stream, err := d.cl.Master.WatchJob(ctx, &pb.WatchJobRequest{Name: name, FromSeq: next})
		for err == nil {
			var ev *pb.JobEvent
			if ev, err = stream.Recv(); err != nil {
				break
			}
			backoff = minBackoff
			select {
			case ch <- ev:
			case <-ctx.Done():
				return
			}
			next = ev.Seq + 1
			if ev.Type == pb.JobEvent_JOB_ENDED {
				close(ch)
				return
			}
		}
		switch status.Code(err) {
		case codes.NotFound:
			return // deleted: the status tick reports it
		case codes.OutOfRange:
			// Events before next are no longer kept: go on from the oldest kept.
			if v, gerr := d.getJob(ctx, name); gerr == nil {
				next = max(next, v.EventsSeq-jobspec.MaxEvents+1)
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, maxBackoff)
	}
}
