package jepsen

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"sync"
	"time"
)

// Status is Jepsen's completion type of an operation.
type Status string

const (
	// StatusOK: the operation completed and its result is known.
	StatusOK Status = "ok"
	// StatusFail: the operation definitely did not take effect (reads that
	// failed are recorded as fail and dropped by the checkers).
	StatusFail Status = "fail"
	// StatusInfo: the outcome is unknown (a write that errored or timed out);
	// the checkers treat it as indeterminate: it may take effect at any time
	// after its call, or never.
	StatusInfo Status = "info"
)

// Record is one line of a run's history file (history.jsonl). Exactly one of
// the pointer fields is set; Type names which.
type Record struct {
	Type     string       `json:"type"` // "register", "fault", "watch", "lease", "slot-push", "note"
	At       int64        `json:"at"`   // ns since the run's start
	Register *RegisterOp  `json:"register,omitempty"`
	Fault    *Fault       `json:"fault,omitempty"`
	Watch    *WatchEvent  `json:"watch,omitempty"`
	Lease    *LeaseRecord `json:"lease,omitempty"`
	SlotPush *SlotPush    `json:"slot_push,omitempty"`
	Note     string       `json:"note,omitempty"`
}

// History collects the records of one run and appends them, as JSON lines,
// to a file when one is attached. It is safe for concurrent use.
type History struct {
	start time.Time

	mu   sync.Mutex
	recs []Record
	f    *os.File
	w    *bufio.Writer
	err  error
}

// NewHistory returns an empty history whose clock starts now. path, if not
// empty, is the JSON-lines file every record is appended to.
func NewHistory(path string) (*History, error) {
	h := &History{start: time.Now()}
	if path != "" {
		f, err := os.Create(path)
		if err != nil {
			return nil, fmt.Errorf("jepsen: create history %q: %w", path, err)
		}
		h.f, h.w = f, bufio.NewWriter(f)
	}
	return h, nil
}

// Now is the time since the run's start in nanoseconds (monotonic clock).
func (h *History) Now() int64 { return int64(time.Since(h.start)) }

// Start is the wall-clock time of the run's start.
func (h *History) Start() time.Time { return h.start }

// Add appends r, stamping At if it is zero.
func (h *History) Add(r Record) {
	if r.At == 0 {
		r.At = h.Now()
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	h.recs = append(h.recs, r)
	if h.w != nil && h.err == nil {
		b, err := json.Marshal(r)
		if err == nil {
			b = append(b, '\n')
			_, err = h.w.Write(b)
		}
		h.err = err
	}
}

// Notef adds a free-form note.
func (h *History) Notef(format string, args ...any) {
	h.Add(Record{Type: "note", Note: fmt.Sprintf(format, args...)})
}

// Records returns a copy of all records so far.
func (h *History) Records() []Record {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]Record(nil), h.recs...)
}

// Close flushes and closes the history file; safe to call twice.
func (h *History) Close() error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.w == nil {
		return h.err
	}
	if err := h.w.Flush(); err != nil && h.err == nil {
		h.err = err
	}
	if err := h.f.Close(); err != nil && h.err == nil {
		h.err = err
	}
	h.w, h.f = nil, nil
	return h.err
}

// RegisterOps returns the register operations of the history.
func (h *History) RegisterOps() []RegisterOp {
	var ops []RegisterOp
	for _, r := range h.Records() {
		if r.Register != nil {
			ops = append(ops, *r.Register)
		}
	}
	return ops
}

// Faults returns the faults of the history, in order.
func (h *History) Faults() []Fault {
	var fs []Fault
	for _, r := range h.Records() {
		if r.Fault != nil {
			fs = append(fs, *r.Fault)
		}
	}
	return fs
}

// LoadHistory reads a history.jsonl written by a run.
func LoadHistory(path string) ([]Record, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var recs []Record
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 16<<20)
	for sc.Scan() {
		var r Record
		if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
			return nil, fmt.Errorf("jepsen: %s line %d: %w", path, len(recs)+1, err)
		}
		recs = append(recs, r)
	}
	return recs, sc.Err()
}
