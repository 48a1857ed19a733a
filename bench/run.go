package bench

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/raftps/raftps/raftstore"
)

// Config is what Run needs. The zero Quick runs the full bench (a few
// minutes on 2 cores); Quick shortens every measurement.
type Config struct {
	// Bin is the raftps binary started as the cluster's nodes.
	Bin string
	// Root is the module root, where `go test -bench` runs.
	Root string
	// Dataset is the Fashion-MNIST directory of the training job
	// (default Root/datasets/fashion-mnist).
	Dataset string
	// Quick shortens the run (2 s per workload, 3 recovery trials, 1x Go benchmarks).
	Quick bool
	// Skip names sections not to run: "kv", "etcdclient", "failover", "tls", "training", "replicas", "gobench", "profile", "scaling", "rereplicate".
	Skip []string
	// KeepData keeps the temp dir of the clusters' data and logs (its
	// path is logged) instead of removing it.
	KeepData bool
	// Log receives progress lines (nil: discarded).
	Log io.Writer
}

// Report is the outcome of Run.
type Report struct {
	Machine Machine `json:"machine"`
	Quick   bool    `json:"quick"`
	Rows    []Row   `json:"rows"`
	// Profile is the summary of the raftstore put CPU profile, if taken.
	Profile string `json:"profile,omitempty"`
	// Notes lists what was not measured and why.
	Notes []string `json:"notes,omitempty"`
	// Curves are the scaling section's curves (scaling.go), if measured.
	Curves []Curve        `json:"curves,omitempty"`
	Raw    map[string]any `json:"raw,omitempty"`
	Took   string         `json:"took"`
}

type runner struct {
	cfg Config
	rep *Report
	raw map[string]any
}

func (r *runner) logf(format string, args ...any) {
	if r.cfg.Log != nil {
		fmt.Fprintf(r.cfg.Log, "%s "+format+"\n", append([]any{time.Now().UTC().Format("15:04:05")}, args...)...)
	}
}

func (r *runner) add(row Row)   { r.rep.Rows = append(r.rep.Rows, row) }
func (r *runner) note(s string) { r.rep.Notes = append(r.rep.Notes, s); r.logf("note: %s", s) }
func (r *runner) skipped(s string) bool {
	for _, x := range r.cfg.Skip {
		if x == s {
			return true
		}
	}
	return false
}

// Run measures every section not in cfg.Skip and returns the report; a
// section that fails leaves n/a rows and a note rather than failing Run.
func Run(ctx context.Context, cfg Config) (*Report, error) {
	if cfg.Bin == "" || cfg.Root == "" {
		return nil, errors.New("bench: Config.Bin and Config.Root are required")
	}
	if cfg.Dataset == "" {
		cfg.Dataset = filepath.Join(cfg.Root, "datasets", "fashion-mnist")
	}
	start := time.Now()
	r := &runner{cfg: cfg, rep: &Report{Quick: cfg.Quick}, raw: map[string]any{}}
	r.rep.Raw = r.raw
	tmp, err := os.MkdirTemp("", "raftps-bench-")
	if err != nil {
		return nil, err
	}
	if cfg.KeepData {
		r.logf("data and logs kept in %s", tmp)
	} else {
		defer os.RemoveAll(tmp)
	}

	etcdBin := ""
	needClusters := !r.skipped("kv") || !r.skipped("etcdclient") || !r.skipped("failover")
	if needClusters {
		etcdBin, err = ensureEtcd(ctx, r.logf)
		if err != nil {
			r.note(fmt.Sprintf("etcd unavailable, etcd columns are n/a: %v", err))
		}
	}
	r.rep.Machine = DescribeMachine(ctx, etcdBin)
	r.logf("machine: %s", strings.Join(r.rep.Machine.Lines(), "; "))

	if needClusters {
		r.storeSections(ctx, tmp, etcdBin)
	}
	if !r.skipped("tls") {
		r.tlsSection(ctx, tmp)
	}
	if !r.skipped("training") {
		r.trainingSection(ctx, tmp)
	}
	if !r.skipped("replicas") {
		r.replicasSection(ctx, tmp) // replicas.go
	}
	if !r.skipped("gobench") {
		r.goBenchSection(ctx)
	}
	if !r.skipped("profile") {
		r.profileSection(ctx, tmp)
	}
	if !r.skipped("scaling") {
		r.scalingSection(ctx, tmp)
	}
	r.rereplicateSection(ctx) // skipped inside for "rereplicate" (rereplicate.go)
	r.rep.Took = time.Since(start).Round(time.Second).String()
	return r.rep, ctx.Err()
}

