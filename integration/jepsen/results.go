package jepsen

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/anishathalye/porcupine"
)

// Summary is summary.json of a run.
type Summary struct {
	Start       time.Time      `json:"start"`
	Duration    string         `json:"duration"`
	Nodes       int            `json:"nodes"`
	Binary      string         `json:"binary"`
	LogStore    string         `json:"log_store,omitempty"` // the nodes' --raft-log-store ("": boltdb)
	Ops         map[string]int `json:"ops"`                 // workload -> operations
	Faults      map[string]int `json:"faults"`              // fault type -> count
	FaultList   []Fault        `json:"fault_list"`
	Results     []Result       `json:"results"`
	Valid       bool           `json:"valid"` // no checker reported a violation
	Annotations string         `json:"-"`
}

// Valid reports whether no result is a violation.
func Valid(rs []Result) bool {
	for _, r := range rs {
		if r.Verdict == VerdictViolation {
			return false
		}
	}
	return true
}

// WriteSummary writes summary.json and summary.txt into dir.
func WriteSummary(dir string, s Summary) error {
	s.Valid = Valid(s.Results)
	b, err := json.MarshalIndent(s, "", "  ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "summary.json"), b, 0o644); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, "summary.txt"), []byte(s.Text()), 0o644)
}

// Text renders the summary for people.
func (s Summary) Text() string {
	var b strings.Builder
	fmt.Fprintf(&b, "raftps jepsen run %s (%s, %d nodes)\n", s.Start.UTC().Format(time.RFC3339), s.Duration, s.Nodes)
	logStore := s.LogStore
	if logStore == "" {
		logStore = "boltdb (default)"
	}
	fmt.Fprintf(&b, "binary: %s\nraft log store: %s\n\noperations:\n", s.Binary, logStore)
	for _, k := range sortedKeys(s.Ops) {
		fmt.Fprintf(&b, "  %-12s %d\n", k, s.Ops[k])
	}
	fmt.Fprintf(&b, "\nfaults:\n")
	for _, k := range sortedKeys(s.Faults) {
		fmt.Fprintf(&b, "  %-20s %d\n", k, s.Faults[k])
	}
	for _, f := range s.FaultList {
		e := ""
		if f.Err != "" {
			e = " error: " + f.Err
		}
		fmt.Fprintf(&b, "    %-20s %-16s %8s .. %8s %s%s\n", f.Type, f.Target, fmtNs(f.Start), fmtNs(f.End), f.Detail, e)
	}
	fmt.Fprintf(&b, "\ncheckers:\n")
	for _, r := range s.Results {
		fmt.Fprintf(&b, "  %-24s %s", r.Checker, r.Verdict)
		if len(r.Stats) > 0 {
			var kv []string
			for _, k := range sortedKeys(r.Stats) {
				kv = append(kv, fmt.Sprintf("%s=%d", k, r.Stats[k]))
			}
			fmt.Fprintf(&b, "  (%s)", strings.Join(kv, " "))
		}
		b.WriteString("\n")
		for _, v := range r.Violations {
			fmt.Fprintf(&b, "      VIOLATION: %s\n", v)
		}
		for _, n := range r.Notes {
			fmt.Fprintf(&b, "      note: %s\n", n)
		}
	}
	verdict := "VALID"
	if !Valid(s.Results) {
		verdict = "INVALID"
	}
	fmt.Fprintf(&b, "\nverdict: %s\n", verdict)
	return b.String()
}

func sortedKeys(m map[string]int) []string {
	var ks []string
	for k := range m {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	return ks
}

// WriteVisualization writes Porcupine's HTML view of the register history to
// path, with the faults as annotations.
func WriteVisualization(path string, info porcupine.LinearizationInfo, faults []Fault) error {
	var ann []porcupine.Annotation
	for _, f := range faults {
		ann = append(ann, porcupine.Annotation{
			Tag: "nemesis", Start: f.Start, End: f.End,
			Description: f.Type + " " + f.Target, Details: f.Detail + f.Err,
			BackgroundColor: "#f7c6c6",
		})
	}
	info.AddAnnotations(ann)
	return porcupine.VisualizePath(RegisterModel, info, path)
}