// storeSections starts raftps and etcd side by side and runs the kv and
// failover sections on them.
func (r *runner) storeSections(ctx context.Context, tmp, etcdBin string) {
	var clusters []Cluster
	rc, err := r.startRaftps(ctx, filepath.Join(tmp, "raftps"), "")
	if rc != nil {
		defer rc.Close()
	}
	if err != nil {
		r.note(fmt.Sprintf("raftps cluster did not start: %v (logs in %s)", err, tmp))
		return
	}
	clusters = append(clusters, rc)
	if etcdBin != "" {
		ec, err := newEtcdCluster(etcdBin, filepath.Join(tmp, "etcd"), 3)
		if err == nil {
			err = os.MkdirAll(filepath.Join(tmp, "etcd"), 0o755)
		}
		if err == nil {
			sctx, cancel := context.WithTimeout(ctx, 60*time.Second)
			err = ec.Start(sctx)
			cancel()
		}
		if ec != nil {
			defer ec.Close()
		}
		if err != nil {
			r.note(fmt.Sprintf("etcd cluster did not start: %v", err))
		} else {
			clusters = append(clusters, ec)
		}
	}
	r.logf("clusters up: %d", len(clusters))
	if !r.skipped("kv") {
		// A second raftps cluster on raft-wal (--raft-log-store wal) for
		// the 1-client put row, up only during the kv section.
		var wal Cluster
		wc, err := r.startRaftps(ctx, filepath.Join(tmp, "raftps-wal"), raftstore.LogStoreWAL)
		if err != nil {
			r.note(fmt.Sprintf("raftps-wal cluster did not start: %v (logs in %s)", err, tmp))
		} else {
			wal = wc
		}
		r.kvSection(ctx, clusters, wal)
		if wc != nil {
			wc.Close()
		}
	}
	if !r.skipped("etcdclient") {
		r.etcdClientSection(ctx, clusters)
	}
	if !r.skipped("failover") {
		r.failoverSection(ctx, clusters)
	}
}

// startRaftps starts a 3-node raftps cluster in dir with the Raft log
// store logStore ("": the default) and waits for its leader. The cluster
// is returned (to Close) even when it did not come up.
func (r *runner) startRaftps(ctx context.Context, dir, logStore string) (*raftpsCluster, error) {
	rc, err := newRaftpsCluster(r.cfg.Bin, dir, 3, logStore)
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	sctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	return rc, rc.Start(sctx)
}

// WriteText writes the machine header, the table, the profile summary and
// the notes as plain text.
func (rep *Report) WriteText(w io.Writer) error {
	var b strings.Builder
	mode := "full"
	if rep.Quick {
		mode = "quick"
	}
	fmt.Fprintf(&b, "raftps bench (%s run, took %s)\n", mode, rep.Took)
	for _, l := range rep.Machine.Lines() {
		b.WriteString("  " + l + "\n")
	}
	b.WriteString("RATIO is raftps/baseline, both measured in this run; for times (lower better) a ratio below 1 means raftps is faster.\n\n")
	if err := WriteTable(&b, rep.Rows); err != nil {
		return err
	}
	if len(rep.Notes) > 0 {
		b.WriteString("\nNotes:\n")
		for _, n := range rep.Notes {
			b.WriteString("  - " + n + "\n")
		}
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// WriteMarkdown writes the results file: machine header, the aligned table
// (in a code block), the same as a markdown table, the profile summary
// and the notes.
func (rep *Report) WriteMarkdown(w io.Writer) error {
	var b strings.Builder
	mode := "full"
	if rep.Quick {
		mode = "quick"
	}
	fmt.Fprintf(&b, "# raftps bench, %s (%s run, took %s)\n\n## Machine\n\n", rep.Machine.Time, mode, rep.Took)
	for _, l := range rep.Machine.Lines() {
		b.WriteString("- " + l + "\n")
	}
	b.WriteString("\nRATIO is raftps/baseline, both measured in this run (the machine is shared and noisy: read the ratios, not the absolute values). For times (lower better) a ratio below 1 means raftps is faster.\n\n## Table\n\n```\n")
	if err := WriteTable(&b, rep.Rows); err != nil {
		return err
	}
	b.WriteString("```\n\n")
	if err := WriteMarkdownTable(&b, rep.Rows); err != nil {
		return err
	}
	writeScaling(&b, rep.Curves)
	if rep.Profile != "" {
		b.WriteString("\n## CPU profile of raftstore puts\n\n" + rep.Profile + "\n")
	}
	if len(rep.Notes) > 0 {
		b.WriteString("\n## Notes\n\n")
		for _, n := range rep.Notes {
			b.WriteString("- " + n + "\n")
		}
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// Save writes dir/<UTC timestamp>.md and .json and returns their paths.
func (rep *Report) Save(dir string) ([]string, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	stamp := time.Now().UTC().Format("20060102T150405Z")
	if t, err := time.Parse(time.RFC3339, rep.Machine.Time); err == nil {
		stamp = t.UTC().Format("20060102T150405Z")
	}
	if err := savePlots(dir, "scaling-"+stamp, rep.Curves); err != nil {
		return nil, err
	}
	md := filepath.Join(dir, stamp+".md")
	var b strings.Builder
	if err := rep.WriteMarkdown(&b); err != nil {
		return nil, err
	}
	if err := os.WriteFile(md, []byte(b.String()), 0o644); err != nil {
		return nil, err
	}
	js, err := json.MarshalIndent(rep, "", "  ")
	if err != nil {
		return nil, err
	}
	jp := filepath.Join(dir, stamp+".json")
	if err := os.WriteFile(jp, append(js, '\n'), 0o644); err != nil {
		return nil, err
	}
	return []string{md, jp}, nil
}
